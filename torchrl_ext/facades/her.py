"""rllte's ``HerReplayStorage`` API over the episode-aware components."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

import gymnasium as gym
import numpy as np
import torch
from tensordict.utils import NestedKey

from torchrl_ext.builders import make_her_replay_buffer
from torchrl_ext.core.checks import check_count, check_device, check_flag
from torchrl_ext.core.schema import EntryKeyError, as_key, get_unchecked, key_str
from torchrl_ext.envs.gym import AutoresetMode, GymVectorAdapter
from torchrl_ext.facades._batching import ADD_CHUNK, HeldStepsFacade, StepBatcher
from torchrl_ext.facades._convert import check_rows_per_env, space_error, step_inputs, to_numpy
from torchrl_ext.facades._her_infos import INFO_KEY, InfoEntries
from torchrl_ext.facades._numpy_goal_fn import rllte_goal_fn
from torchrl_ext.facades._tensorclass import (
    TensorclassBatch,
    as_float32,
    documented_tensorclass,
)
from torchrl_ext.samplers.uniform import EmptyBufferError

__all__ = ["HerReplayBatch", "HerReplayStorage", "HerReplayTuple", "goal_match_reward"]


def goal_match_reward(
    achieved_goal: torch.Tensor, desired_goal: torch.Tensor, infos: Any = None
) -> torch.Tensor:
    """The default HER reward: ``0.0`` where ``achieved == desired`` exactly, else ``-1.0``.

    SB3's ``BitFlippingEnv.compute_reward`` semantics, generalised to any goal
    shape: ``-(achieved != desired).any()`` over the goal dims, float32 ``(n,)``.
    Continuous goals usually want a tolerance instead, e.g.
    ``lambda a, d, i: -(torch.linalg.norm(a - d, dim=-1) > 0.05).float()``.

    Examples:
        >>> goal_match_reward(torch.tensor([[1, 0], [1, 1]]), torch.tensor([[1, 0], [0, 1]]))
        tensor([ 0., -1.])
    """
    n = achieved_goal.shape[0]
    mismatch = (achieved_goal != desired_goal).reshape(n, -1).any(-1)
    return torch.where(mismatch, -1.0, 0.0).to(torch.float32)


class HerReplayTuple(NamedTuple):
    """rllte's ``DictReplayBatch``: float32 tensors, in its field names and order.

    What :meth:`HerReplayStorage.sample` returns by default, as the original
    did: observations are dicts of float32 tensors, the flags float 0/1 (so
    ``1.0 - batch.terminateds`` works), everything on ``device``.

    Attributes:
        observations: a dict of the Dict space's entries at ``t``.
        actions: ``a_t``.
        rewards: ``[B, 1]``.
        terminateds: ``[B, 1]`` 0.0 / 1.0.
        truncateds: ``[B, 1]`` 0.0 / 1.0.
        next_observations: a dict of the entries at ``t + 1``.

    Examples:
        >>> import torch
        >>> obs = {"desired_goal": torch.zeros(2, 3)}
        >>> batch = HerReplayTuple(obs, torch.zeros(2, 1), -torch.ones(2, 1), torch.ones(2, 1),
        ...                        torch.zeros(2, 1), obs)
        >>> (batch.rewards + 0.9 * (1.0 - batch.terminateds)).view(-1).tolist(), batch._fields[3]
        ([-1.0, -1.0], 'terminateds')
    """

    observations: dict[str, Any]
    actions: torch.Tensor
    rewards: torch.Tensor
    terminateds: torch.Tensor
    truncateds: torch.Tensor
    next_observations: dict[str, Any]


@documented_tensorclass
class HerReplayBatch(TensorclassBatch):
    """A batch of (possibly relabelled) one-step transitions in stored dtypes, rllte's fields.

    What :meth:`HerReplayStorage.sample` returns with ``native=True``.

    The first ``B - n_virtual`` rows are real, the last ``n_virtual =
    int(B * k / (k + 1))`` relabelled. Entries keep their stored dtypes.

    Attributes:
        observations: a TensorDict of the Dict space's entries at ``t``.
        actions: ``a_t`` (``[B, 1]`` for a ``Discrete`` space, else ``[B, *shape]``).
        rewards: ``[B, 1]``; ``reward_fn``'s value for relabelled rows.
        next_observations: a TensorDict of the entries at ``t + 1`` (the true
            final observation at an episode end).
        terminateds: ``[B, 1]`` bool.
        truncateds: ``[B, 1]`` bool.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> obs = TensorDict({"desired_goal": torch.zeros(2, 3)}, [2])
        >>> batch = HerReplayBatch(observations=obs, actions=torch.zeros(2, 1),
        ...     rewards=-torch.ones(2, 1), next_observations=obs.clone(),
        ...     terminateds=torch.zeros(2, 1, dtype=torch.bool),
        ...     truncateds=torch.zeros(2, 1, dtype=torch.bool), batch_size=[2])
        >>> batch.observations["desired_goal"].shape, batch[:1].rewards.shape
        (torch.Size([2, 3]), torch.Size([1, 1]))
    """

    observations: Any
    actions: torch.Tensor
    rewards: torch.Tensor
    next_observations: Any
    terminateds: torch.Tensor
    truncateds: torch.Tensor

    if TYPE_CHECKING:  # the constructor tensorclass generates, for type checkers

        def __init__(
            self,
            *,
            observations: Any,
            actions: torch.Tensor,
            rewards: torch.Tensor,
            next_observations: Any,
            terminateds: torch.Tensor,
            truncateds: torch.Tensor,
            batch_size: Sequence[int] | torch.Size,
            device: torch.device | str | None = None,
        ) -> None: ...


class HerReplayStorage(HeldStepsFacade):
    """Hindsight experience replay with the constructor and methods of rllte's ``HerReplayStorage``.

    Every env of a vector env is stored in its own ring (``storage_size /
    num_envs`` rows each, rounded *up*: :attr:`capacity_per_env`; an episode
    of ``L`` steps uses ``L + 1`` rows). Each :meth:`sample` draws
    ``batch_size`` transitions uniformly among the live ones, in-progress
    episodes included (usable up to their last written step), and relabels the
    last ``int(batch_size * k / (k + 1))`` with a goal achieved at a step of
    the same episode and env, chosen by ``goal_selection_strategy``:

    * ``"future"``: a step ``j >= i`` of the episode (``i`` included);
    * ``"final"``: the episode's last (written) step;
    * ``"episode"``: any live step of the episode;
    * ``"random"``: any live transition of the buffer.

    The goal is the achieved goal *after* step ``j`` (its next observation,
    the true final observation at an episode end, whatever the autoreset
    mode). It is written to the goal entry of the observation and next
    observation, and the reward is recomputed as ``reward_fn(achieved_goal,
    desired_goal, infos)``. Episodes longer than a ring keep their live steps;
    goals only come from live rows. Fixed from the original (regression
    tests ``test_h1_*`` .. ``test_h12_*`` in ``tests/facades/test_her_storage.py``):
    its default ``reward_fn`` was called with the wrong number of arguments,
    ``(B,)`` rewards failed to concatenate, ``"random"`` raised in ``sample``,
    ``reset`` kept stale episodes sampleable, infos were broadcast across
    envs, an episode as long as a ring became unsampleable, nothing could be
    sampled before the first episode ended, and every output was float32.

    :meth:`sample` returns the original's batch by default (an
    :class:`HerReplayTuple` of float32 tensors) while every entry is stored in
    its own dtype; ``native=True`` returns an :class:`HerReplayBatch` in the
    stored dtypes instead (H9).

    ``add`` holds steps and writes them a chunk at a time; every read (and
    ``rb``, the TorchRL buffer underneath, for direct use) writes the held
    ones first.

    Args:
        observation_space (gym.spaces.Dict): holds ``goal_key`` and
            ``achieved_goal_key`` (any other entries too); each entry becomes a
            root entry of the stored rows and keeps its dtype.
        action_space (gym.Space): actions are cast to its dtype; ``Discrete``
            actions may be ``(N,)`` or ``(N, 1)``, ints or floats.
        device (str): where the rows live and batches come out (``"cuda"``: stored
            and sampled on the GPU, no copy per batch; with ``native=True``,
            ``reward_fn`` then gets GPU tensors). Memory grows with the rows on
            either. Defaults to ``"cpu"``.
        storage_size (int): capacity in rows, for all envs together, at least
            2 per env (``storage_size > num_envs``). Defaults to ``1_000_000``.
        num_envs (int): number of envs of the vector env. Defaults to ``1``.
        batch_size (int): batch size of :meth:`sample`. Defaults to ``1024``.
        goal_selection_strategy (str): ``"future"`` (default), ``"final"``,
            ``"episode"`` or ``"random"``.
        num_goals (int): ``k``, virtual goals per real transition (``0``: no
            relabelling). Defaults to ``4``.
        reward_fn (callable, optional): batched ``reward_fn(achieved_goal,
            desired_goal, infos)`` returning ``(n,)`` or ``(n, 1)``, called as
            rllte calls it: numpy arrays in the stored dtypes, and ``infos`` a
            numpy object array of one dict per row with ``copy_info_dict``, a
            list of empty dicts without. With ``native=True``: tensors on
            ``device``, and ``infos`` a ``[n]`` TensorDict (``None`` without
            ``copy_info_dict``). The constructor's ``native`` decides; setting
            the attribute later changes the batches only. Defaults to
            :func:`goal_match_reward`: ``0`` for an exact match, else ``-1``
            (SB3's bit-flipping reward).
        copy_info_dict (bool): store the numeric per-env entries of gymnasium's
            info dict (arrays with a leading ``num_envs`` dim, ``_``-masks
            excluded), or of a list of per-env dicts (SB3 VecEnv infos, LEGACY
            mode; zeros where an env's dict lacks an entry), under ``("next", "info")``,
            and pass each row's entries to ``reward_fn`` (see there). The
            entries of the first :meth:`add` and
            ``info_keys`` fix the set (missing ones are stored as zeros; an entry
            first seen later warns once, naming it: declare it in
            ``info_keys``). In SAME_STEP mode the last step of an episode gets
            its ``final_info`` (not the reset step's info). When ``False`` (the
            default) nothing is stored.

    Keyword Args:
        autoreset_mode (AutoresetMode or str): the vector env's autoreset mode.
            Defaults to gymnasium's default, ``NEXT_STEP``.
        terminated_fn (callable, optional): ``terminated_fn(achieved_goal,
            desired_goal, infos) -> (n,)`` bool recomputing the termination of
            relabelled rows, called as ``reward_fn``; without it they keep their
            stored flags (as in SB3).
        goal_key (NestedKey): the desired goal entry. Defaults to ``"desired_goal"``.
        achieved_goal_key (NestedKey): defaults to ``"achieved_goal"``.
        seed (int, optional): seeds sampling.
        info_keys (sequence of str, optional): info entries stored with
            ``copy_info_dict`` even if the first :meth:`add` lacks them (stored
            as float32 scalars per env, zeros where absent).
        check_finite (bool): refuse NaN and infinite values, as
            :class:`~torchrl_ext.NStepReplayStorage` does. Defaults to ``True``.
        native (bool): return :class:`HerReplayBatch` in stored dtypes instead
            of the original's float32 :class:`HerReplayTuple`. Defaults to ``False``.

    Raises:
        TypeError: ``observation_space`` is not a ``Dict`` space, a space holds
            a ``Tuple`` space, or a count is not an int (``num_goals=2.5``).
        KeyError: a goal key is not in ``observation_space``.
        ValueError: an unknown strategy, a count out of range (``num_goals < 0``),
            a ``device`` string torch does not parse (``"gpu"``), or an entry of
            ``observation_space`` named like a batch entry (``"action"``,
            ``"discount"``, ``"next"``...).

    Examples:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from torchrl_ext import HerReplayStorage
        >>> bits = gym.spaces.MultiBinary(3)
        >>> space = gym.spaces.Dict(observation=bits, achieved_goal=bits, desired_goal=bits)
        >>> storage = HerReplayStorage(space, gym.spaces.Discrete(3), storage_size=100,
        ...     batch_size=3, goal_selection_strategy="final", num_goals=2, seed=0, native=True)
        >>> state, goal = np.zeros((1, 3), np.int8), np.ones((1, 3), np.int8)
        >>> for t in range(3):  # flip bits 0, 1, 2: the goal is reached at the last step
        ...     nxt = state.copy(); nxt[0, t] = 1
        ...     obs = dict(observation=state, achieved_goal=state, desired_goal=goal)
        ...     next_obs = dict(observation=nxt, achieved_goal=nxt, desired_goal=goal)
        ...     storage.add(obs, np.array([t]), np.array([-float(t < 2)]), np.array([t == 2]),
        ...                 np.array([False]), {}, next_obs)
        ...     state = nxt
        >>> batch = storage.sample()  # 1 real row, then 2 relabelled with the final achieved goal
        >>> batch.observations["desired_goal"][1:].tolist()
        [[1, 1, 1], [1, 1, 1]]
        >>> batch.actions.shape, batch.actions.dtype, batch.observations["desired_goal"].dtype
        (torch.Size([3, 1]), torch.int64, torch.int8)
        >>> len(storage)
        3
        >>> storage.native = False  # the original's batch: float32 tensors
        >>> storage.sample().observations["desired_goal"].dtype
        torch.float32
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        device: str = "cpu",
        storage_size: int = 1_000_000,
        num_envs: int = 1,
        batch_size: int = 1024,
        goal_selection_strategy: str = "future",
        num_goals: int = 4,
        reward_fn: Callable[..., Any] | None = None,
        copy_info_dict: bool = False,
        *,
        autoreset_mode: AutoresetMode | str | Any | None = None,
        terminated_fn: Callable[..., Any] | None = None,
        goal_key: NestedKey = "desired_goal",
        achieved_goal_key: NestedKey = "achieved_goal",
        seed: int | None = None,
        info_keys: Sequence[str] = (),
        check_finite: bool = True,
        native: bool = False,
    ) -> None:
        owner = "HerReplayStorage"
        for name, count, low in (("storage_size", storage_size, 1), ("num_envs", num_envs, 1),
                                 ("batch_size", batch_size, 1), ("num_goals", num_goals, 0)):
            check_count(owner, name, count, low)
        if not isinstance(observation_space, gym.spaces.Dict):
            raise space_error("HerReplayStorage", "observation_space", observation_space,
                              "a gymnasium Dict space with the goal entries")
        if not isinstance(action_space, gym.Space):
            raise space_error("HerReplayStorage", "action_space", action_space)
        goals = [_subspace(observation_space, as_key(key, name, owner), name)
                 for name, key in (("goal_key", goal_key), ("achieved_goal_key", achieved_goal_key))]
        if goals[0].shape != goals[1].shape:  # a relabelled goal is an achieved goal
            raise ValueError(
                f"{owner}: the desired goal {key_str(as_key(goal_key))} has shape {goals[0].shape} and the "
                f"achieved goal {key_str(as_key(achieved_goal_key))} {goals[1].shape}; hindsight puts "
                "achieved goals in the desired goal's place: expected one shape."
            )
        self.num_envs = int(num_envs)
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = check_device(owner, "device", device)
        self.batch_size = int(batch_size)
        self.reward_fn = goal_match_reward if reward_fn is None else reward_fn
        self.copy_info_dict = check_flag("HerReplayStorage", "copy_info_dict", copy_info_dict)
        self.seed = seed
        self.native = check_flag("HerReplayStorage", "native", native)
        # no silent remainder (H12): every env gets ceil(storage_size / num_envs) rows
        self.capacity_per_env = -(-int(storage_size) // self.num_envs)
        check_rows_per_env(owner, storage_size, num_envs, self.capacity_per_env, num_envs + 1)
        # the strategy, num_goals and reward_fn are checked by the components
        self._rb = make_her_replay_buffer(
            self.capacity_per_env * self.num_envs,
            # (the default reward takes the components' tensors as they come)
            self.reward_fn if reward_fn is None else rllte_goal_fn(reward_fn, self.native),
            strategy=goal_selection_strategy,
            num_goals=num_goals,
            discount_key=None,  # the original's batch has no discount: no n-step layer
            goal_key=goal_key,
            achieved_goal_key=achieved_goal_key,
            terminated_fn=rllte_goal_fn(terminated_fn, self.native),
            info_key=INFO_KEY if self.copy_info_dict else None,
            batch_size=self.batch_size,
            num_streams=self.num_envs,
            device=self.device,  # rows live where batches are wanted
            seed=seed,
        )
        self.goal_selection_strategy = self._rb.sampler.strategy.value
        self.num_goals = self._rb.sampler.num_goals
        self.adapter = GymVectorAdapter(
            self.num_envs, autoreset_mode=autoreset_mode, check_finite=check_finite
        )
        self._observations, self._next_observations, self._actions = step_inputs(
            f"{owner}.add", observation_space, action_space, self.num_envs, column=True
        )
        self._obs_keys = list(observation_space.spaces)
        # one name is one key, not the sequence of its characters
        self._infos = InfoEntries(
            [info_keys] if isinstance(info_keys, str) else [str(k) for k in info_keys], self.num_envs)
        self._batcher = StepBatcher(self._rb, self.adapter, chunk=ADD_CHUNK,
                                    inputs=(self._observations, self._actions, self._next_observations))

    # ------------------------------------------------------------------ seed API
    def add(
        self,
        observations: Mapping[str, Any],
        actions: Any,
        rewards: Any,
        terminateds: Any,
        truncateds: Any,
        infos: Mapping[str, Any] | None,
        next_observations: Mapping[str, Any],
    ) -> None:
        """Add one step of every env (``[num_envs, ...]`` inputs, numpy or torch).

        ``next_observations`` are the vector env's; the adapter takes the true
        final observation from ``infos`` where the autoreset mode puts it there.

        An observation that is not its env's previous next observation (the
        env was reset by hand mid-episode) ends that env's running episode
        (cut, no done flag) and opens a new one.

        Raises:
            ValueError: an input does not match its space (shape, e.g. a goal of
                another shape; a non-integral action for an integer space), does
                not have ``num_envs`` rows, is not finite (``check_finite``:
                raised when its chunk is written), or the infos contradict the
                autoreset mode.
            KeyError: observations or next observations whose keys are not the
                ``Dict`` space's (e.g. no goal entries).
        """
        # observations and actions are checked against, and cast to, the spaces (by
        # the batcher, unless laid out as the steps before); the adapter converts the rest
        extra = None
        if self.copy_info_dict:
            done = np.zeros(self.num_envs, dtype=bool)
            for flags in (terminateds, truncateds):  # flags of another shape: the batcher names them
                if flags is not None and (flat := to_numpy(flags).reshape(-1)).shape == done.shape:
                    done |= flat.astype(bool)
            extra = self._infos(infos, done, same_step=self.adapter.autoreset_mode is AutoresetMode.SAME_STEP)
        self._batcher.add(  # written in chunks, flushed before any read
            observations, actions, rewards, terminateds, truncateds, infos, next_observations,
            extra=extra,
        )

    def sample(self) -> HerReplayTuple | HerReplayBatch:
        """A batch of ``batch_size`` transitions on ``device``, relabelled rows last.

        An :class:`HerReplayTuple` of float32 tensors (the original's batch), or
        with ``native=True`` an :class:`HerReplayBatch` in stored dtypes.

        Sampling works as soon as one transition is stored, before any
        episode has ended: transitions are drawn with replacement, as in the
        original, so fewer than ``batch_size`` are enough.

        Raises:
            EmptyBufferError: nothing was added yet (or since :meth:`reset`); a
                RuntimeError as TorchRL's, and a ValueError.
            TypeError / ValueError: ``reward_fn`` or ``terminated_fn`` returned
                no tensor (``None``), or not one value per relabelled row.
        """
        self._batcher.flush()
        try:
            data = self._rb.sample_batch(self.batch_size)  # the original's batch has no "index": not set
        except EmptyBufferError:  # said in this API's words
            raise EmptyBufferError(
                "HerReplayStorage: the storage is empty; add steps before sampling."
            ) from None
        nxt = get_unchecked(data, "next")  # (entries read without TensorDict's layers)
        if not self.native:  # float32, on the device where the rows live: no move
            keys = self._obs_keys
            return HerReplayTuple(
                observations={key: as_float32(get_unchecked(data, key)) for key in keys},
                actions=as_float32(get_unchecked(data, "action")),
                rewards=as_float32(get_unchecked(nxt, "reward")),
                terminateds=as_float32(get_unchecked(nxt, "terminated")),
                truncateds=as_float32(get_unchecked(nxt, "truncated")),
                next_observations={key: as_float32(get_unchecked(nxt, key)) for key in keys},
            )
        return HerReplayBatch(
            observations=data.select(*self._obs_keys),
            actions=data["action"],
            rewards=nxt["reward"],
            terminateds=nxt["terminated"],
            truncateds=nxt["truncated"],
            next_observations=nxt.select(*self._obs_keys),
            batch_size=data.batch_size,
        ).to(self.device)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """No-op, as in the original (its training loop passes metrics here)."""

    def reset(self) -> None:
        """Forget every stored step and the episode bookkeeping (in-progress episodes too).

        The envs are not reset: steps added next open new episodes, and in
        NEXT_STEP mode the reset step of an env whose episode ended before
        this call is still left out (it is not a transition).

        Raises:
            ValueError: a held step holds a NaN or infinity (``check_finite``);
                the storage is emptied all the same.
        """
        try:
            self._batcher.flush()  # the adapter then stands after the last added step
        finally:
            self._rb.empty()  # every stream's next write opens a new episode

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(transitions={len(self)}, num_envs={self.num_envs}, "
            f"strategy={self.goal_selection_strategy!r}, num_goals={self.num_goals}, "
            f"batch_size={self.batch_size})"
        )

    # ---------------------------------------------------------------- helpers
    def _layout(self) -> dict[str, Any]:
        return {**super()._layout(), "copy_info_dict": self.copy_info_dict, "info_keys": self._infos.keys}

    def _own_state(self) -> dict[str, Any]:
        return self._infos.state()

    def _load_own_state(self, meta: dict[str, Any]) -> None:
        self._infos.load_state(meta)


def _subspace(space: gym.spaces.Dict, key: tuple[str, ...], name: str) -> gym.Space:
    current: Any = space
    for part in key:
        if not isinstance(current, gym.spaces.Dict) or part not in current.spaces:
            raise EntryKeyError(
                f"HerReplayStorage: {name}={key_str(key)} is not an entry of "
                f"observation_space (entries: {list(space.spaces)})."
            )
        current = current.spaces[part]
    return current

