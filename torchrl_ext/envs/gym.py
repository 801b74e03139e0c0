"""Gymnasium vector-env steps to TorchRL transitions, in every autoreset mode."""
from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from torchrl_ext.core.checks import check_count, check_finite_entries, check_flag
from torchrl_ext.core.schema import unchecked_tensordict
from torchrl_ext.envs._chunk import (
    ResolvedSteps, first_nonfinite_step, follow_on, observation_keys, reset_steps,
)
from torchrl_ext.envs._inputs import column, env_mask, flat, put_final, rows
from torchrl_ext.envs.modes import (
    CONVENTIONS,
    FINAL_INFO_KEYS,
    FINAL_OBS_KEYS,
    AutoresetMode,
    check_mode,
    final_entry,
    final_observation,
    legacy_infos,
)

__all__ = ["FINAL_INFO_KEYS", "FINAL_OBS_KEYS", "AutoresetMode", "GymVectorAdapter", "ResolvedSteps", "final_entry"]

ACTION, REWARD, DONE, MASK = ("action",), ("next", "reward"), ("next", "done"), ("collector", "mask")
TERMINATED, TRUNCATED = ("next", "terminated"), ("next", "truncated")
#: the [num_envs] columns of a converted step, [num_envs, 1] entries once resolved
_COLUMNS = (REWARD, TERMINATED, TRUNCATED)


logger = logging.getLogger(__name__)


class GymVectorAdapter:
    """Builds TorchRL transition rows from gymnasium vector-env steps.

    Call :meth:`step` with what the training loop has after each
    ``env.step(action)``: the observation the action was taken in, the action
    and the step's outputs. It returns a ``[num_envs]`` TensorDict to pass to
    ``rb.extend``:

    * ``"observation"`` (or each entry of a dict observation at the root),
      ``"action"``, and under ``"next"`` the *true* next observation,
      ``"reward"`` (float32 ``[num_envs, 1]``), ``"terminated"``, ``"truncated"``,
      ``"done"`` (bool ``[num_envs, 1]``);
    * ``("collector", "mask")``: False for a sub-env whose step is not a
      transition, which the :class:`~torchrl_ext.writers.TransitionWriter` skips.

    Per autoreset mode:

    ==============  ======================================  ==============================
    mode            true final observation                  steps that are not transitions
    ==============  ======================================  ==============================
    ``NEXT_STEP``   ``next_obs`` of the done step           the step after a done (the reset step)
    ``SAME_STEP``   ``infos["final_obs"][i]``               none
    ``DISABLED``    ``next_obs`` of the done step            none (you reset by hand)
    ``LEGACY``      ``infos[i]["terminal_observation"]``    none
    ==============  ======================================  ==============================

    Args:
        num_envs (int): number of sub-envs.

    Keyword Args:
        autoreset_mode (AutoresetMode or str, optional): defaults to gymnasium's
            default, ``NEXT_STEP``. The mode, and what it means for the stored
            steps, is logged once at INFO on the ``torchrl_ext`` logger; infos
            that contradict it (``final_obs`` / ``final_observation`` /
            ``final_info`` at an episode end in another mode) raise a
            ``ValueError`` naming the mode to pass. A
            :class:`gymnasium.vector.AutoresetMode` and the names users write
            (``"same_step"``, ``"SAME_STEP"``) are accepted too.
        observation_key (str): key of a non-dict observation. Defaults to ``"observation"``.
        check_finite (bool): raise on a NaN or infinite value in any
            floating-point entry (reward, observation, action), naming the
            entry, the env and the step (they would
            poison every n-step return and target computed from them).
            Defaults to ``True``; ``False`` stores them.

    Examples:
        >>> import gymnasium as gym
        >>> from torchrl_ext import make_replay_buffer
        >>> from torchrl_ext.envs import GymVectorAdapter
        >>> env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
        >>> adapter = GymVectorAdapter(2)
        >>> rb = make_replay_buffer(1000, batch_size=4, seed=0)
        >>> obs, _ = env.reset(seed=0)
        >>> for _ in range(30):
        ...     action = env.action_space.sample()
        ...     next_obs, reward, terminated, truncated, infos = env.step(action)
        ...     _ = rb.extend(adapter.step(obs, action, reward, terminated, truncated, infos, next_obs))
        ...     obs = next_obs
        >>> len(rb) <= 60, rb.sample()["next", "reward"].shape
        (True, torch.Size([4, 1]))
    """

    def __init__(
        self,
        num_envs: int,
        *,
        autoreset_mode: AutoresetMode | str | Any | None = None,
        observation_key: str = "observation",
        check_finite: bool = True,
    ) -> None:
        self.num_envs = check_count("GymVectorAdapter", "num_envs", num_envs)
        self.check_finite = check_flag("GymVectorAdapter", "check_finite", check_finite)
        self.steps = 0  #: steps resolved so far (named in error messages)
        defaulted = autoreset_mode is None
        self.autoreset_mode = AutoresetMode.parse(autoreset_mode)
        self.observation_key = observation_key
        self._resetting = np.zeros(self.num_envs, dtype=bool)
        # [num_envs] bytes of each env's last next observation as the env returned
        # it (the reset observation after a done in SAME_STEP / LEGACY mode)
        self._last_next: dict[tuple[str, ...], np.ndarray] | None = None
        self._was_done = np.ones(self.num_envs, dtype=bool)  # no step seen yet
        # envs reset by hand (reset() without the buffer) while their episode ran:
        # their next step is an unseen reset, whatever its observation
        self._cut = np.zeros(self.num_envs, dtype=bool)
        #: envs whose observation in the last :meth:`resolve` did not follow on
        #: from their previous next observation (an ``env.reset()`` the adapter
        #: did not see): each opens a new episode
        self.unseen_resets = np.zeros(self.num_envs, dtype=bool)
        # called before the state is changed by hand (reset, load_state_dict):
        # a facade holding steps not yet resolved writes them first
        self._holders: list[Callable[[], None]] = []
        logger.info(
            "GymVectorAdapter(%d envs): autoreset mode %s%s; %s",
            self.num_envs,
            self.autoreset_mode.name,
            " (not given: gymnasium's default; pass autoreset_mode="
            "envs.metadata['autoreset_mode'] if your env uses another)" if defaulted else "",
            CONVENTIONS[self.autoreset_mode],
        )

    def reset(self, rb: Any | None = None, envs: Any | None = None) -> None:
        """Call after ``env.reset()``: the reset envs' next steps open new episodes.

        Forgets their pending NEXT_STEP reset steps and last observations.
        Their episodes still running in the buffer must end there, or the
        buffer would glue the new episodes onto them: given ``rb``, they are
        ended (``rb.end_episodes``: a buffer's, a handle's or a Ray client's);
        without it, each reset env's next step is reported as an unseen reset
        (:attr:`unseen_resets`), which :meth:`step` refuses and the facades
        end themselves.

        Args:
            rb: the buffer (or writer handle) this adapter's steps go to.
            envs: the envs reset, as ints or a ``[num_envs]`` bool mask (as
                gymnasium's ``reset_mask``). Defaults to all.

        Examples:
            >>> import numpy as np
            >>> from torchrl_ext import make_replay_buffer
            >>> rb, adapter = make_replay_buffer(16), GymVectorAdapter(1)
            >>> step = lambda o: adapter.step(np.array([[o]]), np.zeros(1), [1.0], [False], [False],
            ...                               {}, np.array([[o + 1.0]]))
            >>> _ = rb.extend(step(0.0))
            >>> adapter.reset(rb)  # after env.reset(): the running episode ends in rb
            >>> _ = rb.extend(step(5.0))
            >>> rb.storage.index.episode_count.tolist()
            [2]
        """
        reset = env_mask("GymVectorAdapter.reset", envs, self.num_envs)
        self._resolve_held()
        ending = reset & (~self._was_done | self._cut)  # [num_envs] episodes left running
        if rb is None:
            self._cut |= ending
        else:
            if ending.any():
                end = getattr(rb, "end_episodes", None)  # ours, a handle, a Ray client
                if end is None:  # a TorchRL buffer around our writer
                    rb.writer.end_episodes(ending)
                else:
                    end(ending)
            self._cut &= ~reset
        self._resetting[reset] = False
        self._was_done[reset] = True

    def hold_steps(self, flush: Callable[[], None]) -> None:
        """Register who holds steps for this adapter to resolve later (a facade's staging).

        ``flush`` (resolve and write the held steps) is called before
        :meth:`reset` or :meth:`load_state_dict` change the state those steps
        must be resolved with.

        Examples:
            >>> adapter, calls = GymVectorAdapter(1), []
            >>> adapter.hold_steps(lambda: calls.append("flushed"))
            >>> adapter.reset()
            >>> calls
            ['flushed']
        """
        self._holders.append(flush)

    def episodes_ended_at(self, resolved: ResolvedSteps) -> None:
        """The caller ended every running episode at a refused step of ``resolved``: stand after its last step.

        A facade that writes held steps in chunks ends the buffer's running
        episodes where a step is refused (:meth:`resolve_steps`' ``error``),
        so the steps after it open new episodes, glued to nothing. The
        adapter then stands after the last step it was given, not the last
        one stored: in NEXT_STEP mode, an env whose episode ended at that step
        resets at its next one, which observes the final observation again
        and is left out like any reset step (it was stored as a transition).

        Examples:
            >>> import numpy as np
            >>> adapter = GymVectorAdapter(1)
            >>> raw = adapter.convert(np.zeros((1, 1)), np.zeros(1), np.array([np.nan]), np.ones(1, bool),
            ...                       np.zeros(1, bool), {}, np.ones((1, 1)))  # refused, and the episode ends
            >>> adapter.episodes_ended_at(adapter.resolve_steps({k: v[:, None] for k, v in raw.items()}))
            >>> reset_step = adapter.convert(np.ones((1, 1)), np.zeros(1), np.zeros(1), np.zeros(1, bool),
            ...                              np.zeros(1, bool), {}, np.full((1, 1), 5.0))
            >>> adapter.resolve_steps({k: v[:, None] for k, v in reset_step.items()}).entries[MASK].tolist()
            [[False]]
        """
        entries = resolved.entries
        self._stand_after(entries, entries[DONE][:, -1, 0] & entries[MASK][:, -1], -1)

    def _stand_after(self, entries: Mapping[tuple[str, ...], np.ndarray], was_done: np.ndarray, t: int) -> None:
        """The state after step ``t`` of ``entries`` (``[num_envs, T, ...]``), whose episodes ended where ``was_done``."""
        if self.autoreset_mode is AutoresetMode.NEXT_STEP:
            self._resetting = was_done.copy()
        self._was_done = was_done.copy()
        self._last_next = {("next", *k): entries[("next", *k)][:, t].copy() for k in observation_keys(entries)}
        self._cut[:] = False

    def _resolve_held(self) -> None:
        for flush in self._holders:
            flush()

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must keep: the mode and each env's pending reset step.

        Examples:
            >>> adapter = GymVectorAdapter(2)
            >>> restored = GymVectorAdapter(2)
            >>> restored.load_state_dict(adapter.state_dict())
            >>> restored.state_dict()["resetting"]
            [False, False]
        """
        last = self._last_next
        return {  # JSON-ready
            "num_envs": self.num_envs,
            "autoreset_mode": self.autoreset_mode.value,
            "steps": self.steps,
            "resetting": self._resetting.tolist(),
            "was_done": self._was_done.tolist(),
            "cut": self._cut.tolist(),
            # each env's last next observation, to tell a reset by hand after a reopen
            "last_next": None if last is None else {
                "/".join(k): [v.dtype.str, list(v.shape), base64.b64encode(np.ascontiguousarray(v).tobytes()).decode()]
                for k, v in last.items()
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the env count and mode must match."""
        mine = (self.num_envs, self.autoreset_mode.value)
        theirs = (state["num_envs"], state["autoreset_mode"])
        if mine != theirs:
            raise ValueError(
                f"GymVectorAdapter.load_state_dict: the checkpoint has (num_envs, "
                f"autoreset_mode)={theirs}, this adapter {mine}; reopen with the same ones."
            )
        self._resolve_held()
        self._resetting = np.array(state["resetting"], dtype=bool)
        self._was_done = np.array(state["was_done"], dtype=bool)
        self._cut = np.array(state.get("cut", [False] * self.num_envs), dtype=bool)
        self.steps = int(state["steps"])
        last = state["last_next"]
        self._last_next = None if last is None else {
            tuple(k.split("/")): np.frombuffer(base64.b64decode(data), dtype).reshape(shape).copy()
            for k, (dtype, shape, data) in last.items()
        }

    def step(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        terminated: Any,
        truncated: Any | None,
        infos: Mapping[str, Any] | list[dict] | None,
        next_obs: Any,
    ) -> TensorDict:
        """One vector-env step as ``[num_envs]`` TorchRL transitions.

        In LEGACY mode ``truncated`` may be ``None``: ``terminated`` then holds
        the vector env's ``dones`` and truncation comes from
        ``infos[i]["TimeLimit.truncated"]``.

        An observation that is not its env's previous next observation (the
        env was reset by hand, ``env.reset()`` or a partial ``reset_mask``
        reset, without a done) cannot be stored by a buffer this adapter does
        not own without gluing two episodes: it raises (as does the first
        step of an env after :meth:`reset` without the buffer); call
        ``adapter.reset(rb)`` after ``env.reset()``. The facades
        (``NStepReplayStorage``, ``HerReplayStorage``) end the running episode
        instead and open a new one. A step refused for a NaN or infinity
        (``check_finite``) is not stored, and the adapter stands after the
        last stored step: the same step again (fixed) continues the episode,
        while the step after the refused one is such an unseen reset.

        Raises:
            ValueError: an input does not have ``num_envs`` rows, a done env
                has no final observation in SAME_STEP / LEGACY mode, the infos
                contradict the autoreset mode, or an unseen reset (above).
        """
        entries = self.resolve(obs, action, reward, terminated, truncated, infos, next_obs)
        if self.unseen_resets.any():
            envs = np.flatnonzero(self.unseen_resets).tolist()
            raise ValueError(
                f"GymVectorAdapter.step: the observation of env(s) {envs} is not their "
                "previous step's next observation, or adapter.reset() was called without "
                "the buffer: the env was reset (env.reset(), reset_mask) without a done "
                "flag, and the buffer would glue the new episode onto the old one. Call "
                "adapter.reset(rb) (or adapter.reset(rb, reset_mask)) after env.reset(): it "
                "ends the buffer's running episodes of the reset envs; then step again."
            )
        return self.to_tensordict(entries, [self.num_envs])

    def resolve(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        terminated: Any,
        truncated: Any | None,
        infos: Mapping[str, Any] | list[dict] | None,
        next_obs: Any,
        *,
        final_checks: Mapping[tuple[str, ...], Callable[[np.ndarray], None]] | None = None,
    ) -> dict[tuple[str, ...], np.ndarray]:
        """:meth:`step` as numpy entries by TorchRL key (``[num_envs, ...]`` each).

        The entries may share memory with the inputs; :meth:`to_tensordict`
        turns one step, or steps stacked along a time dim, into a TensorDict.
        It is :meth:`convert`, :meth:`finish_step` and :meth:`resolve_steps`
        for one step (``T = 1``). ``final_checks``: see :meth:`finish_step`.
        """
        raw = self.convert(obs, action, reward, terminated, truncated, infos, next_obs)
        done = raw[TERMINATED] | raw[TRUNCATED]
        if done.any():
            raw = self.finish_step(raw, infos, done, owned=False, checks=final_checks)
        resolved = self.resolve_steps({key: value[:, None] for key, value in raw.items()})
        if resolved.error is not None:
            raise resolved.error
        return {key: value[:, 0] for key, value in resolved.entries.items()}

    def convert(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        terminated: Any,
        truncated: Any | None,
        infos: Mapping[str, Any] | list[dict] | None,
        next_obs: Any,
    ) -> dict[tuple[str, ...], np.ndarray]:
        """One step's inputs checked and converted, before any autoreset rule.

        Returns ``[num_envs, ...]`` arrays by TorchRL key: the observation
        entries, ``"action"``, the next observation entries as the env
        returned them, then the columns ``("next", "reward")`` (float32),
        ``("next", "terminated")`` and ``("next", "truncated")`` (bool), each
        ``[num_envs]``. They may share memory with the inputs.

        Raises:
            ValueError: an input does not have ``num_envs`` rows; LEGACY infos
                that are not one dict per env.

        Examples:
            >>> import numpy as np
            >>> raw = GymVectorAdapter(2).convert(np.zeros((2, 3)), np.zeros(2), [1, 2], [False, True],
            ...                                   [False, False], {}, np.ones((2, 3)))
            >>> [(k, v.dtype.name, v.shape) for k, v in raw.items()][2:]
            [(('next', 'observation'), 'float64', (2, 3)), (('next', 'reward'), 'float32', (2,)), (('next', 'terminated'), 'bool', (2,)), (('next', 'truncated'), 'bool', (2,))]
        """
        if truncated is None and self.autoreset_mode is AutoresetMode.LEGACY:
            # SB3 VecEnv: ``terminated`` holds the dones, truncation is in the infos
            done = column("dones", terminated, bool, self.num_envs)
            truncated = self.legacy_truncation(infos, done)
            terminated = done & ~truncated
        else:
            terminated = column("terminated", terminated, bool, self.num_envs)
            truncated = column("truncated", truncated, bool, self.num_envs)
        raw = flat("obs", obs, (), self.observation_key, self.num_envs)
        raw[ACTION] = rows("action", action, self.num_envs)
        raw.update(flat("next_obs", next_obs, ("next",), self.observation_key, self.num_envs))
        raw[REWARD] = column("reward", reward, np.float32, self.num_envs)
        raw[TERMINATED] = terminated
        raw[TRUNCATED] = truncated
        return raw

    def legacy_truncation(self, infos: Any, done: np.ndarray) -> np.ndarray:
        """``[num_envs]`` bool: LEGACY done envs whose ``infos[i]["TimeLimit.truncated"]`` is set.

        Raises:
            ValueError: ``infos`` is not a list of ``num_envs`` dicts (also
                without a done env: the step's data is not an SB3 VecEnv's).

        Examples:
            >>> import numpy as np
            >>> adapter = GymVectorAdapter(2, autoreset_mode="legacy")
            >>> adapter.legacy_truncation([{}, {"TimeLimit.truncated": True}], np.array([True, True]))
            array([False,  True])
        """
        infos = legacy_infos(infos, self.num_envs)
        if not np.count_nonzero(done):
            return np.zeros(self.num_envs, dtype=bool)
        return done & np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos])

    def finish_step(
        self,
        step: dict[tuple[str, ...], np.ndarray],
        infos: Any,
        done: np.ndarray,
        owned: bool,
        checks: Mapping[tuple[str, ...], Callable[[np.ndarray], None]] | None = None,
    ) -> dict[tuple[str, ...], np.ndarray]:
        """What a step with episode ends needs from its ``infos``, at once.

        Checks that the infos do not contradict the autoreset mode, and in
        SAME_STEP / LEGACY mode puts each done env's true final observation in
        the step's next observation entries.

        Args:
            step: one step's entries (:meth:`convert`'s), ``[num_envs, ...]``.
            infos: the step's infos.
            done: ``[num_envs]`` bool, the envs whose episode ended.
            owned: the next observation arrays may be written to (a staging
                slab); else they are copied before the first write.
            checks: what a facade checks in its next observations besides their
                shape and dtype (a ``Discrete`` space's range...), by key, run on
                each ``[num_envs, ...]`` entry once the final observations are in.

        Returns:
            ``step``, with the final observations in place.

        Raises:
            ValueError: a done env has no final observation (SAME_STEP /
                LEGACY), or the infos contradict the autoreset mode.

        Examples:
            >>> import numpy as np
            >>> adapter = GymVectorAdapter(1, autoreset_mode="same_step")
            >>> step = adapter.convert(np.zeros((1, 1)), np.zeros(1), [0.0], [True], [False],
            ...                        {}, np.array([[9.0]]))  # 9.0: the reset observation
            >>> infos = {"final_obs": np.array([np.array([1.0])], dtype=object), "_final_obs": np.array([True])}
            >>> adapter.finish_step(step, infos, np.array([True]), owned=False)["next", "observation"].tolist()
            [[1.0]]
        """
        check_mode(self.autoreset_mode, infos, done)
        if self.autoreset_mode not in (AutoresetMode.SAME_STEP, AutoresetMode.LEGACY):
            return step
        if not owned:
            step = {k: v.copy() if k[0] == "next" else v for k, v in step.items()}
        targets = {("next", *k): step[("next", *k)] for k in observation_keys(step)}
        where = f"GymVectorAdapter.step (step {self.steps})"
        for i in np.flatnonzero(done).tolist():
            final = final_observation(self.autoreset_mode, infos, i, self.num_envs)
            name = (f"infos[{i}]['terminal_observation']" if self.autoreset_mode is AutoresetMode.LEGACY
                    else f"the final observation of env {i}")
            put_final(where, name, targets, i, flat(name, final, ("next",), self.observation_key))
        for key, check in (checks or {}).items():
            check(targets[key])
        return step

    def resolve_steps(self, raw: dict[tuple[str, ...], np.ndarray]) -> ResolvedSteps:
        """``T`` consecutive steps of every env (``[num_envs, T, ...]``) as TorchRL entries.

        ``raw`` holds :meth:`convert`'s entries with a time dim, after
        :meth:`finish_step` (final observations in place), plus any other
        entries to store (kept as they are, after the mask). One pass over the
        chunk decides, per env and step, whether the step is a transition
        (NEXT_STEP reset steps are not), whether its observation follows on
        from the previous next observation (an unseen reset where it does not
        while the episode runs), and whether every floating value is finite;
        the adapter's state then stands after the last step.

        Returns:
            the entries, ``[num_envs, T, ...]`` each (views of ``raw`` where
            they can be), the unseen resets and the first non-finite step.

        Examples:
            >>> import numpy as np
            >>> adapter = GymVectorAdapter(1)  # NEXT_STEP: the step after a done is the reset step
            >>> steps = [adapter.convert(np.array([[o]]), np.zeros(1), [0.0], [o == 1], [False], {},
            ...                          np.array([[o + 1]])) for o in (0.0, 1.0)]
            >>> steps.append(adapter.convert(np.array([[2.0]]), np.zeros(1), [0.0], [False], [False], {},
            ...                              np.array([[5.0]])))  # observes the final obs again
            >>> raw = {k: np.stack([s[k] for s in steps], 1) for k in steps[0]}
            >>> adapter.resolve_steps(raw).entries["collector", "mask"].tolist()
            [[True, True, False]]
        """
        term, trunc = raw[TERMINATED], raw[TRUNCATED]
        n, T = term.shape
        done = term | trunc
        last = self._last_next
        follows = np.ones((n, T), dtype=bool)
        for key in observation_keys(raw):
            before = None if last is None else last.get(("next", *key))
            same = follow_on(raw[key], raw[("next", *key)], before)
            if last is not None and before is None:
                same[:, 0] = False  # a new observation entry: no continuation
            follows &= same
        # envs whose observation need not follow on: a stored episode end
        # before the step (but for a NEXT_STEP reset step, which observes the
        # final observation again), or no step seen yet
        follows[:, 0] |= self._was_done & ~self._resetting
        if self.autoreset_mode is AutoresetMode.NEXT_STEP:
            # after any step _resetting == _was_done, so from step 1 on every
            # observation must follow on: a reset step observes the final one again
            candidate = np.empty((n, T), dtype=bool)
            candidate[:, 0] = self._resetting & follows[:, 0]
            candidate[:, 1:] = done[:, :-1] & follows[:, 1:]
            valid = ~reset_steps(candidate)
        else:
            follows[:, 1:] |= done[:, :-1]
            valid = np.ones((n, T), dtype=bool)
        was_done = done & valid
        ended_before = np.empty((n, T), dtype=bool)  # [n, T] a stored episode end before the step
        ended_before[:, 0] = self._was_done
        ended_before[:, 1:] = was_done[:, :-1]
        unseen = ~follows & ~ended_before
        unseen[:, 0] |= self._cut
        keys = list(raw)  # convert()'s order: observations, action, next observations, columns
        columns = keys.index(REWARD)
        entries = {k: raw[k] for k in keys[:columns]}
        entries[REWARD] = raw[REWARD][..., None]
        entries[TERMINATED] = term[..., None]
        entries[TRUNCATED] = trunc[..., None]
        entries[DONE] = done[..., None]
        entries[MASK] = valid
        # the step's own entries are checked, not the other entries (as resolve() adds them after)
        checked = dict(entries)
        entries.update((k, raw[k]) for k in keys[columns:] if k not in _COLUMNS)
        error, kept = None, T
        if self.check_finite:
            bad = first_nonfinite_step(checked)
            if bad is not None:
                kept = bad
                try:
                    check_finite_entries(f"GymVectorAdapter.step (step {self.steps + bad})",
                                         {k: v[:, bad] for k, v in checked.items()})
                except ValueError as err:
                    error = err
        # the state after the last step stored: a non-finite step and those after it
        # are not, so a step that follows on from them is an unseen reset (never glued
        # onto the episode across the steps left out)
        if kept:
            self._stand_after(raw, was_done[:, kept - 1], kept - 1)
        self.unseen_resets = unseen[:, kept - 1] if kept else np.zeros(n, dtype=bool)
        self.steps += kept
        return ResolvedSteps(entries, unseen, kept, error)

    @staticmethod
    def to_tensordict(
        entries: dict[tuple[str, ...], np.ndarray], batch_size: list[int], *, time_first: bool = False
    ) -> TensorDict:
        """A TensorDict of ``batch_size`` from :meth:`resolve`'s entries.

        Args:
            entries: ``[*batch_size, ...]`` arrays by TensorDict key.
            batch_size: ``[num_envs]``, ``[num_envs, T]``, or with ``time_first`` ``[T, num_envs]``.

        Keyword Args:
            time_first (bool): the entries are ``[T, num_envs, ...]``, and the
                batch's first dim is named ``"time"`` (the writer then reads
                the steps in place, see :class:`~torchrl_ext.writers.TransitionWriter`).

        Examples:
            >>> import numpy as np
            >>> td = GymVectorAdapter.to_tensordict({("observation",): np.zeros((3, 2, 4))}, [3, 2],
            ...                                     time_first=True)
            >>> td.batch_size, td.names
            (torch.Size([3, 2]), ['time', None])
        """
        # unchecked: every entry's leading dims were checked against the batch
        # by whoever built them (this adapter, the facades), and the writer
        # checks each full shape again; TensorDict's own checks cost more than
        # the rest of a one-step write
        return unchecked_tensordict(
            {key: torch.from_numpy(np.ascontiguousarray(value)) for key, value in entries.items()},
            torch.Size(batch_size),
            names=["time", None] if time_first else None,
        )
