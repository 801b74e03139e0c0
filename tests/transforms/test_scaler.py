"""StandardScaler: pytorchrl's semantics, minus the NaN of a single sample (M9)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from torchrl_ext.transforms import StandardScaler


def test_statistics_are_mean_and_unbiased_std_per_feature():
    inputs = torch.tensor([[1.0, 10.0], [3.0, 10.0], [5.0, 10.0]])
    targets = torch.tensor([[0.0], [2.0], [4.0]])
    scaler = StandardScaler()
    scaler.fit(inputs, targets)
    assert scaler.input_mu.tolist() == [[3.0, 10.0]]
    assert scaler.input_std.tolist() == [[2.0, 1.0]]  # unbiased std 2; constant column -> 1
    assert scaler.target_mu.tolist() == [[2.0]] and scaler.target_std.tolist() == [[2.0]]
    norm_in, norm_t = scaler.transform(inputs, targets)
    assert norm_in.tolist() == [[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]
    assert norm_t.view(-1).tolist() == [-1.0, 0.0, 1.0]
    assert scaler.transform(inputs)[1] is None


def test_single_sample_gives_std_one_not_nan():
    scaler = StandardScaler()
    scaler.fit(torch.tensor([[2.0, -1.0]]), torch.tensor([[5.0]]))
    assert scaler.input_std.tolist() == [[1.0, 1.0]] and scaler.target_std.tolist() == [[1.0]]
    assert scaler.transform(torch.tensor([[3.0, 0.0]]))[0].tolist() == [[1.0, 1.0]]


def test_tiny_std_becomes_one():
    scaler = StandardScaler()
    scaler.fit(torch.tensor([[1.0], [1.0 + 1e-9]]))
    assert scaler.input_std.item() == 1.0


@given(st.integers(2, 20), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_inverse_transform_undoes_transform(rows, dim, seed):
    g = torch.Generator().manual_seed(seed)
    targets = torch.randn(rows, dim, generator=g, dtype=torch.float64).float() * 3 + 1
    scaler = StandardScaler()
    scaler.fit(torch.randn(rows, 2, generator=g), targets)
    _, norm = scaler.transform(torch.zeros(rows, 2), targets)
    torch.testing.assert_close(scaler.inverse_transform(norm), targets)


def test_in_place_transform_matches_transform():
    scaler = StandardScaler()
    scaler.fit(torch.randn(10, 3), torch.randn(10, 2))
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    expected = scaler.transform(x, y)
    scaler.transform_(x, y)
    assert torch.equal(x, expected[0]) and torch.equal(y, expected[1])
    with pytest.raises(RuntimeError, match=r"transform_: not fitted yet"):
        StandardScaler().transform_(x)


def test_ensemble_batches_broadcast():
    scaler = StandardScaler()
    scaler.fit(torch.randn(10, 3), torch.randn(10, 2))
    norm_in, norm_t = scaler.transform(torch.randn(5, 4, 3), torch.randn(5, 4, 2))
    assert norm_in.shape == (5, 4, 3) and norm_t.shape == (5, 4, 2)


def test_state_dict_round_trip():
    scaler = StandardScaler()
    scaler.fit(torch.randn(10, 3), torch.randn(10, 2))
    other = StandardScaler()
    other.load_state_dict(scaler.state_dict())
    x = torch.randn(4, 3)
    assert torch.equal(other.transform(x)[0], scaler.transform(x)[0])


def test_errors():
    scaler = StandardScaler()
    with pytest.raises(RuntimeError, match=r"transform: not fitted yet; call fit"):
        scaler.transform(torch.zeros(1, 2))
    with pytest.raises(RuntimeError, match=r"inverse_transform: not fitted yet"):
        scaler.inverse_transform(torch.zeros(1, 2))
    with pytest.raises(ValueError, match=r"inputs has shape \(0, 2\), expected \(rows >= 1"):
        scaler.fit(torch.zeros(0, 2))
    with pytest.raises(TypeError, match=r"targets is list, expected a tensor"):
        scaler.fit(torch.zeros(2, 2), [[1.0], [2.0]])
    scaler.fit(torch.zeros(2, 2))
    with pytest.raises(RuntimeError, match=r"got targets, but fit\(\) was called without targets"):
        scaler.transform(torch.zeros(1, 2), torch.zeros(1, 1))
    with pytest.raises(RuntimeError, match=r"inverse_transform: fit\(\) was called without targets"):
        scaler.inverse_transform(torch.zeros(1, 1))


def test_a_fit_without_targets_drops_the_target_statistics_of_an_earlier_fit():
    # they belonged to other data: transform / inverse_transform used them silently
    scaler = StandardScaler()
    scaler.fit(torch.zeros(3, 2), torch.full((3, 1), 50.0))
    scaler.fit(torch.ones(3, 2))
    assert scaler.target_mu is None and scaler.target_std is None
    with pytest.raises(RuntimeError, match=r"got targets, but fit\(\) was called without targets"):
        scaler.transform(torch.zeros(1, 2), torch.zeros(1, 1))


def test_load_state_dict_refuses_unknown_entries_naming_them():
    scaler = StandardScaler()
    with pytest.raises(KeyError, match=r"StandardScaler.load_state_dict: unknown entries \['input_mean'\]; "
                                       r"expected \['input_mu', 'input_std', 'target_mu', 'target_std'\]"):
        scaler.load_state_dict({"input_mean": torch.zeros(1, 2)})
    assert not hasattr(scaler, "input_mean") and not scaler.fitted


def test_nan_features_and_a_transform_of_another_width_are_refused_naming_them():
    # a NaN feature made every statistic of it NaN, and each batch with it, silently;
    # inputs of another width failed with torch's broadcasting message
    scaler = StandardScaler()
    x = torch.tensor([[0.0, 1.0, float("nan")], [1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match=r"fit: inputs features \[2\] hold NaN or infinite values"):
        scaler.fit(x)
    scaler.fit(x[:, :2], torch.ones(2, 1))
    with pytest.raises(ValueError, match=r"transform: inputs have 3 features \(shape \(2, 3\)\), expected 2 as in fit\(\)"):
        scaler.transform(x)
    with pytest.raises(ValueError, match=r"inverse_transform: targets have 2 features \(shape \(1, 2\)\), expected 1"):
        scaler.inverse_transform(torch.ones(1, 2))
    # in place: targets of another width were broadcast into silently, nothing changed on refusal
    inputs, targets = torch.ones(1, 2), torch.ones(1, 3)
    with pytest.raises(ValueError, match=r"transform_: targets have 3 features \(shape \(1, 3\)\), expected 1 as in fit\(\)"):
        scaler.transform_(inputs, targets)
    assert inputs.tolist() == [[1.0, 1.0]]
