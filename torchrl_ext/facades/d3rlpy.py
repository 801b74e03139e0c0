"""d3rlpy 1.0's online ``BatchReplayBuffer`` API over the episode-aware components."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl_ext.buffer import TransitionReplayBuffer
from torchrl_ext.builders import make_replay_buffer
from torchrl_ext.core.checks import EmptyBufferError, check_count, check_finite_rows, check_flag, check_number
from torchrl_ext.core.schema import get_unchecked
from torchrl_ext.facades._convert import discrete_n
from torchrl_ext.facades._d3rlpy_batch import BatchReplayBatch, Episode
from torchrl_ext.facades._d3rlpy_inputs import AppendInputs, flags, spaces
from torchrl_ext.facades._snapshots import dump_facade, load_facade
from torchrl_ext.sample_index import SampleIndex
from torchrl_ext.samplers import FrameStackSampler, NStepSampler
from torchrl_ext.samplers.nstep import StepWindows
from torchrl_ext.samplers.refining import sampler_of_kind
from torchrl_ext.transforms import NStepTransform

__all__ = ["BatchReplayBatch", "BatchReplayBuffer", "Episode"]

_TRAJ = ("collector", "traj_ids")
_MASK = ("collector", "mask")
_ORDER = "append_order"  # root-only entry: global creation order of a transition (D7)
_CHUNK = 64  # appends held before one write (a write costs about as much for one as for 64)


class BatchReplayBuffer:
    """d3rlpy 1.0's ``BatchReplayBuffer`` (online, multi-env), minus its bugs D1-D13.

    ``append`` takes d3rlpy's convention: at each env step, the
    observation just received, the action about to be taken, the reward
    received on arriving (0 at an episode start), ``terminals`` (the
    observation is a true terminal state) and ``clip_episodes`` (the episode
    ends here, by termination or timeout; defaults to ``terminals``). Two
    appends of an env make a transition; a clipped env starts a new chain.
    Env ``i`` is stream ``i`` of an episode-aware storage; a whole episode
    (``episodes=``, :meth:`append_episode`) goes into the stream of an env
    whose chain is not running, the one holding the fewest transitions (if
    every env's chain is running: the stream holding the fewest, whose chain
    is then split there; both parts are kept, and frame stacks and n-step
    windows see an episode boundary at the split). Stored as TorchRL transitions: ``terminated = terminals``,
    ``truncated = clip and not terminal``; the arrival reward and the next
    action are observation-like entries stored once per row.

    Sampling is :class:`~torchrl_ext.samplers.FrameStackSampler` over
    :class:`~torchrl_ext.samplers.NStepSampler` (and
    :class:`~torchrl_ext.samplers.BootstrapMaskSampler` with ``create_mask``)
    with :class:`~torchrl_ext.transforms.NStepTransform`; ``n_frames``,
    ``n_steps`` and ``gamma`` are per call.

    Fixed bugs: masks for every transition incl. appended episodes (D1),
    memory bounded by ``maxlen`` whatever the episode lengths (D2), bool
    flags (D3), arrays copied (D4), gymnasium vector envs and ``env=None``
    (D5), in-progress episodes exported as unfinished (D6), chronological
    re-entrant :attr:`transitions` (D7), frame stacks of any observation and
    validated ``n_steps``/``n_frames`` (D8), ``td_rewards`` (D9), seeded masks
    with any ``p`` (D10), a clear error on an empty buffer (D11), ``n_envs``
    accepted (D13). D12 (d3rlpy's ``BatchEnv.reset()`` makes every env reset
    twice, giving one zero-reward reset-to-reset transition per env) is
    env-side: a gymnasium vector env resets once, and appending its
    ``reset()`` observation then each ``step()``'s gives no such transition.

    Capacity: ``len() <= maxlen`` whatever comes. Each env has a stream of
    ``maxlen // n_envs + 1`` rows, FIFO (d3rlpy's one FIFO of ``maxlen``
    for envs appended in lockstep): whole episodes written first (a
    pre-fill) are the first evicted by the envs' appends, as in d3rlpy. A
    row holds a step; an episode of ``L`` transitions takes ``L + 1`` rows
    (its final observation has its own), so a stream holds ``maxlen //
    n_envs`` transitions of one running episode and about ``L / (L + 1)``
    of that in episodes of ``L`` transitions, where d3rlpy holds ``maxlen``.
    A whole episode goes into one stream: an episode of more than ``maxlen
    // n_envs`` transitions keeps its last ``maxlen // n_envs``.

    Args:
        maxlen (int): capacity in transitions.
        env: a gymnasium vector env, a d3rlpy-style batch env (``len(env)``,
            ``observation_space``, ``action_space``: gymnasium's spaces or old
            gym's, as d3rlpy 1.0's batch envs give) or None (then the keywords).
        episodes (sequence of Episode, optional): written first, in order.
        create_mask (bool): attach bootstrap masks.
        mask_size (int): bits per mask (ensemble size).

    Keyword Args:
        observation_space, action_space (gym.Space): with ``env=None``.
        n_envs (int): with ``env=None`` (the seed's docstring name, D13).
        mask_p (float): probability of a mask bit (d3rlpy: 0.5). Defaults to 0.5.
        seed (int, optional): seeds sampling and masks.
        check_finite (bool): refuse NaN and infinite observations, actions and
            rewards, as the other facades do (d3rlpy stores them). Defaults to ``True``.

    Examples:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from torchrl_ext import BatchReplayBuffer
        >>> env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
        >>> buffer = BatchReplayBuffer(1000, env, create_mask=True, mask_size=3, seed=0)
        >>> obs, _ = env.reset(seed=0)
        >>> reward, terminal = np.zeros(2), np.zeros(2, bool)
        >>> for _ in range(20):
        ...     action = np.array([0, 1])
        ...     buffer.append(obs, action, reward, terminal)
        ...     obs, reward, terminal, truncated, _ = env.step(action)
        >>> batch = buffer.sample(8, n_frames=4, n_steps=3, gamma=0.9)
        >>> batch.observations.shape, batch.masks.shape, batch.actions.dtype
        (torch.Size([8, 4, 4]), torch.Size([3, 8, 1]), torch.int32)
    """

    def __init__(
        self,
        maxlen: int,
        env: Any = None,
        episodes: Sequence[Any] | None = None,
        create_mask: bool = False,
        mask_size: int = 1,
        *,
        observation_space: gym.Space | None = None,
        action_space: gym.Space | None = None,
        n_envs: int | None = None,
        mask_p: float = 0.5,
        seed: int | None = None,
        check_finite: bool = True,
    ) -> None:
        obs_space, act_space, self.n_envs = spaces(env, observation_space, action_space, n_envs)
        if self.n_envs < 1:
            raise ValueError(f"BatchReplayBuffer: n_envs={self.n_envs}, expected >= 1.")
        if getattr(obs_space, "shape", None) is None:
            raise TypeError(
                f"BatchReplayBuffer: observation_space is {type(obs_space).__name__}, which has no "
                "shape; expected an array space (a Box of vectors, or of (C, H, W) uint8 images) "
                "as d3rlpy takes: flatten dict observations first (gymnasium's FlattenObservation)."
            )
        self.observation_shape = tuple(obs_space.shape)
        # (gymnasium's Discrete, or old gym's: d3rlpy 1.0's own batch envs give those)
        n = discrete_n(act_space)
        self.discrete = n is not None
        self.action_size = n if n is not None else int(np.prod(act_space.shape))
        self._inputs = AppendInputs(self.observation_shape, self.discrete, self.action_size, self.n_envs)
        self.image, self.obs_dtype = self._inputs.image, self._inputs.obs_dtype
        self.maxlen = check_count("BatchReplayBuffer", "maxlen", maxlen)
        streams = self.n_envs  # whole episodes go into the envs' streams too
        per_stream = self.maxlen // self.n_envs
        if per_stream < 2:  # a whole episode beside a running one needs 3 rows of a stream
            raise ValueError(
                f"BatchReplayBuffer: maxlen={maxlen} gives each of the n_envs={self.n_envs} "
                f"envs room for {per_stream} transition(s); expected maxlen >= "
                f"{2 * self.n_envs} (2 per env)."
            )
        # checked here, in this API's names (2.5 was truncated to 2 members)
        self.create_mask = check_flag("BatchReplayBuffer", "create_mask", create_mask)
        self.check_finite = check_flag("BatchReplayBuffer", "check_finite", check_finite)
        self.mask_size = check_count("BatchReplayBuffer", "mask_size", mask_size)
        mask_p = check_number("BatchReplayBuffer", "mask_p", mask_p, 0.0, 1.0, low_open=True)
        # a stream's episode of L transitions uses L + 1 rows: per_stream + 1 rows
        # hold at most per_stream transitions, so the envs' appends keep <= maxlen
        # (D2); rows are committed to memory only as they are written
        self._rb = make_replay_buffer(
            streams * (per_stream + 1), num_streams=streams, n_step=1, n_frames=1,
            mask_size=self.mask_size if self.create_mask else None, mask_p=mask_p, seed=seed,
        )
        # the per-call knobs: frame count, window length, discount
        self._frames = sampler_of_kind(self._rb.sampler, FrameStackSampler)
        self._windows = sampler_of_kind(self._rb.sampler, NStepSampler)
        self._nstep = next(t for t in self._rb.transform if isinstance(t, NStepTransform))
        self._frames.keys = (("observation",),)  # actions and rewards are stored once too
        n = self.n_envs
        self._has_prev = np.zeros(n, dtype=bool)
        self._prev_obs = np.zeros((n, *self.observation_shape), self.obs_dtype)
        self._prev_action = np.zeros((n, *self._inputs.action_shape), self._inputs.action_dtype)
        self._prev_reward = np.zeros(n, np.float32)
        self._traj = np.arange(streams, dtype=np.int64)  # current episode id per stream
        self._held = np.zeros(streams, np.int64)  # transitions written to each stream
        self._pending: list[tuple[np.ndarray, ...]] = []  # appends not yet written
        self._order = 0  # transitions created so far
        for episode in episodes or ():
            self.append_episode(episode)

    # ----------------------------------------------------------------- writing
    def append(
        self,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminals: Any,
        clip_episodes: Any = None,
    ) -> None:
        """Append one step of every env (d3rlpy's convention, see the class docs).

        Raises:
            ValueError: a shape does not match the env, flags are not 0/1, a
                discrete action is not an integer in ``[0, n)``, or an env is
                terminal but not clipped.
            TypeError: an input is not numeric, or image observations are not uint8.
        """
        n = self.n_envs
        obs = self._inputs.observations("observations", observations, n, "append")
        act = self._inputs.actions("actions", actions, n, "append")
        rew = self._inputs.check("rewards", rewards, (n,), "append").astype(np.float32)
        term = flags(terminals, "terminals", n)
        clip = term.copy() if clip_episodes is None else flags(clip_episodes, "clip_episodes", n)
        if self.check_finite:
            for name, value in (("observations", obs), ("actions", act), ("rewards", rew)):
                check_finite_rows("BatchReplayBuffer.append", name, value)
        if (term & ~clip).any():
            raise ValueError(
                f"BatchReplayBuffer.append: envs {np.flatnonzero(term & ~clip).tolist()} are "
                "terminal but not clipped; a terminal ends the episode: pass clip_episodes=True there."
            )
        if self._has_prev.any():
            self._pending.append(self._rows(self._has_prev, self._prev_obs, self._prev_action,
                                            self._prev_reward, obs, act, rew, term, clip))
            if len(self._pending) >= _CHUNK:
                self._flush()
        self._prev_obs, self._prev_action, self._prev_reward = obs, act, rew
        self._has_prev = ~clip
        self._traj[clip] += n  # a clipped env's next step opens a new episode

    def _rows(self, valid, obs, act, arrival, next_obs, next_act, next_arrival, term, clip):
        """The ``[n_envs, ...]`` arrays of one step of each env stream (``valid``: it makes a transition)."""
        n = valid.shape[0]
        count = int(valid.sum())
        order = np.zeros(n, np.int64)
        order[valid] = np.arange(self._order, self._order + count)
        self._order += count
        self._held += valid
        col = lambda x: np.asarray(x).reshape(n, 1)
        return (obs, act, col(arrival), next_obs, next_act, col(next_arrival),
                col(term), col(clip & ~term), self._traj.copy(), order, valid.copy())

    def _flush(self) -> None:
        """Write the held appends as one ``[streams, T]`` batch (reads call this first)."""
        if not self._pending:
            return
        # held until written: a write that raises drops none of them
        self._rb.extend(self._transitions_td(*(np.stack(a, axis=1) for a in zip(*self._pending))))
        self._pending = []

    @staticmethod
    def _transitions_td(*arrays: np.ndarray) -> TensorDictBase:
        """``[streams, T]`` rows from numpy arrays (in :meth:`_rows`'s order)."""
        obs, act, arrival, next_obs, next_act, next_arrival, term, trunc, traj, order, mask = (
            torch.from_numpy(a) for a in arrays)
        batch = obs.shape[:2]
        return TensorDict({
            "observation": obs, "action": act, "arrival_reward": arrival,
            _ORDER: order.reshape(*batch, 1),
            "collector": {"traj_ids": traj.reshape(batch), "mask": mask.reshape(batch)},
            "next": {"observation": next_obs, "action": next_act, "arrival_reward": next_arrival,
                     "reward": next_arrival.clone(), "terminated": term, "truncated": trunc,
                     "done": term | trunc},
        }, batch_size=batch)

    def append_episode(self, episode: Any) -> None:
        """Write a whole episode (:class:`Episode` or d3rlpy 1.0's) into an env's stream (see the class docs).

        An episode of one observation (no transition) is checked, then skipped.

        Raises:
            ValueError: its observation shape or action size differs from the
                buffer's, or a discrete action is not an integer in ``[0, n)``.
            TypeError: ``episode`` lacks one of the four attributes, an array
                is not numeric, or its image observations are not uint8.
        """
        missing = [a for a in ("observations", "actions", "rewards", "terminal") if not hasattr(episode, a)]
        if missing:
            raise TypeError(
                f"BatchReplayBuffer.append_episode: episode is {type(episode).__name__}, expected an "
                f"Episode (observations, actions, rewards, terminal); it has no {', '.join(missing)}."
            )
        obs = np.asarray(episode.observations)
        T = obs.shape[0] if obs.ndim else 0
        obs = self._inputs.observations("episode.observations", obs, T, "append_episode")
        act = self._inputs.actions("episode.actions", episode.actions, T, "append_episode")
        rewards = np.asarray(episode.rewards)
        if rewards.ndim == 2 and rewards.shape[1:] == (1,):  # [T, 1] as d3rlpy stores them
            rewards = rewards.reshape(-1)
        rew = self._inputs.check("episode.rewards", rewards, (T,), "append_episode").astype(np.float32)
        if self.check_finite:
            for name, value in (("observations", obs), ("actions", act), ("rewards", rew)):
                if value.dtype.kind == "f" and not np.isfinite(value).all():
                    bad = tuple(np.argwhere(~np.isfinite(value))[0])
                    raise ValueError(
                        f"BatchReplayBuffer.append_episode: episode.{name} at step {int(bad[0])} is "
                        f"{value[bad]}; NaN and infinities poison every target bootstrapped "
                        "from them (pass check_finite=False to store them anyway)."
                    )
        if T < 2:
            return  # no transition (d3rlpy's Episode of one observation has size 0)
        L, n = T - 1, self.n_envs
        # an idle env's stream if any (its chain is not running), the emptiest of them
        stream = int(np.argmin(np.where(self._has_prev, np.iinfo(np.int64).max, self._held)))
        if self._has_prev[stream]:  # every chain runs: split the emptiest stream's chain here
            stream = int(np.argmin(self._held))
            self._flush()
            self._traj[stream] += n

        def lay(x: np.ndarray) -> np.ndarray:  # [L, ...] into ``stream`` of [n_envs, L]
            out = np.zeros((n, L, *x.shape[1:]), x.dtype)
            out[stream] = x
            return out

        terminal = check_flag("BatchReplayBuffer.append_episode", "episode.terminal", episode.terminal)
        term = np.zeros((L, 1), bool)
        term[-1] = terminal
        trunc = np.zeros((L, 1), bool)
        trunc[-1] = not terminal
        order = np.arange(self._order, self._order + L)
        self._order += L
        traj = np.zeros((n, L), np.int64)
        traj[stream] = self._traj[stream]
        self._traj[stream] += n  # the env's next step opens a new episode
        self._held[stream] += L
        mask = np.zeros((n, L), bool)
        mask[stream] = True
        self._flush()
        self._rb.extend(self._transitions_td(
            lay(obs[:-1]), lay(act[:-1]), lay(rew[:-1, None]), lay(obs[1:]), lay(act[1:]),
            lay(rew[1:, None]), lay(term), lay(trunc), traj, lay(order), mask,
        ))

    def clip_episode(self) -> None:
        """End every env's running chain (the next append of each starts a new one)."""
        self._traj[self._has_prev] += self.n_envs
        self._has_prev[:] = False

    # ---------------------------------------------------------------- reading
    def sample(
        self, batch_size: int, n_frames: int = 1, n_steps: int = 1, gamma: float = 0.99
    ) -> BatchReplayBatch:
        """A uniform mini-batch of ``n_steps`` windows with ``n_frames`` stacks.

        Raises:
            ValueError: the buffer is empty (D11), ``n_frames`` / ``n_steps`` /
                ``batch_size`` < 1 (D8), or ``gamma`` is out of ``[0, 1]``.
            TypeError: ``gamma`` is not a number.
        """
        for name, value in (("n_frames", n_frames), ("n_steps", n_steps)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"BatchReplayBuffer.sample: {name}={value!r}, expected an integer >= 1.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"BatchReplayBuffer.sample: batch_size={batch_size!r}, expected an integer >= 1.")
        gamma = check_number("BatchReplayBuffer.sample", "gamma", gamma, 0.0, 1.0)
        # set when they change only: the transform is an nn.Module, whose attribute
        # assignment costs as much as a small gather
        if n_frames != self._frames.n_frames:
            self._frames.n_frames = int(n_frames)
        if n_steps != self._windows.n:
            self._windows.n = int(n_steps)
        if gamma != self._nstep.gamma:
            self._nstep.gamma = float(gamma)
        try:  # with replacement, any batch size (as d3rlpy); masks are the sampler's entries
            td = self.rb.sample(int(batch_size)) if self.create_mask else self.rb.sample_batch(int(batch_size))
        except EmptyBufferError:  # D11, said in this API's words
            raise EmptyBufferError(
                "BatchReplayBuffer.sample: the buffer holds no transition yet; append at "
                "least two steps of an env (or an episode) first."
            ) from None
        return self._batch(td, stacked=True)

    def _batch(self, td: TensorDictBase, *, stacked: bool) -> BatchReplayBatch:
        squeeze = stacked and not self.image and self._frames.n_frames == 1

        def obs(x: torch.Tensor) -> torch.Tensor:
            # vectors keep the frame axis only when frames are stacked
            return x.squeeze(1) if squeeze else x

        def act(x: torch.Tensor) -> torch.Tensor:
            return x.squeeze(-1) if self.discrete else x

        # (entries read without TensorDict's layers: see get_unchecked)
        nxt = get_unchecked(td, "next")
        td_reward = get_unchecked(nxt, "reward")
        fields = {
            "observations": obs(get_unchecked(td, "observation")),
            "actions": act(get_unchecked(td, "action")),
            "rewards": get_unchecked(td, "arrival_reward"),
            "next_observations": obs(get_unchecked(nxt, "observation")),
            "next_actions": act(get_unchecked(nxt, "action")),
            "next_rewards": td_reward,
            "td_rewards": td_reward,
            "terminals": get_unchecked(nxt, "terminated").float(),
            "n_steps": get_unchecked(td, "steps_to_next_obs").float(),
        }
        mask = get_unchecked(td, "mask")
        if mask is not None:
            fields["mask"] = mask
        # every field comes from the batch ``td`` (its batch dims): built without per-field checks
        return BatchReplayBatch.from_tensordict(
            TensorDict._new_unsafe(fields, batch_size=td.batch_size),
            {} if mask is not None else {"mask": None},
        )

    @property
    def rb(self) -> TransitionReplayBuffer:
        """The TorchRL replay buffer underneath, with every append written.

        Appends are written in chunks of up to 64 steps; this (and every read)
        writes the held ones first.
        """
        self._flush()
        return self._rb

    def size(self) -> int:
        """Number of transitions held (at most ``maxlen``)."""
        return len(self.rb)

    def __len__(self) -> int:
        return len(self.rb)

    @property
    def transitions(self) -> BatchReplayBatch:
        """Every transition held, oldest first (creation order), one step each (D7).

        A fresh batch at each access: indexing (negative indices included) and
        iteration are chronological and re-entrant. ``mask`` is None here (masks
        come with samples). An empty buffer gives a batch of no transition
        (d3rlpy's queue is empty then), with the fields' shapes and dtypes.
        """
        if len(self) == 0:
            return self._batch(self._no_transition(), stacked=False)
        storage = self.rb.storage
        rows = storage.live_transition_rows()
        order = storage.get(rows).get(_ORDER).view(-1)
        rows = rows[torch.argsort(order)]
        index = torch.stack([rows, torch.ones_like(rows)], -1)
        td = self._nstep(storage.get(SampleIndex.wrap(index, StepWindows())))
        return self._batch(td, stacked=False)

    def _no_transition(self) -> TensorDict:
        """The entries :meth:`_batch` reads, for no transition: each ``[0, ...]`` as stored."""
        def empty(shape: tuple[int, ...], dtype: type) -> torch.Tensor:
            return torch.from_numpy(np.empty((0, *shape), dtype))

        obs = empty(self.observation_shape, self.obs_dtype)
        action = empty(self._inputs.action_shape, self._inputs.action_dtype)
        reward = empty((1,), np.float32)
        return TensorDict({
            "observation": obs, "action": action, "arrival_reward": reward,
            "steps_to_next_obs": empty((1,), np.int64),
            "next": {"observation": obs, "action": action, "reward": reward,
                     "terminated": empty((1,), np.bool_)},
        }, [0])

    def to_mdp_dataset(self) -> Any:
        """The held episodes as a d3rlpy 2.x ``MDPDataset`` (extra ``d3rlpy``).

        Only what the buffer holds (D6): episodes still being written end with a
        timeout (not terminal: not finished), and an episode whose first
        transitions were dropped starts at its oldest held one. Rewards are
        the TD rewards (d3rlpy 2's convention). See
        :func:`~torchrl_ext.export.to_d3rlpy`.
        """
        from torchrl_ext.export import to_d3rlpy

        return to_d3rlpy(self.rb, observation_key="observation", discrete=self.discrete,
                         action_size=self.action_size)

    # ------------------------------------------------------------- checkpoints
    def dumps(self, path: str | Path) -> None:
        """Checkpoint the buffer under ``path``, atomically (an addition: d3rlpy 1.0 has none).

        The rows, episode index, masks and RNG (``rb.dumps``), and each env's
        running episode: after :meth:`loads`, the next sample is the one this
        buffer would draw, and the next :meth:`append` continues each env's episode.

        Examples:
            >>> import tempfile
            >>> import gymnasium as gym, numpy as np
            >>> box = gym.spaces.Box(-1, 1, (2,), np.float32)
            >>> def filled():
            ...     buffer = BatchReplayBuffer(100, observation_space=box, action_space=box, n_envs=1, seed=0)
            ...     for t in range(3):
            ...         buffer.append(np.full((1, 2), t, np.float32), np.zeros((1, 2), np.float32), [1.0], [0])
            ...     return buffer
            >>> buffer, path = filled(), tempfile.mkdtemp() + "/ckpt"
            >>> buffer.dumps(path)
            >>> copy = BatchReplayBuffer(100, observation_space=box, action_space=box, n_envs=1)
            >>> copy.loads(path)
            >>> bool((copy.sample(4).observations == buffer.sample(4).observations).all())
            True
        """
        self._flush()
        arrays = {"has_prev": self._has_prev, "prev_obs": self._prev_obs, "prev_action": self._prev_action,
                  "prev_reward": self._prev_reward, "traj": self._traj, "held": self._held}
        dump_facade(path, self._rb, "BatchReplayBuffer.dumps", self._layout(), arrays, {"order": self._order})

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` wrote, in place.

        Raises:
            ValueError: the checkpoint is of a buffer with another ``maxlen``,
                env count, observation or action layout (nothing is loaded then),
                or ``path`` holds no checkpoint.
        """
        self._flush()
        arrays, meta = load_facade(path, self._rb, "BatchReplayBuffer.loads", self._layout())
        self._has_prev, self._prev_obs = arrays["has_prev"], arrays["prev_obs"]
        self._prev_action, self._prev_reward = arrays["prev_action"], arrays["prev_reward"]
        self._traj, self._held, self._order = arrays["traj"], arrays["held"], int(meta["order"])

    def _layout(self) -> dict[str, Any]:
        """How this buffer was built, as a checkpoint must match it."""
        return {"maxlen": self.maxlen, "n_envs": self.n_envs, "create_mask": self.create_mask, "observations": [
            list(self._prev_obs.shape[1:]), self._prev_obs.dtype.str], "actions": [
            list(self._prev_action.shape[1:]), self._prev_action.dtype.str]}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(maxlen={self.maxlen}, n_envs={self.n_envs}, "
            f"observation_shape={self.observation_shape}, size={len(self)})"
        )
