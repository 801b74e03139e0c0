"""Keys flow through the builders; key sets that would give wrong math are errors;
the multi-agent layout is rejected with its workaround; small buffers sample
with replacement."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from conftest import steps
from torchrl_ext import NStepReplayStorage, make_her_replay_buffer, make_replay_buffer
from torchrl_ext.samplers import PrioritizedTransitionSampler, SequenceSampler

T = 4  # one env, one episode of 4 steps (obs t = t), terminated at its last step


def renamed(td: TensorDict, **names: str) -> TensorDict:
    """``td`` with entries under "next" renamed (``reward="r"``); "done" dropped."""
    out = td.exclude(("next", "done"))
    for old, new in names.items():
        out.rename_key_(("next", old), ("next", new))
    return out


def terminated_episode() -> TensorDict:
    obs = torch.arange(T, dtype=torch.float32).view(1, T, 1)
    nxt = obs + 1
    term = torch.zeros(1, T, 1, dtype=torch.bool)
    term[0, -1] = True
    return steps(obs, nxt, terminated=term, reward=torch.ones(1, T, 1))


def windows_by_step(rb, draws: int = 30) -> dict[float, tuple[float, float]]:
    """step -> (n-step return, bootstrap discount) over many samples."""
    seen = {}
    for _ in range(draws):
        b = rb.sample(8)
        seen.update(zip(b["observation"].view(-1).tolist(),
                        zip(b["next", "reward"].view(-1).tolist(), b["discount"].view(-1).tolist())))
    return dict(sorted(seen.items()))


# ------------------------------------------------------------------ done keys
def test_custom_done_keys_reach_the_nstep_transform():
    """Windows ending at the termination get discount 0 (it was 0.5/0.25/0.125:
    the transform looked for ("next", "terminated"), absent under custom keys)."""
    rb = make_replay_buffer(64, n_step=3, gamma=0.5, seed=0,
                            done_keys=[("next", "term"), ("next", "trunc")],
                            terminated_key=("next", "term"))
    rb.extend(renamed(terminated_episode(), terminated="term", truncated="trunc"))
    assert windows_by_step(rb) == {0.0: (1.75, 0.125), 1.0: (1.75, 0.0), 2.0: (1.5, 0.0),
                                   3.0: (1.0, 0.0)}


@pytest.mark.parametrize("which", range(4))
def test_every_one_of_four_done_keys_ends_an_episode(which):
    # the done flags are OR-ed: with more than three keys, the second one was left out
    keys = [("next", f"d{i}") for i in range(4)]
    rb = make_replay_buffer(64, seed=0, done_keys=keys, terminated_key=keys[0])
    T = 6
    flags = {f"d{i}": torch.zeros(1, T, 1, dtype=torch.bool) for i in range(4)}
    flags[f"d{which}"][0, 2] = True  # steps 0-2, then 3-5: two episodes
    data = steps(torch.arange(float(T)).view(1, T, 1), torch.arange(1.0, T + 1.0).view(1, T, 1))
    data["next"].update(flags)
    del data["next", "done"], data["next", "terminated"], data["next", "truncated"]
    rb.extend(data)
    first, count = rb.storage.index.complete_episodes()
    assert count.tolist() == [1]  # the first episode ended at step 2; the second runs


def test_custom_done_keys_without_their_terminated_key_are_an_error():
    with pytest.raises(ValueError, match=r"make_replay_buffer: terminated_key=\('next', "
                       r"'terminated'\) is not one of done_keys=\[\('next', 'term'\), "
                       r"\('next', 'trunc'\)\]: n-step windows would not stop at terminations"):
        make_replay_buffer(64, n_step=3, done_keys=[("next", "term"), ("next", "trunc")])
    with pytest.raises(ValueError, match=r"make_her_replay_buffer: terminated_key=\('next', "
                       r"'terminated'\) is not one of done_keys=\[\('next', 'done'\)\]"):
        make_her_replay_buffer(64, lambda a, d, i: a.sum(-1), done_keys=[("next", "done")])


def test_nstep_batch_without_the_terminated_entry_is_an_error():
    """Data that only says "done" cannot tell a termination from a truncation."""
    rb = make_replay_buffer(64, n_step=3, seed=0)
    rb.extend(terminated_episode().exclude(("next", "terminated"), ("next", "truncated")))
    with pytest.raises(KeyError, match=r"NStepTransform: the termination entry \('next', "
                       r"'terminated'\) is not in the sampled batch \(entries under 'next': "
                       r"'done', 'observation', 'reward'\); a window cannot tell a termination"):
        rb.sample(4)


def test_done_as_the_terminated_key_is_an_explicit_choice():
    """With terminated_key=("next", "done"), every episode end stops the bootstrap."""
    rb = make_replay_buffer(64, n_step=3, gamma=0.5, seed=0, done_keys=[("next", "done")],
                            terminated_key=("next", "done"))
    rb.extend(terminated_episode().exclude(("next", "terminated"), ("next", "truncated")))
    assert windows_by_step(rb)[1.0] == (1.75, 0.0)


# ------------------------------------------------------------- other keys
def test_reward_key_reaches_writer_and_nstep_transform():
    rb = make_replay_buffer(64, n_step=2, gamma=0.5, seed=0, reward_key=("next", "r"))
    rb.extend(renamed(terminated_episode(), reward="r"))
    batch = rb.sample(16)
    assert "reward" not in batch["next"].keys()
    assert set(batch["next", "r"].view(-1).tolist()) == {1.5, 1.0}  # 1 + 0.5, or the last step
    with pytest.raises(KeyError, match=r"reward entry \('next', 'reward'\) is missing .* pass "
                       "reward_key= if it has another name"):
        make_replay_buffer(64).extend(renamed(terminated_episode(), reward="r"))


def test_discount_key_is_settable():
    rb = make_replay_buffer(64, n_step=2, seed=0, discount_key="gamma_k")
    rb.extend(terminated_episode())
    assert "discount" not in rb.sample(4).keys() and "gamma_k" in rb.sample(4).keys()


def test_mask_and_traj_keys_reach_the_writer():
    obs = torch.arange(6, dtype=torch.float32).view(2, 3, 1)  # env 1 holds 3, 4, 5
    td = steps(obs, obs + 1)
    td.set(("collector", "valid"), torch.tensor([[True] * 3, [False] * 3]))
    rb = make_replay_buffer(64, batch_size=32, seed=0, mask_key=("collector", "valid"))
    rb.extend(td)
    assert set(rb.sample()["observation"].view(-1).tolist()) == {0.0, 1.0, 2.0}

    flat = steps(torch.arange(4.0).view(4, 1), torch.arange(4.0).view(4, 1) + 1)
    flat.set("episode_id", torch.tensor([7, 7, 8, 8]))  # a new id starts an episode
    rb = make_replay_buffer(64, batch_size=64, n_step=3, gamma=0.5, seed=0, num_streams=2,
                            traj_key="episode_id")
    rb.extend(flat)
    assert set(rb.sample()["steps_to_next_obs"].view(-1).tolist()) == {1, 2}


def test_her_builder_passes_reward_and_terminated_keys():
    goal = torch.zeros(1, T, 2)
    td = renamed(terminated_episode(), reward="r", terminated="term")
    td.update({"desired_goal": goal + 9, "achieved_goal": goal,
               "next": {"desired_goal": goal + 9, "achieved_goal": goal}})
    rb = make_her_replay_buffer(
        64, lambda achieved, desired, infos: torch.full((achieved.shape[0],), 5.0),
        strategy="final", num_goals=1, batch_size=8, seed=0, reward_key=("next", "r"),
        terminated_key=("next", "term"), done_keys=[("next", "term"), ("next", "truncated")],
        terminated_fn=lambda achieved, desired, infos: torch.ones(achieved.shape[0], dtype=torch.bool),
    )
    rb.extend(td)
    batch = rb.sample()
    assert batch["next", "r"][4:].view(-1).tolist() == [5.0] * 4  # relabelled half
    assert batch["next", "term"][4:].all() and (batch["discount"][4:] == 0).all()


# -------------------------------------------------------------- multi-agent
def multi_agent(n_envs: int = 2, n_agents: int = 3) -> TensorDict:
    """TorchRL's multi-agent layout: ("agents", ...) [N, T, A], per-agent rewards."""
    done = torch.zeros(n_envs, T, 1, dtype=torch.bool)
    done[:, -1] = True
    obs = torch.arange(T, dtype=torch.float32).view(1, T, 1, 1).expand(n_envs, T, n_agents, 2)
    per_agent = done.unsqueeze(-2).expand(n_envs, T, n_agents, 1).clone()
    return TensorDict({
        "agents": TensorDict({"observation": obs, "action": torch.zeros(n_envs, T, n_agents, 1)},
                             [n_envs, T, n_agents]),
        "next": {
            "agents": TensorDict({"observation": obs + 1, "reward": torch.ones(n_envs, T, n_agents, 1),
                                  "terminated": per_agent, "done": per_agent.clone()},
                                 [n_envs, T, n_agents]),
            "terminated": done, "done": done.clone(),
        },
    }, [n_envs, T])


def test_multi_agent_layout_is_rejected_with_the_workaround():
    with pytest.raises(KeyError, match=r"reward entry \('next', 'reward'\) is missing .* "
                       r"\('next', 'agents', 'reward'\) looks like a per-agent reward: TorchRL's "
                       r"multi-agent layout .* td\['next', 'reward'\] = "
                       r"td\[\('next', 'agents', 'reward'\)\]\.sum\(-2\)"):
        make_replay_buffer(64, n_step=2).extend(multi_agent())
    with pytest.raises(ValueError, match=r"\('next', 'agents', 'reward'\) has shape \(2, 4, 3, 1\), "
                       r"expected \(2, 4, 1\): one value per env step, not per agent\. TorchRL's "
                       r"multi-agent layout"):
        make_replay_buffer(64, n_step=2, reward_key=("next", "agents", "reward")).extend(multi_agent())
    with pytest.raises(ValueError, match=r"\('next', 'agents', 'done'\) has shape \(2, 4, 3, 1\).*"
                       r"td\[\('next', 'agents', 'done'\)\]\.any\(-2\)"):
        td = multi_agent()
        td["next", "reward"] = td["next", "agents", "reward"].sum(-2)
        make_replay_buffer(64, done_keys=[("next", "agents", "done")]).extend(td)


def test_multi_agent_workaround_shared_reward_per_agent_entries_kept():
    td = multi_agent()
    td["next", "reward"] = td["next", "agents", "reward"].sum(-2)  # [N, T, 1]
    rb = make_replay_buffer(64, n_step=2, gamma=0.5, seed=0)
    rb.extend(td)
    batch = rb.sample(32)
    assert batch["agents", "observation"].shape == (32, 3, 2)
    t = batch["agents", "observation"][:, 0, 0]
    k = batch["steps_to_next_obs"].view(-1).float()
    # per-agent next observation after the window, shared n-step return of 3 agents
    assert torch.equal(batch["next", "agents", "observation"][:, 0, 0], t + k)
    expected = torch.where(t == 3, torch.tensor(3.0), torch.tensor(4.5))
    assert torch.equal(batch["next", "reward"].view(-1), expected)


# --------------------------------------------------------- small buffers
@pytest.mark.parametrize("build", [
    lambda: make_replay_buffer(64, seed=0),
    lambda: make_replay_buffer(64, n_step=3, seed=0),
    lambda: make_replay_buffer(64, sampler=PrioritizedTransitionSampler(), seed=0),
    lambda: make_replay_buffer(64, sampler=SequenceSampler(2), seed=0),
], ids=["uniform", "nstep", "prioritized", "sequence"])
def test_batches_larger_than_the_buffer_sample_with_replacement(build):
    rb = build()
    with pytest.raises(ValueError, match="cannot sample: the buffer holds no transition yet; "
                       "extend it first"):
        rb.sample(4)
    rb.extend(terminated_episode())
    batch = rb.sample(256)  # 4 transitions
    assert batch.shape[0] == 256
    assert set(batch["observation"][:, 0].reshape(-1).tolist()) <= {0.0, 1.0, 2.0, 3.0}
    assert len(set(batch["observation"].reshape(-1).tolist())) > 1
    with pytest.raises(ValueError, match=r"cannot sample: batch_size=0, expected >= 1"):
        rb.sample(0)


def test_batch_size_error_says_draws_are_with_replacement():
    rb = make_replay_buffer(64, seed=0)
    rb.extend(terminated_episode())
    with pytest.raises(ValueError, match=r"cannot sample: batch_size=0, expected >= 1 \(the "
                       r"buffer holds 4 transitions; batches are drawn with replacement\)"):
        rb.sample(0)


def test_rllte_facade_samples_its_batch_size_from_a_few_steps():
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    storage = NStepReplayStorage(envs.single_observation_space, envs.single_action_space,
                                 num_envs=2, batch_size=256, num_workers=0, seed=0)
    obs, _ = envs.reset(seed=0)
    stored = []
    for _ in range(5):
        stored += [tuple(row) for row in obs.tolist()]
        action = envs.action_space.sample()
        nxt, reward, terminated, truncated, infos = envs.step(action)
        storage.add(obs, action, reward, terminated, truncated, infos, nxt)
        obs = nxt
    envs.close()
    assert len(storage) == 10
    batch = storage.sample()
    assert batch.rewards.shape == (256, 1)
    drawn = {tuple(row) for row in batch.observations.tolist()}
    assert drawn <= set(stored) and len(drawn) > 1  # the 10 stored steps, with replacement


def test_sample_refuses_a_batch_size_that_is_not_an_int_and_a_base_that_is_not_a_sampler():
    # rb.sample(2.5) failed deep inside torch; NStepSampler(base="x") was built, and failed later
    from torchrl_ext.samplers import NStepSampler

    rb = make_replay_buffer(16, seed=0)
    rb.extend(TensorDict({"observation": torch.zeros(2, 3), "action": torch.zeros(2, 1),
                          "next": {"observation": torch.ones(2, 3), "reward": torch.ones(2, 1),
                                   "done": torch.zeros(2, 1, dtype=torch.bool)}}, [2]))
    with pytest.raises(TypeError, match=r"sample: batch_size=2.5 \(float\), expected an int >= 1"):
        rb.sample(2.5)
    assert rb.sample(np.int64(2)).batch_size == (2,)
    with pytest.raises(TypeError, match=r"NStepSampler: base is str, expected a TorchRL Sampler"):
        NStepSampler(3, base="x")
