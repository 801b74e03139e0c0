"""What a write accepts: any TensorDict layout, entries of any dtype and strides, bytes kept exactly."""
from __future__ import annotations

import pytest
import torch
from tensordict import LazyStackedTensorDict, NonTensorData, TensorDict

from conftest import steps
from torchrl_ext import make_replay_buffer


@pytest.mark.parametrize("kind", ["non-tensor entry", "lazy stack"])
def test_any_tensordict_layout_stores_what_a_plain_one_does(kind):
    data = steps(torch.arange(6.0).view(3, 2, 1), torch.arange(1.0, 7.0).view(3, 2, 1))
    variant = data.clone()
    if kind == "non-tensor entry":  # not a tensor leaf: not stored, as TorchRL's leaves skip it
        variant["note"] = NonTensorData("x", batch_size=[3, 2])
    else:
        variant = LazyStackedTensorDict.lazy_stack(list(data.unbind(0)), 0)
    plain, other = make_replay_buffer(64, seed=0), make_replay_buffer(64, seed=0)
    assert torch.equal(plain.extend(data), other.extend(variant))
    assert (plain.storage[:] == other.storage[:]).all()


def test_a_lazy_stack_named_time_is_one_envs_steps():
    # a lazy stack reports no names where a TensorDict does: it was read as 4 envs' steps
    data = steps(torch.arange(4.0).view(4, 1), torch.arange(1.0, 5.0).view(4, 1))
    data.names = ["time"]
    stacked = LazyStackedTensorDict.lazy_stack(list(data.unbind(0)), 0)
    stacked.names = ["time"]
    plain, other = make_replay_buffer(64, seed=0), make_replay_buffer(64, seed=0)
    assert plain.extend(data).tolist() == other.extend(stacked).tolist() == [0, 1, 2, 3]
    assert (plain.storage[:] == other.storage[:]).all()


def test_entries_numpy_lacks_and_strided_entries_round_trip_bit_exactly():
    """bfloat16 (no numpy dtype), a strided view and an action that requires grad."""
    rb = make_replay_buffer(64, batch_size=4, seed=0)
    wide = torch.randn(2, 3, 6)
    obs = wide[:, :, ::2].bfloat16()  # [2 envs, 3 steps, 3]
    nxt = torch.cat([obs[:, 1:], torch.randn(2, 1, 3).bfloat16()], 1)
    action = wide[:, :, 1::3].requires_grad_()  # strided, [2, 3, 2]
    data = steps(obs, nxt, action=action, reward=torch.randn(2, 3, 1))
    rows = rb.extend(data)
    back = rb.storage.get(rows.reshape(-1)).reshape(2, 3)
    assert back["observation"].dtype == torch.bfloat16
    for key in ("observation", ("next", "observation"), ("next", "reward"), ("next", "done")):
        assert torch.equal(back[key], data[key]), key
    assert torch.equal(back["action"], action.detach())
    # a [2] vector-env step (continuing the episodes) whose entries are strided views
    block = torch.randn(2, 3, 6)
    one = steps(nxt[:, -1], block.bfloat16()[:, 1, ::2], action=block[:, 2, 1::3],
                reward=block[:, :, 0].T[:2, :1])
    assert not one["next", "observation"].is_contiguous() and not one["action"].is_contiguous()
    back = rb.storage.get(rb.extend(one))
    for key in ("observation", ("next", "observation"), "action", ("next", "reward")):
        assert torch.equal(back[key], one[key]), key


def test_continuation_check_can_be_left_to_the_producer():
    """A trajectory continued from another observation is refused, unless the
    writer was told its producer cuts such steps itself (as MBReplayBuffer does)."""
    def collected(t0):
        return steps(torch.full((1, 2, 1), t0), torch.full((1, 2, 1), t0 + 1.0),
                     traj_ids=torch.zeros(1, 2, dtype=torch.int64))

    rb = make_replay_buffer(64, seed=0)
    rb.extend(collected(0.0))
    with pytest.raises(ValueError, match="observation differs from that episode's last next"):
        rb.extend(collected(5.0))
    rb = make_replay_buffer(64, seed=0)
    rb.writer.check_continuation = False
    rb.extend(collected(0.0))
    rows = rb.extend(collected(5.0))
    assert rows.shape == (1, 2)


def test_continuation_check_option_is_a_bool():
    from torchrl_ext import TransitionWriter

    with pytest.raises(TypeError, match=r"TransitionWriter: check_continuation='no' \(str\), "
                                        r"expected True or False\."):
        TransitionWriter(check_continuation="no")
    assert TransitionWriter(check_continuation=False).check_continuation is False


@pytest.mark.parametrize("capacity", [96, 12])  # 12: 4 rows a stream, the 5 steps go in time chunks
@pytest.mark.parametrize("with_ids", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_time_first_batch_is_stored_as_its_env_major_transpose(capacity, with_ids, masked):
    """A [T, N] batch named ("time", None) is read in place (time-major), and stored
    exactly as the same steps given [N, T]: same rows, episodes and skipped steps,
    over two writes (the second continues the first's trajectories)."""
    gen = torch.Generator().manual_seed(0)
    N, T = 3, 5
    a, b = (make_replay_buffer(capacity, num_streams=N, seed=0) for _ in range(2))
    last = torch.randn(N, 2, generator=gen)
    for _ in range(2):
        obs = torch.randn(N, T, 2, generator=gen)
        obs[:, 0] = last  # each env's first step observes its last next observation
        env_major = steps(obs, obs + 1, terminated=torch.rand(N, T, 1, generator=gen) < 0.3,
                          traj_ids=torch.arange(N).repeat_interleave(T).view(N, T) if with_ids else None)
        last = obs[:, -1] + 1
        if masked:
            keep = torch.rand(N, T, generator=gen) < 0.8
            keep[:, -1] = True  # the next write's first step follows on from the last step
            env_major.set(("collector", "mask"), keep)
        time_first = env_major.transpose(0, 1).contiguous()
        time_first.names = ["time", None]
        assert torch.equal(a.extend(env_major).T, b.extend(time_first))
    index_a, index_b = a.storage.index.state(), b.storage.index.state()
    for key in ("written", "episode_count", "row_episode", "row_is_step", "episode_length"):
        assert torch.equal(index_a[key], index_b[key]), key
    assert (a.storage[:] == b.storage[:]).all()


def test_a_cut_trajectory_of_one_step_episodes_is_written_in_time_chunks():
    """c steps may need 2c + 1 rows: a new trajectory leaves the running episode's
    pending row, and each step that ends an episode gives the next one a row of its
    own. A 2-step write into 4-row rings was refused ("needs up to 5 rows") where
    the writer splits writes itself; it goes in chunks and keeps the newest rows."""
    rb = make_replay_buffer(4, num_streams=1, seed=0)
    rb.extend(steps(torch.zeros(1, 1, 1), torch.ones(1, 1, 1), traj_ids=torch.zeros(1, 1, dtype=torch.int64)))
    cut = steps(torch.tensor([[[5.0], [7.0]]]), torch.tensor([[[6.0], [8.0]]]),
                terminated=torch.tensor([[[True], [False]]]), traj_ids=torch.ones(1, 2, dtype=torch.int64))
    rows = rb.extend(cut)
    got = rb.storage.get(rows.reshape(-1))
    assert got["observation"].view(-1).tolist() == [5.0, 7.0]
    assert got["next", "observation"].view(-1).tolist() == [6.0, 8.0]
    assert got["next", "terminated"].view(-1).tolist() == [True, False]


def test_flat_trajectories_ended_without_a_done_flag_reuse_their_stream():
    # a single-env collector with reset_at_each_iter=True gives [T] batches whose trajectory
    # id changes with no done flag: each new id claimed a stream of its own and left the
    # old episode open on its stream forever, until the buffer refused the writer
    # ("... none of the 4 streams is free") however many streams it had
    rb = make_replay_buffer(200, num_streams=4, n_step=3, batch_size=64, seed=0)
    for k in range(10):  # trajectory k: obs 1000 k + t, next obs + 1, never done
        obs = (1000.0 * k + torch.arange(4.0)).view(4, 1)
        rb.extend(TensorDict({
            "observation": obs, "action": torch.zeros(4, 1),
            "next": {"observation": obs + 1, "reward": torch.ones(4, 1),
                     "done": torch.zeros(4, 1, dtype=torch.bool), "terminated": torch.zeros(4, 1, dtype=torch.bool)},
            "collector": {"traj_ids": torch.full((4,), k)}}, [4]))
    assert rb.storage.index.writers().tolist() == [0] and rb.storage.index.owned_streams(0).tolist() == [0]
    assert len(rb) == 40
    batch = rb.sample()
    first, after = batch["observation"][:, 0], batch["next", "observation"][:, 0]
    assert bool((after // 1000 == first // 1000).all())  # no window runs into the next trajectory
    assert torch.equal(after - first, batch["steps_to_next_obs"][:, 0].float())
