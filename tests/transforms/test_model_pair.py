"""ModelPairTransform: (obs, action) -> (next_obs - obs, reward) pairs from TorchRL transitions."""
from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from conftest import steps
from torchrl_ext import make_model_based_buffer
from torchrl_ext.transforms import ModelPairTransform, StandardScaler, encode_actions, model_pairs


def test_golden_box_pair():
    obs, nxt = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, 4.0]])
    inputs, targets = model_pairs([obs], [nxt], torch.tensor([[0.25, -1.0]]), torch.tensor([[3.0]]))
    assert inputs.tolist() == [[1.0, 2.0, 0.25, -1.0]]
    assert targets.tolist() == [[-0.5, 2.0, 3.0]]


def test_golden_without_reward_and_several_observation_keys():
    a, a2 = torch.tensor([[1.0]]), torch.tensor([[2.0]])
    b, b2 = torch.tensor([[[1.0, 1.0]]]), torch.tensor([[[0.0, 3.0]]])  # [1, 1, 2]: flattened
    inputs, targets = model_pairs([a, b], [a2, b2], torch.zeros(1, 1), None)
    assert inputs.tolist() == [[1.0, 1.0, 1.0, 0.0]]
    assert targets.tolist() == [[1.0, -1.0, 2.0]]



def test_a_batch_of_no_rows_keeps_its_feature_widths():
    # an empty holdout: [0, dim] pairs (reshape(0, -1) cannot infer the width)
    obs = torch.zeros(0, 2, 3)
    inputs, targets = model_pairs([obs], [obs], torch.zeros(0, 2), torch.zeros(0))
    assert inputs.shape == (0, 6 + 2) and targets.shape == (0, 6 + 1)
    assert encode_actions(torch.zeros(0, 2, 2), None, batch_dims=1).shape == (0, 4)

def test_one_hot_width_is_fixed_not_the_largest_action_seen():
    # pytorchrl's M3: width = max action + 1 failed until action n-1 had occurred
    out = encode_actions(torch.tensor([[0], [1]]), 4, batch_dims=1)
    assert out.tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
    # float-stored discrete actions (pytorchrl stores float32) and [B] shapes work too
    assert encode_actions(torch.tensor([2.0, 0.0]), 3, batch_dims=1).argmax(-1).tolist() == [2, 0]


def test_native_dtypes_become_float_features():
    obs = torch.tensor([[3]], dtype=torch.uint8)
    nxt = torch.tensor([[1]], dtype=torch.uint8)  # uint8 difference would wrap to 254
    inputs, targets = model_pairs([obs], [nxt], torch.zeros(1, 1), None)
    assert inputs.dtype == torch.float32 and targets.tolist() == [[-2.0]]


def test_transform_on_ensemble_batches_and_with_scaler():
    td = TensorDict({"observation": torch.ones(2, 3, 2), "action": torch.zeros(2, 3, 1),
                     "next": {"observation": torch.full((2, 3, 2), 3.0), "reward": torch.ones(2, 3, 1)}},
                    [2, 3])
    scaler = StandardScaler()
    scaler.fit(torch.zeros(4, 3), torch.ones(4, 3) * 2)
    out = ModelPairTransform(scaler=scaler)(td)
    assert out["model_input"].shape == (2, 3, 3) and out["model_target"].shape == (2, 3, 3)
    assert out["model_target"][0, 0].tolist() == [0.0, 0.0, -1.0]  # (2 - 2) / 1, (1 - 2) / 1


def test_final_and_reset_observations_never_pair():
    # one stream: an episode of 2 steps that terminates, then a truncated one; the
    # storage keeps the true final observations, the pairs never jump to a reset obs
    rb = make_model_based_buffer(64, batch_size=10, seed=0)
    obs = torch.tensor([[0.0, 1.0, 10.0, 11.0]]).unsqueeze(-1)
    nxt = torch.tensor([[1.0, 2.0, 11.0, 12.0]]).unsqueeze(-1)
    term = torch.tensor([[False, True, False, False]]).unsqueeze(-1)
    trunc = torch.tensor([[False, False, False, True]]).unsqueeze(-1)
    rb.extend(steps(obs, nxt, terminated=term, truncated=trunc))
    batch = rb.sample(4)
    pairs = sorted(zip(batch["model_input"][:, 0].tolist(), batch["model_target"][:, 0].tolist()))
    assert pairs == [(0.0, 1.0), (1.0, 1.0), (10.0, 1.0), (11.0, 1.0)]  # both episode ends kept


def test_errors():
    td = TensorDict({"observation": torch.zeros(2, 1), "action": torch.tensor([[0], [5]]),
                     "next": {"observation": torch.zeros(2, 1), "reward": torch.zeros(2, 1)}}, [2])
    with pytest.raises(ValueError, match=r"'action' holds values in \[0, 5\], expected indices in \[0, 3\)"):
        ModelPairTransform(num_actions=3)(td)
    with pytest.raises(KeyError, match=r"no entry \('next', 'pixels'\)"):
        ModelPairTransform(observation_keys=["pixels"])(td.set("pixels", torch.zeros(2, 1)))
    with pytest.raises(ValueError, match=r"holds non-integer values"):
        encode_actions(torch.tensor([[0.5]]), 2, batch_dims=1)
    with pytest.raises(ValueError, match=r"has shape \(1, 2\); discrete actions \(num_actions=2\) need one value"):
        encode_actions(torch.zeros(1, 2), 2, batch_dims=1)
    with pytest.raises(ValueError, match=r"observation_keys='observation', expected a non-empty sequence"):
        ModelPairTransform(observation_keys="observation")
    with pytest.raises(ValueError, match=r"ModelPairTransform: num_actions=0, expected an int >= 1"):
        ModelPairTransform(num_actions=0)
    with pytest.raises(TypeError, match=r"scaler is int without a transform"):
        ModelPairTransform(scaler=3)
