"""PrioritizedTransitionSampler under refining samplers: a batch position says nothing of its row.

Stratified draws came in segment order (draw ``i`` from segment ``i`` of the
mass, which follows the physical rows). A sampler that treats positions
differently then drew from parts of the buffer only: HindsightSampler
relabels the last positions, so relabelled transitions came from the last
streams and real ones from the first; FrameStackSampler redraws a position
whose stack is lost from the same position of a new batch, so the rows
sharing its segment were drawn too often.
"""
from __future__ import annotations

import collections

import torch
from tensordict import TensorDict

from torchrl_ext import make_her_replay_buffer, make_replay_buffer
from torchrl_ext.samplers import PrioritizedTransitionSampler


def test_hindsight_over_prioritized_relabels_transitions_of_every_env():
    N, T = 4, 50
    rb = make_her_replay_buffer(
        4000, lambda achieved, desired, infos: -(achieved - desired).abs().sum(-1, keepdim=True),
        strategy="future", num_goals=1, num_streams=N, seed=0, batch_size=64,
        sampler=PrioritizedTransitionSampler(alpha=0.6, beta=0.4),
    )
    env = torch.arange(N, dtype=torch.float32).view(N, 1, 1).expand(N, T, 1)
    t = torch.arange(T, dtype=torch.float32).view(1, T, 1).expand(N, T, 1)
    obs = torch.cat([env, t], -1)  # [env, step]: a goal of the future is never [0, 0]
    nxt = obs + torch.tensor([0.0, 1.0])
    done = t == T - 1
    rb.extend(TensorDict({
        "observation": obs, "achieved_goal": obs.clone(), "desired_goal": torch.zeros(N, T, 2),
        "action": torch.zeros(N, T, 1),
        "next": {"observation": nxt, "achieved_goal": nxt.clone(), "desired_goal": torch.zeros(N, T, 2),
                 "reward": torch.zeros(N, T, 1), "done": done, "terminated": done.clone()},
    }, [N, T]))
    real, relabelled = collections.Counter(), collections.Counter()
    for _ in range(100):
        batch = rb.sample()
        envs = batch["observation"][:, 0].long().tolist()
        goals = (batch["desired_goal"] != 0).any(-1).tolist()
        for e, goal in zip(envs, goals):
            (relabelled if goal else real)[e] += 1
    # equal priorities: each env holds a quarter of the mass, in either role
    # (before: real [3200, 3200, 0, 0], relabelled [0, 0, 3200, 3200])
    for counts in (real, relabelled):
        assert all(0.2 < counts[e] / 3200 < 0.3 for e in range(N)), counts


def test_frame_stacks_over_prioritized_keep_the_probabilities_of_the_servable_transitions():
    """One stream of 8 rows holding steps 3..10 of one episode: with n_frames=3,
    transitions 5..9 have their stack held, each with probability 1/5 (equal
    priorities). A batch of 7 drew step 5 with probability 0.43."""
    obs = torch.arange(10.0).view(1, 10, 1)
    data = TensorDict({"observation": obs, "action": obs.clone(),
                       "next": {"observation": obs + 1, "reward": torch.zeros(1, 10, 1),
                                "done": torch.zeros(1, 10, 1, dtype=torch.bool)}}, [1, 10])
    sampler = PrioritizedTransitionSampler(alpha=1.0, beta=1.0, eps=0.0)
    rb = make_replay_buffer(8, sampler=sampler, n_frames=3, batch_size=7, seed=0)
    rb.extend(data)
    counts: collections.Counter = collections.Counter()
    for _ in range(2000):
        counts.update(rb.sample()["observation"][:, -1, 0].tolist())
    assert sorted(counts) == [5.0, 6.0, 7.0, 8.0, 9.0]
    for step in counts:  # 14,000 draws: a standard deviation of 0.0034
        assert abs(counts[step] / 14_000 - 0.2) < 0.015, counts
