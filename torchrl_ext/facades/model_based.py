"""pytorchrl's ``MBReplayBuffer`` API over the episode-aware components."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl_ext.buffer import TransitionReplayBuffer
from torchrl_ext.core.checks import check_count, check_flag, check_seed
from torchrl_ext.envs.gym import AutoresetMode, GymVectorAdapter
from torchrl_ext.envs.modes import declared_mode
from torchrl_ext.facades._mb_batches import ModelBatches
from torchrl_ext.facades._mb_checkpoint import ModelCheckpoints
from torchrl_ext.facades._mb_steps import (
    BOUNDARY,
    BOUNDARY_KEY,
    INFO,
    STORAGE_TENSORS,
    STORED,
    PytorchrlSteps,
    discrete_count,
)
from torchrl_ext.facades._mb_trees import numpy_tree, tail, tree_map
from torchrl_ext.model_based import ModelEpochDataset, make_model_based_buffer
from torchrl_ext.samplers.epoch import EpochSampler
from torchrl_ext.writers.transition import DEFAULT_DONE_KEYS

__all__ = ["MBReplayBuffer"]

# steps staged per buffer write (fewer when they pass SLAB_BYTES): a write has a
# fixed cost (a few hundred us) and a per-step cost under half an insert's; 512 and
# 1024 measured alike, 256 slower (2.8 MB of staging for 16 HalfCheetah-sized envs;
# benchmarks/model_based.py insertion, interleaved with SB3 and mbrl)
_CHUNK = 1024


class MBReplayBuffer(ModelBatches, ModelCheckpoints):
    """Model-based replay with the constructor and methods of pytorchrl's ``MBReplayBuffer``.

    Stores vector-env steps of ``N`` envs in a time ring of ``size`` steps (each
    env a stream of the episode-aware storage, native dtypes, dict
    observations kept as dicts) and serves them as epochs of normalised
    dynamics-model regression pairs: ``train_input = concat(obs, action)``
    (discrete actions one-hot of width ``action_space.n``) and
    ``train_label = concat(next_obs - obs[, reward])``, over all envs
    together. Fixes pytorchrl's bugs M1-M13 (each has a regression test ``test_m<k>_...``):

    * only real transitions are trained on: in NEXT_STEP autoreset mode (the
      gymnasium default) a step that starts at a final observation (``"Done"``
      set) is the reset step; in SAME_STEP mode the true final observation is
      taken from ``EnvironmentInformation["final_obs"]`` (in LEGACY mode,
      an SB3 ``VecEnv``'s, from each env's ``"terminal_observation"``), and a
      done step without it is stored but never trained on (with one
      warning); in DISABLED mode every step is a transition (M1);
    * no empty batch (M2), a fixed one-hot width (M3), a real resize (M4),
      ``reset()`` empties (M5), copies in chronological order across the wrap
      (M6, M12), ``N > 1`` envs (M7), native dtypes (M8), the scaler fitted on
      training rows only and only when asked (M9), ``num_mini_batch`` /
      ``num_epochs`` and a holdout split (M10), validated inputs (M11), and
      ``"Reward"`` optional with a reward function (M13).

    The sampling and storage are the library's components, reachable as
    :attr:`rb` (a :func:`~torchrl_ext.make_model_based_buffer` buffer with an
    :class:`~torchrl_ext.samplers.EpochSampler` and a
    :class:`~torchrl_ext.transforms.ModelPairTransform`; the sampler's own
    holdout is off: this facade splits by content, see ``holdout_fraction``).
    Each env stream holds ``2 * size + 2`` rows, enough for ``size`` steps
    however often episodes end (each episode's final observation takes a row).
    :meth:`dumps` / :meth:`loads` checkpoint it atomically (not in pytorchrl):
    stored steps, cursors, holdout split, running episodes, RNG and scaler.

    Args:
        size (int): capacity along the time axis (steps of all ``N`` envs).
        device (torch.device or str): device of the generated batches (and
            of the scaler's statistics when this buffer fits it).
        actor: duck-typed as in pytorchrl: ``actor.dynamics_model.standard_scaler``
            (an object with ``fit(inputs, targets)`` and ``transform(inputs,
            targets)``), ``actor.dynamics_model.reward_function`` (``None``: the
            reward is a target) and ``actor.action_space`` (``Discrete``:
            one-hot of width ``n``; ``Box``: as is).
        algorithm: kept as :attr:`algo`, unused.
        envs: the vector env; read for its autoreset mode only.

    Keyword Args:
        autoreset_mode (AutoresetMode or str, optional): how the vector env
            resets. Defaults to the mode ``envs`` declares (a gymnasium 1.x
            vector env, wrapped or not: ``autoreset_mode`` or
            ``metadata["autoreset_mode"]``); ``SAME_STEP`` for an env that
            declares none, as every vector env before gymnasium 1.0 (pytorchrl's,
            gym's, SB3's) resets inside the step that ends an episode: its done
            steps, whose next observation is a reset observation, are stored
            but never trained on (M1). The same with ``envs=None``: pytorchrl's
            convention (pass ``autoreset_mode="next_step"`` for the steps of a
            gymnasium 1.x vector env in its default mode).
        holdout_fraction (float): held-out share of the transitions; batches
            then carry ``"holdout_input"`` / ``"holdout_label"``. A step is
            held out by a hash of its content (observation and action, see
            :func:`~torchrl_ext.samplers.epoch.content_ids`) with the split
            seed, so the split stays fixed until :meth:`resplit`, through
            ``get_all_buffer_data`` / ``reset`` / ``insert_data_slice`` round
            trips, resizes and copies, and equal steps fall on the same side.
            Defaults to ``0.0``.
        ensemble_size (int, optional): ``[E, b, dim]`` batches, one
            permutation (or bootstrap resample) per member.
        bootstrap (bool): members resample with replacement.
        seed (int, optional): seeds permutations and is the holdout split's
            seed (without it the split seed is drawn from torch's global RNG).

    Examples:
        >>> import numpy as np
        >>> from types import SimpleNamespace
        >>> import gymnasium as gym
        >>> from torchrl_ext import MBReplayBuffer
        >>> from torchrl_ext.transforms import StandardScaler
        >>> actor = SimpleNamespace(action_space=gym.spaces.Discrete(3), dynamics_model=SimpleNamespace(
        ...     standard_scaler=StandardScaler(), reward_function=None))
        >>> buffer = MBReplayBuffer(100, "cpu", actor, None, None, seed=0)
        >>> for t in range(5):  # 2 envs
        ...     buffer.insert_transition({"Observation": np.full((2, 4), t, np.float32),
        ...         "Action": np.array([[0], [2]]), "Reward": np.ones((2, 1), np.float32),
        ...         "NextObservation": np.full((2, 4), t + 1, np.float32),
        ...         "Done": np.zeros((2, 1), np.float32), "NextDone": np.zeros((2, 1), np.float32)})
        >>> batches = list(buffer.generate_batches(1, mini_batch_size=4))
        >>> [tuple(b["train_input"].shape) for b in batches], tuple(batches[0]["train_label"].shape)
        ([(4, 7), (4, 7), (2, 7)], (4, 5))
    """

    storage_tensors = STORAGE_TENSORS
    # the key set, shapes and dtypes of the steps before the last reset(), until the next insert
    _layout_before_reset: dict | None = None

    def __init__(
        self,
        size: int,
        device: torch.device | str,
        actor: Any,
        algorithm: Any,
        envs: Any,
        *,
        autoreset_mode: AutoresetMode | str | Any | None = None,
        holdout_fraction: float = 0.0,
        ensemble_size: int | None = None,
        bootstrap: bool = False,
        seed: int | None = None,
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"MBReplayBuffer: size={size!r}, expected an int >= 1.")
        self.max_size = int(size)
        self.device = torch.device(device)
        self.actor, self.algo, self.envs = actor, algorithm, envs
        model = getattr(actor, "dynamics_model", None)
        self.scaler = getattr(model, "standard_scaler", None)
        if model is None or not all(callable(getattr(self.scaler, m, None)) for m in ("fit", "transform")):
            raise AttributeError(
                "MBReplayBuffer: actor.dynamics_model.standard_scaler must exist and have "
                f"fit() and transform() methods (got actor {type(actor).__name__}, "
                f"dynamics_model {type(model).__name__}, scaler {type(self.scaler).__name__})."
            )
        if not hasattr(model, "reward_function"):
            raise AttributeError(
                "MBReplayBuffer: actor.dynamics_model has no reward_function attribute "
                "(set it to None when the model predicts the reward)."
            )
        self.reward_function = model.reward_function
        self.num_actions = discrete_count(getattr(actor, "action_space", None))
        if autoreset_mode is None:  # the mode envs declare; one declaring none (or none given) is
            # pytorchrl's convention, as every env before gymnasium 1.0 resets in the step: SAME_STEP
            autoreset_mode = (None if envs is None else declared_mode(envs)) or AutoresetMode.SAME_STEP
        self.autoreset_mode = GymVectorAdapter(1, autoreset_mode=autoreset_mode).autoreset_mode
        # the sampler's own checks, now rather than at the first insert
        EpochSampler(holdout_fraction=holdout_fraction, ensemble_size=ensemble_size, bootstrap=bootstrap)
        self.holdout_fraction = float(holdout_fraction)
        self.ensemble_size = ensemble_size
        self.bootstrap = check_flag("MBReplayBuffer", "bootstrap", bootstrap)
        self.seed = seed = check_seed("MBReplayBuffer", seed)
        # the holdout split's seed; resplit() derives the next one from it
        self._split_seed = int(torch.randint(2**62, ())) if seed is None else seed
        self._scaler_fitted = False
        self._clear()

    @classmethod
    def create_factory(
        cls,
        size: int,
        *,
        autoreset_mode: AutoresetMode | str | None = None,
        holdout_fraction: float = 0.0,
        ensemble_size: int | None = None,
        bootstrap: bool = False,
        seed: int | None = None,
    ) -> Callable[[Any, Any, Any, Any], MBReplayBuffer]:
        """A function ``(device, actor, algorithm, envs) -> MBReplayBuffer`` (pytorchrl's factory).

        Examples:
            >>> from types import SimpleNamespace
            >>> import gymnasium as gym
            >>> from torchrl_ext.transforms import StandardScaler
            >>> actor = SimpleNamespace(action_space=gym.spaces.Box(-1, 1, (2,)),
            ...     dynamics_model=SimpleNamespace(standard_scaler=StandardScaler(), reward_function=None))
            >>> MBReplayBuffer.create_factory(50)("cpu", actor, None, None).max_size
            50
        """
        def create_buffer_instance(device: Any, actor: Any, algorithm: Any, envs: Any) -> MBReplayBuffer:
            return cls(
                size, device, actor, algorithm, envs, autoreset_mode=autoreset_mode,
                holdout_fraction=holdout_fraction, ensemble_size=ensemble_size,
                bootstrap=bootstrap, seed=seed,
            )

        return create_buffer_instance

    # ------------------------------------------------------------------ state
    def _clear(self) -> None:
        self.size = 0  # steps held
        self.step = 0  # write position in the time ring
        self._rb: Any = None  # built on the first insert (the env count fixes the streams)
        self._data: ModelEpochDataset | None = None  # serves rb's epochs
        self._steps = self._new_steps()
        self._rows = torch.empty(0, 0, dtype=torch.int64)  # [max_size, N] storage row of each step
        self._boundary = np.empty((0, 0), bool)  # [max_size, N] not a real transition
        self._ids = np.empty((0, 0), np.uint64)  # [max_size, N] content id of each step (holdout split)
        self._ids_known = np.empty((0, 0), bool)
        self._holdout = torch.empty(0, dtype=torch.int64)  # storage rows held out (set by _dataset)
        self._staged_from = 0  # time position of the first staged step (the rest follow it)
        self._staged_size = 0  # size before the first staged step

    def init_tensors(self, sample: dict[str, Any]) -> None:
        """Fix the key set, shapes, dtypes and ``N`` from ``sample`` and allocate the buffer.

        The first insert calls it; calling it first only validates earlier.
        """
        if self._rb is None:
            self._steps.step(sample, "MBReplayBuffer.init_tensors")
            self._build()

    def _new_steps(self) -> PytorchrlSteps:
        return PytorchrlSteps(self.autoreset_mode, self.reward_function is None, self.num_actions, _CHUNK)

    def _build(self) -> None:
        steps = self._steps
        if self._layout_before_reset not in (None, steps.specs):
            self._scaler_fitted = False  # its statistics describe data of another layout
        self._layout_before_reset = None
        n = steps.num_envs
        self._rb = self._new_rb(steps, self.max_size)
        self._rows = torch.full((self.max_size, n), -1, dtype=torch.int64)
        self._boundary = np.zeros((self.max_size, n), bool)
        self._ids = np.zeros((self.max_size, n), np.uint64)
        self._ids_known = np.zeros((self.max_size, n), bool)  # hashed since written (lazily, by _split)

    def _new_rb(self, steps: PytorchrlSteps, max_size: int) -> TransitionReplayBuffer:
        """The buffer of ``max_size`` steps of ``steps``' envs and entries."""
        n = steps.num_envs
        rb = make_model_based_buffer(
            n * (2 * max_size + 2),
            num_streams=n,
            observation_keys=[k for k in steps.specs or () if k[:1] == STORED["Observation"]],
            reward_key=None if self.reward_function is not None else STORED["Reward"],
            num_actions=self.num_actions,
            holdout_fraction=0.0,  # the facade splits by content (survives its rebuilds)
            ensemble_size=self.ensemble_size,
            bootstrap=self.bootstrap,
            scaler=self.scaler,
            done_keys=(*DEFAULT_DONE_KEYS, BOUNDARY_KEY),
            seed=self.seed,
        )
        # PytorchrlSteps.batch already starts a new trajectory wherever a step
        # does not follow on from its env's last next observation: the
        # writer's check would compare the same bytes again, at every write
        rb.writer.check_continuation = False
        return rb

    def _flush(self) -> None:
        """Write the staged steps; those from a step whose done flag is not 0 or 1 on are refused."""
        steps = self._steps
        if not steps.staged:
            return
        leaves = steps.take()
        bad = steps.first_bad_done(leaves, "MBReplayBuffer.insert_transition")
        if bad is None:
            self._write(leaves, self._staged_from)
            return
        t, error = bad
        T = next(iter(leaves.values())).shape[1]
        if t:
            self._write({k: v[:, :t] for k, v in leaves.items()}, self._staged_from)
        # the cursors go back to the refused step: it and the steps after it are not held
        self.step = (self._staged_from + t) % self.max_size
        self.size = min(self._staged_size + t, self.max_size)
        raise ValueError(
            f"{error.args[0]} It came {T - t} insert(s) ago (staged steps are checked when written: "
            f"every {steps.chunk} inserts and before any read); it and the {T - t - 1} insert(s) after "
            f"it are not stored, the {t} before it are."
        )

    def _write(self, leaves: dict[tuple[str, ...], np.ndarray], start: int) -> None:
        """Write ``[N, T, ...]`` steps held at time positions ``start, start + 1, ...`` (wrapping)."""
        rows = self._rb.extend(self._steps.batch(leaves))  # [T, N]: the batch is time-first
        T = rows.shape[0]
        keep = min(T, self.max_size)  # more steps than the ring: the newest hold its positions
        positions = (start + np.arange(T - keep, T)) % self.max_size  # distinct: no write lost to order
        self._rows.numpy()[positions] = rows.numpy()[T - keep:]
        self._boundary[positions] = leaves[BOUNDARY_KEY][:, T - keep:, 0].T
        self._ids_known[positions] = False

    def _advance(self, steps: int) -> None:
        self.step = (self.step + steps) % self.max_size
        self.size = min(self.size + steps, self.max_size)

    # ---------------------------------------------------------------- inserts
    def insert_transition(self, sample: dict[str, Any]) -> None:
        """Store one step of all ``N`` envs (numpy or torch values, ``[N, ...]``).

        Steps are copied into a staging block and written 1024 at a time (fewer
        for large observations: at most 4 MiB is staged) and before any read, so
        an insert costs one copy per entry.

        Raises:
            KeyError: a required key is missing, a key is unknown, or the key set
                differs from the first insert's.
            ValueError / TypeError: an entry's shape / dtype differs from the first insert's;
                ``"Done"`` / ``"NextDone"`` hold a value other than 0 or 1 (0.5, NaN): raised
                when the staged steps are written (every 1024 inserts or fewer, see above, and
                before any read), then that step and the ones after it are not stored.
        """
        steps = self._steps
        if not steps.staged:
            self._staged_from, self._staged_size = self.step, self.size
        full = steps.stage_known(sample, "MBReplayBuffer.insert_transition")
        if full is None:  # the first insert, or laid out unlike it: the checks that name the fault
            leaves = steps.step(sample, "MBReplayBuffer.insert_transition")
            if self._rb is None:
                self._build()
            full = steps.stage(sample, leaves)
        step = self.step + 1
        self.step = 0 if step == self.max_size else step
        if self.size < self.max_size:
            self.size += 1
        if full:
            self._flush()

    def insert_single_tensor_slice(
        self, tensor_storage: dict[str, Any], tensor_key: str, tensor_values: Any
    ) -> int:
        """Stage one key of a slice in ``tensor_storage``; returns its length ``l`` (time axis).

        :meth:`insert_data_slice` stages every key this way, then stores the
        steps; as in pytorchrl, the write cursor does not move here.

        Raises:
            KeyError: ``tensor_key`` is not a storage key.
            ValueError: the values have no time axis, or more steps than ``size``.
        """
        if tensor_key not in STORED:
            raise KeyError(
                f"MBReplayBuffer.insert_single_tensor_slice: unknown key {tensor_key!r}; expected "
                f"one of {list(STORAGE_TENSORS)} or {BOUNDARY!r}."
            )
        values = tree_map(
            lambda v: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v),
            tensor_values,
        )
        lengths: set[int] = set()

        def add_length(value: np.ndarray) -> None:
            if not np.ndim(value):
                raise ValueError(
                    f"MBReplayBuffer.insert_single_tensor_slice: {tensor_key!r} has no time axis "
                    f"(shape {np.shape(value)}), expected (T, num_envs, ...)."
                )
            lengths.add(np.shape(value)[0])

        tree_map(add_length, values)
        if len(lengths) != 1:
            raise ValueError(
                f"MBReplayBuffer.insert_single_tensor_slice: {tensor_key!r} has time lengths "
                f"{sorted(lengths)}, expected one length for all its entries."
            )
        (length,) = lengths
        if length > self.max_size:
            raise ValueError(
                f"MBReplayBuffer.insert_single_tensor_slice: {tensor_key!r} has {length} steps, "
                f"more than the capacity size={self.max_size}; insert at most {self.max_size} "
                "(e.g. the newest: values[-size:])."
            )
        tensor_storage[tensor_key] = values
        return int(length)

    def insert_data_slice(self, new_data: dict[str, Any]) -> None:
        """Append ``T`` steps: each value ``[T, N, ...]`` (``None`` values are skipped).

        Slices from :meth:`get_data_slice` / :meth:`get_all_buffer_data` carry
        ``"Boundary"``, which then decides which steps are real transitions
        (their ``"NextObservation"`` already is the true one). A slice of
        ``T = 0`` steps inserts nothing, as in pytorchrl.

        Raises:
            KeyError: as :meth:`insert_transition`.
            ValueError: the keys have different lengths, or more than ``size`` steps.
        """
        where = "MBReplayBuffer.insert_data_slice"
        if not isinstance(new_data, Mapping):
            raise TypeError(
                f"{where}: new_data is {type(new_data).__name__}, expected a dict of pytorchrl "
                "keys to [T, N, ...] arrays (as get_data_slice returns)."
            )
        staged: dict[str, Any] = {}
        lengths = {
            key: self.insert_single_tensor_slice(staged, key, value)
            for key, value in new_data.items()
            if value is not None and key != INFO
        }
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{where}: keys have different lengths {lengths}; expected one time length.")
        if new_data.get(INFO) is not None:
            raise ValueError(
                f"{where}: {INFO!r} cannot be sliced; resolve final observations with "
                "insert_transition, or pass slices from get_data_slice (with 'Boundary')."
            )
        T = next(iter(lengths.values()), 0)
        if not T:  # every value None, or T = 0 steps (an empty get_data_slice): nothing to insert
            return
        leaves = self._steps.slice(staged, where)
        if self._rb is None:
            self._build()
        self._flush()
        self._write({k: v.swapaxes(0, 1) for k, v in leaves.items()}, self.step)
        self._advance(T)

    # ------------------------------------------------------------------ reads
    def get_data_slice(self, start_pos: int, end_pos: int) -> dict[str, Any]:
        """Copies of the steps at time positions ``start_pos, start_pos + 1, ... end_pos - 1``.

        Positions are those of the write cursor :attr:`step` (``0 <= pos <
        size``): the slice walks forward and wraps past the end of the ring, so
        ``get_data_slice(a, b)`` with ``a > b`` is ``[a, size) + [0, b)`` (M12);
        ``a == b`` is empty and ``(0, size)`` is every position. Values are numpy arrays ``[T, N, ...]`` in their
        stored dtypes (dicts for dict entries), ``None`` for keys never
        inserted (every key while the buffer holds no step), plus
        ``"Boundary"`` (bool ``[T, N, 1]``: not a real transition, never
        trained on).

        Raises:
            ValueError: a position is outside the stored steps.
        """
        # an empty buffer has no position to start at, but (0, 0) is its empty slice
        where = "MBReplayBuffer.get_data_slice"
        start, end = check_count(where, "start_pos", start_pos, 0), check_count(where, "end_pos", end_pos, 0)
        for name, pos, hi in (("start_pos", start, max(self.size - 1, 0)), ("end_pos", end, self.size)):
            if pos > hi:
                raise ValueError(
                    f"{where}: {name}={pos}, expected 0 <= {name} <= {hi} "
                    f"(the buffer holds {self.size} steps)."
                )
        # positions [0, size) form the ring (size < max_size: not wrapped yet, step == size);
        # end_pos == size with start_pos == 0 is all of it, start_pos == end_pos none
        count = end - start if end >= start else end - start + self.size
        return self._copy((start + torch.arange(count)) % self.size)

    def get_all_buffer_data(self, data_to_cpu: bool = False) -> dict[str, Any]:
        """Copies of every stored step, oldest first, ``[size, N, ...]`` (M6).

        The data is always returned in CPU memory (numpy arrays), as
        ``data_to_cpu=True`` asks; see :meth:`get_data_slice` for the keys.
        """
        oldest = self.step if self.size == self.max_size else 0
        return self._copy((oldest + torch.arange(self.size)) % self.max_size)

    def _copy(self, positions: torch.Tensor) -> dict[str, Any]:
        out: dict[str, Any] = {key: None for key in (*STORAGE_TENSORS, BOUNDARY)}
        if self._rb is None or not self.size:  # no step inserted (init_tensors writes none)
            return out
        self._flush()
        rows = self._rows[positions]  # [T, N]
        data = self._rb.storage.get(rows.reshape(-1)).reshape(rows.shape)
        for name in (*self._steps.keys, BOUNDARY):
            value = data.get(STORED[name])
            if isinstance(value, TensorDictBase):
                out[name] = numpy_tree(value)
            else:
                out[name] = value.numpy().copy()
        return out

    def __len__(self) -> int:
        """Number of stored steps (of all ``N`` envs each)."""
        return self.size

    @property
    def rb(self) -> TransitionReplayBuffer | None:
        """The TorchRL replay buffer underneath, every inserted step written; ``None`` before the first insert.

        :meth:`insert_transition` stages steps and writes them a chunk at a
        time; this (as every read) writes the staged ones first.

        Examples:
            >>> from types import SimpleNamespace
            >>> import gymnasium as gym
            >>> import numpy as np
            >>> from torchrl_ext import MBReplayBuffer
            >>> from torchrl_ext.transforms import StandardScaler
            >>> actor = SimpleNamespace(action_space=gym.spaces.Discrete(2), dynamics_model=SimpleNamespace(
            ...     standard_scaler=StandardScaler(), reward_function=None))
            >>> buffer = MBReplayBuffer(10, "cpu", actor, None, None)
            >>> for t in range(3):
            ...     buffer.insert_transition({"Observation": np.full((1, 2), t, np.float32),
            ...         "Action": np.zeros((1, 1)), "Reward": np.ones((1, 1), np.float32),
            ...         "NextObservation": np.full((1, 2), t + 1, np.float32),
            ...         "Done": np.zeros((1, 1)), "NextDone": np.zeros((1, 1))})
            >>> len(buffer.rb)  # transitions of every env
            3
        """
        self._flush()
        return self._rb

    # -------------------------------------------------------------- lifecycle
    def reset(self) -> None:
        """Empty the buffer: ``size`` and ``step`` to zero, no step kept (M5).

        The next insert fixes the key set, shapes and dtypes anew. The scaler
        keeps its statistics when they are the same (a collector's round trip
        through :meth:`get_all_buffer_data`); data of another layout is
        normalised as in a new buffer, by statistics fitted on its first epoch.
        """
        layout = self._steps.specs
        self._clear()
        self._layout_before_reset = layout

    def before_gradients(self) -> None:
        """Refit the scaler on the current training transitions (new data has arrived).

        pytorchrl's gradient worker calls this once after inserting new data,
        then iterates :meth:`generate_batches` (possibly several times): the
        normalisation changes here, never in the middle of that training.
        """
        if self.size:
            self.fit_scaler()

    def after_gradients(self, batch: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
        """Returns ``info`` unchanged."""
        return info

    # ------------------------------------------------------------- parameters
    def update_storage_parameter(self, parameter_name: str, new_parameter_value: Any) -> None:
        """Change ``"max_size"`` (resizes, keeping the newest steps: M4) or
        ``"holdout_fraction"`` / ``"validation_percentage"`` (a new split).

        Raises:
            ValueError: another name, or a bad value.
        """
        if parameter_name == "max_size":
            size = new_parameter_value
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
                raise ValueError(
                    f"MBReplayBuffer.update_storage_parameter: max_size={size!r}, expected an int >= 1."
                )
            data = self.get_all_buffer_data()
            keep = min(self.size, int(size))
            self.max_size = int(size)
            self._clear()
            if keep:
                self.insert_data_slice(tail(data, keep))
        elif parameter_name in ("holdout_fraction", "validation_percentage"):
            fraction = float(new_parameter_value)
            if not 0.0 <= fraction < 1.0:
                raise ValueError(
                    f"MBReplayBuffer.update_storage_parameter: {parameter_name}={new_parameter_value}, "
                    "expected a value in [0, 1)."
                )
            self.holdout_fraction = fraction
            self.resplit()
        else:
            raise ValueError(
                f"MBReplayBuffer.update_storage_parameter: unknown parameter {parameter_name!r}; "
                "expected 'max_size', 'holdout_fraction' or 'validation_percentage'."
            )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={self.size}/{self.max_size}, step={self.step}, "
            f"num_envs={self._steps.num_envs}, autoreset_mode={self.autoreset_mode.value})"
        )
