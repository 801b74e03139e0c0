"""``EpisodeReplayBuffer``: steps in, episodes stored, sequences out."""
from __future__ import annotations

from typing import Any, Iterator, Mapping, NoReturn

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl_ext.core.checks import check_count
from torchrl_ext.core.schema import EntryKeyError
from torchrl_ext.facades.episodic._step_inputs import field_tensor, nested_field, step_flags, warn_if_batched
from torchrl_ext.facades.episodic.dataset import EpisodeDataset, SequenceStream
from torchrl_ext.facades.episodic.running import RunningEpisodes
from torchrl_ext.facades.episodic.sequences import concat_chunks
from torchrl_ext.loader import RestartingIterator

__all__ = ["EpisodeReplayBuffer"]


class EpisodeReplayBuffer:
    """The seed's ``ReplayBuffer``: groups steps into episodes per env, samples sequences.

    Steps are dicts of tensors (any fields: the buffer does not interpret
    them). Each env's steps are collected until its episode ends, then the
    episode goes to ``dataset`` (:meth:`EpisodeDataset.add_episode`).
    :meth:`sample` returns a ``[batch_size, sequence_length]`` TensorDict of
    consecutive steps of one episode per row (``batch["obs"]`` works as with
    the original's dict).

    Episode ends, in :meth:`add_step`:

    * **single env** (``done`` is a bool or 0-d tensor, step fields have no env
      dim): ``done=True`` ends the episode *at this step*, which is stored at
      once (the original stored it one call late, B5, and raised TypeError on
      a bool, B2).
    * **vector env** (``done`` is ``[num_envs]``, every field ``[num_envs, ...]``):
      the seed's convention for envs that reset in the step they finish
      (SB3, Isaac, gymnasium ``NEXT_STEP``'s *previous* done): ``done[i]`` means
      env ``i``'s data in this call is the *first step of a new episode*.
    * ``is_last=`` (a bool or ``[num_envs]``) instead of ``done``: this step is the
      last of its episode (gymnasium ``SAME_STEP``, TorchRL's ``("next", "done")``).

    Which of single or vector is decided by the flag's shape, never guessed
    from the data (B6); a one-step episode is an episode (B4); :meth:`flush`
    stores the episodes still running (B5).

    Args:
        dataset (EpisodeDataset): where episodes are stored.
        batch_size (int): sequences per sample.
        sequence_length (int, optional): steps per sequence; ``None`` for whole
            episodes, padded to the longest in the batch with a ``"mask"`` entry (B7).
        chunk_size (int, optional): sequences per loader item, see
            :meth:`EpisodeDataset.get_loader`.
        num_workers (int, optional): loader worker processes, each sampling the
            whole dataset. Their batches are drawn ahead (the loader's
            prefetch): one can hold an episode evicted since it was drawn,
            whole and as it was stored.

    Keyword Args:
        pad (bool): also serve episodes shorter than ``sequence_length``, padded,
            with a ``"mask"`` entry.
        pin_memory (bool, optional): pin sampled batches (needs CUDA).
        seed (int, optional): makes sampling reproducible.
        mask_key (str): the name of the padding mask entry (default ``"mask"``);
            another one when a step field has that name.

    Examples:
        >>> import torch
        >>> from torchrl_ext import EpisodeReplayBuffer, RingBufferDataset
        >>> rb = EpisodeReplayBuffer(RingBufferDataset(1000), batch_size=8, sequence_length=4, seed=0)
        >>> was_done = torch.zeros(2, dtype=torch.bool)  # two envs
        >>> for t in range(12):
        ...     rb.add_step({"obs": torch.tensor([[t, 0.0], [t, 1.0]])}, was_done)
        ...     was_done = torch.tensor([t == 5, False])  # env 0 resets after step 5
        >>> rb.flush()  # store the running episodes
        >>> rb.num_episodes, rb.num_timesteps
        (3, 24)
        >>> rb.sample()["obs"].shape
        torch.Size([8, 4, 2])
    """

    def __init__(
        self,
        dataset: EpisodeDataset,
        batch_size: int,
        sequence_length: int | None = 1,
        chunk_size: int | None = None,
        num_workers: int | None = None,
        *,
        pad: bool = False,
        pin_memory: bool | None = None,
        seed: int | None = None,
        mask_key: str = "mask",
    ) -> None:
        if not isinstance(dataset, EpisodeDataset):
            raise TypeError(
                f"EpisodeReplayBuffer: dataset is {type(dataset).__name__}, expected an "
                "EpisodeDataset (RingBufferDataset, IndividualFileDataset)."
            )
        self.dataset = dataset
        self.batch_size = check_count("EpisodeReplayBuffer", "batch_size", batch_size)
        if sequence_length is not None:
            check_count("EpisodeReplayBuffer", "sequence_length", sequence_length)
        self.sequence_length = sequence_length
        self.pad = pad
        self.loader = dataset.get_loader(
            batch_size, sequence_length, chunk_size, num_workers, pin_memory, pad=pad, seed=seed,
            mask_key=mask_key,
        )
        stream = self.loader.dataset
        if not isinstance(stream, SequenceStream):
            raise TypeError(
                f"EpisodeReplayBuffer: {type(dataset).__name__}.get_loader serves "
                f"{type(stream).__name__}, expected a SequenceStream."
            )
        self._stream = stream
        # restarted after a failure (a worker killed): never a dead iterator
        self._iterator = RestartingIterator(self.loader.__iter__, "EpisodeReplayBuffer")
        # without workers or pinning, a batch is drawn here: the loader's chunks per batch
        # from its stream's in-process generator, concatenated as its collate_fn does (the
        # same batches, without its per-batch machinery, a sizeable share of a sample);
        # None: the loader serves the batches
        in_process = not self.loader.num_workers and not self.loader.pin_memory
        self._chunks: int | None = self.loader.batch_size if in_process else None
        # (fields, the batches' device, [(field, its device)] of the fields stored elsewhere,
        # the device the padding mask goes to with them, or None)
        self._moves: tuple[
            Any, torch.device | None, list[tuple[str, torch.device]], torch.device | None
        ] | None = None
        self._num_envs: int | None = None  # 0: single env, fixed by the first call
        self._keys: tuple[str, ...] | None = None
        self._key_set: frozenset[str] = frozenset()  # the same, to compare a step's keys with
        # each field's (shape, dtype) per env, fixed by the first step: a step
        # that differs raises at its add_step, not at the episode's torch.stack
        self._spec: dict[str, tuple[torch.Size, torch.dtype]] | None = None
        # per field (its shape with the env dim, dtype): what a step's field is compared with
        self._expected: dict[str, tuple[torch.Size, torch.dtype]] = {}
        self._devices: dict[str, torch.device] = {}  # each field's device, fixed with _spec
        # each env's steps since its episode began (None until the first step)
        self._running: RunningEpisodes | None = None

    # ----------------------------------------------------------------- writes
    def add_step(
        self,
        step_data: Mapping[str, Any],
        done: bool | torch.Tensor = False,
        *,
        is_first: bool | torch.Tensor | None = None,
        is_last: bool | torch.Tensor | None = None,
        terminated: bool | torch.Tensor | None = None,
        truncated: bool | torch.Tensor | None = None,
    ) -> None:
        """Add one step of a single env, or one step of every env of a vector env.

        Episode boundaries come either from ``done`` (the seed's convention) or
        from the explicit keyword flags, not both. Each flag is a bool / 0-d
        tensor (single env) or a ``[num_envs]`` bool tensor (vector env).

        Args:
            step_data: field name to value (tensor, array or number); with a
                vector env every value has a leading ``[num_envs]`` dim.
            done: single env: this step ends the episode. Vector env: this
                step *starts* a new episode in env ``i`` (the previous one is stored).

        Keyword Args:
            is_first: this step starts a new episode (the previous one is stored).
            is_last: this step ends its episode.
            terminated: this step ends its episode by termination; stored as a
                ``"terminated"`` field (with ``"truncated"``), so sequence
                models can tell a termination from a time limit.
            truncated: this step ends its episode by truncation; stored as a
                ``"truncated"`` field (with ``"terminated"``).

        Raises:
            ValueError: flags or fields with the wrong shape, a field whose
                shape differs from the first step's, ``done`` mixed with the
                keyword flags, or a change between single and vector env.
            TypeError: a flag that is not a bool (``done=None``), a field that
                is not numeric, or a field whose dtype differs from the first step's.
            KeyError: the fields differ from the first step's.

            An episode that ends here and that the dataset refuses (see
            :meth:`EpisodeDataset.add_episode`) raises its error once this step
            and the other envs' ended episodes are stored.

        Warns:
            UserWarning: once, at the first step, when the flag says single env
                but the data looks batched (every field ``[d, ...]`` with one
                ``d > 1``): it is stored as one env's step (the flag decides).
        """
        opens, ends, extra = self._boundaries(done, is_first, is_last, terminated, truncated)
        num_envs = int(opens.size) if opens.ndim else 0
        if self._num_envs is not None and num_envs != self._num_envs:
            def kind(n: int) -> str:
                return f"a vector env of {n}" if n else "a single env"
            raise ValueError(
                f"add_step: the flag describes {kind(num_envs)}, but the buffer receives "
                f"steps of {kind(self._num_envs)} (fixed by the first step)."
            )
        values = self._values(step_data, num_envs, extra)  # checked against the first step's
        self._num_envs = num_envs  # fixed by the first step the buffer takes
        if self._spec is None:
            if num_envs == 0:
                warn_if_batched(values)
            self._fix_spec(values, num_envs)
        running = self._running
        if running is None:
            running = self._running = self._new_running()
        if num_envs == 0:  # one env: its step gets the env dim
            values = {key: value[None] for key, value in values.items()}
            opens = opens.reshape(1)
            ends = None if ends is None else ends.reshape(1)
        # The ended episodes are taken first and stored after the step is appended:
        # an episode the dataset refuses (too long, not finite) then raises with
        # every other env's episode and this step stored, not dropped or merged.
        ended = []
        if np.count_nonzero(opens):  # cheaper than any() on a step's flags
            ended = [running.take(env) for env in np.flatnonzero(opens).tolist()]
        running.append(values)  # copies: callers may reuse their buffers
        if ends is not None and np.count_nonzero(ends):
            ended += [running.take(env) for env in np.flatnonzero(ends).tolist()]
        if ended:
            self._store(ended)

    def _boundaries(
        self, done: Any, is_first: Any, is_last: Any, terminated: Any, truncated: Any
    ) -> tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray]]:
        """``(opens, ends, extra fields)``: where episodes start and end at this step (``None``: nowhere)."""
        if is_first is None and is_last is None and terminated is None and truncated is None:
            was = step_flags("done", done)
            if was.ndim == 0:  # single env: done ends the episode at this step
                return np.array(False), was, {}
            return was, None, {}  # vector env: done = was done (no step ends an episode)
        explicit = {
            name: step_flags(name, value)
            for name, value in (("is_first", is_first), ("is_last", is_last),
                                ("terminated", terminated), ("truncated", truncated))
            if value is not None
        }
        if not (done is False or done is None):
            raise ValueError(
                "add_step: pass done (the seed's convention) or the flags is_first / "
                "is_last / terminated / truncated, not both."
            )
        shapes = {name: tuple(value.shape) for name, value in explicit.items()}
        if len(set(shapes.values())) > 1:
            raise ValueError(f"add_step: the flags have different shapes: {shapes}.")
        none = np.zeros_like(next(iter(explicit.values())))
        first, last, term, trunc = (
            explicit.get(name, none) for name in ("is_first", "is_last", "terminated", "truncated")
        )
        extra = {}
        if terminated is not None or truncated is not None:
            extra = {"terminated": term, "truncated": trunc}
        return first, last | term | trunc, extra

    def _fix_spec(self, values: dict[str, torch.Tensor], num_envs: int) -> None:
        """The first step fixes each field's shape per env, dtype and device."""
        skip = 1 if num_envs else 0
        self._set_spec({k: (v.shape[skip:], v.dtype) for k, v in values.items()},
                       {k: v.device for k, v in values.items()})

    def _set_spec(
        self, spec: dict[str, tuple[torch.Size, torch.dtype]], devices: dict[str, torch.device]
    ) -> None:
        """Fix each field's shape per env and dtype, and its device."""
        self._spec, self._devices = spec, devices
        lead = (self._num_envs,) if self._num_envs else ()
        self._expected = {k: (torch.Size(lead + tuple(shape)), dtype) for k, (shape, dtype) in spec.items()}

    def _new_running(self) -> RunningEpisodes:
        spec = self._spec or {}
        return RunningEpisodes(max(self._num_envs or 0, 1), {
            key: (shape, dtype, self._devices[key]) for key, (shape, dtype) in spec.items()
        })

    def _fits(self, key: str, value: torch.Tensor) -> bool:
        """Whether field ``key`` has the first step's shape (with the env dim) and dtype; False for a new field."""
        expected = self._expected.get(key)
        # torch dtypes are singletons: ``is`` compares them
        return expected is not None and value.shape == expected[0] and value.dtype is expected[1]

    def _refuse_spec(self, key: str, value: torch.Tensor, num_envs: int) -> NoReturn:
        """Raise for field ``key``, which has not the first step's shape or dtype."""
        full, dtype = self._expected[key]
        skip = 1 if num_envs else 0
        if value.shape != full:
            raise ValueError(
                f"add_step: field {key!r} has shape {tuple(value.shape[skip:])} per env, "
                f"expected {tuple(full[skip:])} as in the first step; a field keeps its shape "
                "within and across episodes (pad or split it into fields)."
            )
        raise TypeError(
            f"add_step: field {key!r} has dtype {value.dtype}, expected {dtype} as in "
            f"the first step; cast it (e.g. torch.as_tensor(x, dtype={dtype}))."
        )

    def _values(
        self, step_data: Mapping[str, Any], num_envs: int, extra: dict[str, np.ndarray]
    ) -> dict[str, torch.Tensor]:
        """Each field as a tensor (a numpy array viewed, not copied), checked.

        Checked in one pass, errors in this order: a field's type, its leading
        (env) dim, no field, the field names, then (after the first step) each
        field's shape and dtype against the first step's. A field with the
        first step's name, shape and dtype (the usual step) costs one lookup
        and two comparisons; the other checks run on the fields that differ.
        """
        if type(step_data) is not dict and not isinstance(step_data, (Mapping, TensorDictBase)):
            raise TypeError(
                f"add_step: step_data is {type(step_data).__name__}, expected a dict of tensors."
            )
        clash = sorted(set(extra) & set(step_data.keys())) if extra else None
        if clash:
            raise ValueError(
                f"add_step: step_data has fields {clash} and the terminated / truncated "
                "flags were passed too; pass each once."
            )
        values = {key: torch.from_numpy(flags) for key, flags in extra.items()} if extra else {}
        expected = self._expected
        # the first field (in this order) whose shape or dtype is not the first step's
        refused = None
        if extra and expected:
            refused = next((k for k, v in values.items() if not self._fits(k, v)), None)
        for key, value in step_data.items():
            if type(value) is not torch.Tensor:
                value = field_tensor(key, value)
            if value.requires_grad:
                value = value.detach()
            if not self._fits(key, value):
                if not isinstance(key, str):  # a known field has a str name
                    raise nested_field(key)
                if num_envs and (value.ndim == 0 or value.shape[0] != num_envs):
                    raise ValueError(
                        f"add_step: field {key!r} has shape {tuple(value.shape)}, expected a "
                        f"leading dim of {num_envs} (one entry per env, as done has)."
                    )
                if refused is None and key in expected:
                    refused = key
            values[key] = value
        if not values:  # else refused only when its episode is stored, by add_episode
            raise ValueError(
                "add_step: step_data has no field; expected a dict mapping each field name "
                "to a tensor (e.g. {'obs': obs, 'action': action, 'reward': reward})."
            )
        if self._keys is None:
            self._keys = tuple(sorted(values))
            self._key_set = frozenset(self._keys)
        elif values.keys() != self._key_set:
            raise EntryKeyError(
                f"add_step: step fields {sorted(values)} differ from the first step's "
                f"{list(self._keys)}."
            )
        if refused is not None:
            self._refuse_spec(refused, values[refused], num_envs)
        return values

    def _store(self, episodes: list[dict[str, torch.Tensor] | None]) -> None:
        """Hand each episode (``None``: an env with no step) to the dataset.

        Raises:
            the first error of the dataset's ``add_episode``, once the other
            episodes are stored.
        """
        error: Exception | None = None
        for episode in episodes:
            if episode is None:
                continue
            try:
                self.dataset.add_episode(episode)  # stacked [length, ...] fields
            except Exception as e:
                error = error or e
        if error is not None:
            raise error

    def flush(self) -> None:
        """Store every episode still running (e.g. before sampling or at shutdown)."""
        if self._running is not None:
            running = self._running
            self._store([running.take(env) for env in range(running.num_envs)])

    # ----------------------------------------------------------------- reads
    def sample(self) -> TensorDictBase:
        """A ``[batch_size, sequence_length, ...]`` TensorDict of sequences.

        Raises:
            RuntimeError: the dataset is empty, or no episode is long enough.
        """
        fields = self.dataset.fields
        if self.dataset.is_empty or fields is None:
            raise RuntimeError("Cannot sample from empty dataset.")
        length = self.sequence_length
        if self.is_empty:  # episodes, none long enough
            raise RuntimeError(
                f"Cannot sample sequences of {length} steps: the longest stored episode has "
                f"{self.dataset.longest_episode}; wait for longer episodes, lower "
                "sequence_length, or pass pad=True."
            )
        if self._chunks is not None:
            stream = self._stream
            generator = stream.in_process_generator()
            batch = concat_chunks([stream.draw(generator) for _ in range(self._chunks)], stream.mask_key)
        else:
            try:
                batch = next(self._iterator)
            except ValueError:
                if not self.loader.num_workers:
                    raise
                # A worker drew its prefetched batch while no episode was long enough
                # (evicted, the long one added since: checked above). Its error ended
                # the loader's iterator; new workers draw from the episodes stored now.
                batch = next(self._iterator)
        device = batch.device  # the pool's device, or None (a loader's collated batch)
        moves = self._moves
        if moves is None or moves[0] is not fields or moves[1] != device:
            # every entry is on the pool's device: the first one tells it
            pool = device if device is not None else batch.get(next(iter(fields))).device
            # each field to its recorded device; the padding mask with them when they agree
            targets = {kind.device for kind in fields.values()}
            common = targets.pop() if len(targets) == 1 else pool
            moves = self._moves = (fields, device, [
                (key, kind.device) for key, kind in fields.items() if kind.device != pool
            ], None if common == pool else common)
        if moves[2]:
            if device is not None:  # a batch with a device would move the fields back to it
                batch.clear_device_()
            for key, to in moves[2]:
                batch.set(key, batch.get(key).to(to))
            if moves[3] is not None:
                for key in batch.keys():
                    if key not in fields:  # the padding mask
                        batch.set(key, batch.get(key).to(moves[3]))
        return batch

    def __iter__(self) -> Iterator[TensorDictBase]:
        while True:
            yield self.sample()

    def close(self) -> None:
        """Stop the loader's worker processes (they restart on the next sample)."""
        self._iterator.close()

    def __enter__(self) -> EpisodeReplayBuffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The dataset, the running episodes and the sampling generator.

        With ``num_workers=0`` a restored buffer draws exactly the samples this
        one would have drawn (worker processes keep their own generators).

        Examples:
            >>> import torch
            >>> from torchrl_ext import EpisodeReplayBuffer, RingBufferDataset
            >>> rb = EpisodeReplayBuffer(RingBufferDataset(50), batch_size=2, sequence_length=2)
            >>> for t in range(5):
            ...     rb.add_step({"obs": torch.tensor(float(t))}, t == 2)
            >>> _ = rb.sample()
            >>> restored = EpisodeReplayBuffer(RingBufferDataset(50), batch_size=2, sequence_length=2)
            >>> restored.load_state_dict(rb.state_dict())
            >>> torch.equal(restored.sample()["obs"], rb.sample()["obs"])
            True
        """
        stream = self._stream
        return {
            "dataset": self.dataset.state_dict(),
            "num_envs": self._num_envs,
            "keys": self._keys,
            "running": [] if self._running is None else [
                self._running.steps(env) for env in range(self._running.num_envs)],
            "generator": stream.in_process_generator().get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` into a new buffer over an empty dataset."""
        self.dataset.load_state_dict(state["dataset"])
        self._num_envs = state["num_envs"]
        self._keys = state["keys"]
        self._key_set = frozenset(self._keys or ())
        running = [list(steps) for steps in state["running"]]
        first = next((steps[0] for steps in running if steps), None)
        self._running = None  # the checkpoint's running episodes replace these
        if first is not None:  # the running steps fix the fields, as a first step does
            self._set_spec({k: (v.shape, v.dtype) for k, v in first.items()},
                           {k: v.device for k, v in first.items()})
            self._running = self._new_running()
            self._running.load(running)
        self._stream.in_process_generator().set_state(state["generator"].cpu())

    @property
    def num_episodes(self) -> int:
        """Episodes stored in the dataset (running episodes are not counted)."""
        return self.dataset.num_episodes

    @property
    def num_timesteps(self) -> int:
        """Steps stored in the dataset."""
        return self.dataset.num_timesteps

    @property
    def is_empty(self) -> bool:
        """Nothing to sample: no episode is stored, or (without ``pad``) none has ``sequence_length`` steps.

        As the original's: the guard before :meth:`sample` early in training
        (``if not rb.is_empty: batch = rb.sample()``). The dataset's own
        ``is_empty`` says whether it holds any episode.
        """
        if self.dataset.is_empty:
            return True
        length = self.sequence_length
        return length is not None and not self.pad and self.dataset.longest_episode < length

    def __len__(self) -> int:
        return self.dataset.num_timesteps

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dataset={self.dataset!r}, batch_size={self.batch_size}, "
            f"sequence_length={self.sequence_length})"
        )
