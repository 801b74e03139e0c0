"""Episode-aware writer: splits incoming data into env streams and places each step."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.data.replay_buffers.writers import Writer

from torchrl_ext._schema import RowSchema, as_key, key_str
from torchrl_ext.storages.episode import EpisodeStorage

__all__ = ["EpisodeWriter", "DEFAULT_DONE_KEYS"]

DEFAULT_DONE_KEYS: tuple[NestedKey, ...] = (
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
)


class EpisodeWriter(Writer):
    """Writes transitions into an :class:`~torchrl_ext.storages.EpisodeStorage`.

    Every env is a stream and streams never mix. The batch layout says which
    dims are envs and which is time:

    ===================================  =========================================
    batch shape                           meaning
    ===================================  =========================================
    ``[]``                                one transition of a single env
    ``[N]``                               one step of ``N`` envs (env ``i`` = stream ``i``)
    ``[N, T]``                            ``T`` steps of ``N`` envs, time last (collectors)
    ``[T]`` named ``"time"``              ``T`` steps of a single env
    ``[B]`` with ``traj_key``             flat trajectory fragments (needs ``num_streams``)
    ===================================  =========================================

    An episode ends at a step whose done entries (``done_keys``, OR-ed) are set,
    or where ``traj_key`` changes. Terminated and truncated flags are stored as
    they came; the next observation under ``"next"`` is kept as the episode's
    true final observation. The first write fixes the stored entries and the
    number of streams; later writes must match (errors name the entry).

    Keyword Args:
        num_streams (int, optional): number of streams. Inferred from the first
            ``[N]`` / ``[N, T]`` write; required for flat trajectory batches.
        done_keys (sequence of NestedKey): entries that end an episode. Defaults to
            ``("next", "done")``, ``("next", "terminated")``, ``("next", "truncated")``
            (those present are used; at least one must be).
        reward_key (NestedKey): reward entry, checked to be ``[..., 1]``.
            Defaults to ``("next", "reward")``.
        traj_key (NestedKey): trajectory-id entry. Defaults to
            ``("collector", "traj_ids")``.
        mask_key (NestedKey): validity entry; steps where it is False are not
            transitions (padding, gymnasium's reset step) and are skipped, not
            stored. Defaults to ``("collector", "mask")``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import TensorDictReplayBuffer
        >>> from torchrl_ext.storages import EpisodeStorage
        >>> from torchrl_ext.writers import EpisodeWriter
        >>> from torchrl_ext.samplers import UniformTransitionSampler
        >>> rb = TensorDictReplayBuffer(storage=EpisodeStorage(64), writer=EpisodeWriter(),
        ...     sampler=UniformTransitionSampler())
        >>> done = torch.tensor([[False, True, False]]).unsqueeze(-1)  # [1 env, 3 steps, 1]
        >>> steps = TensorDict({"observation": torch.arange(3.).view(1, 3, 1),
        ...     "action": torch.zeros(1, 3, 1),
        ...     "next": {"observation": torch.arange(1., 4.).view(1, 3, 1),
        ...              "reward": torch.ones(1, 3, 1), "done": done}}, batch_size=[1, 3])
        >>> rb.extend(steps)  # physical rows of the three steps
        tensor([[0, 1, 3]])
        >>> rb.storage.index.episode_count  # two episodes in stream 0
        tensor([2])
    """

    def __init__(
        self,
        *,
        num_streams: int | None = None,
        done_keys: Sequence[NestedKey] = DEFAULT_DONE_KEYS,
        reward_key: NestedKey = ("next", "reward"),
        traj_key: NestedKey = ("collector", "traj_ids"),
        mask_key: NestedKey = ("collector", "mask"),
    ) -> None:
        super().__init__()
        if num_streams is not None and int(num_streams) < 1:
            raise ValueError(f"EpisodeWriter: num_streams={num_streams}, expected >= 1.")
        self.num_streams = num_streams
        self.done_keys = tuple(as_key(k) for k in done_keys)
        self.reward_key = as_key(reward_key)
        self.traj_key = as_key(traj_key)
        self.mask_key = as_key(mask_key)
        self._write_count = 0

    def register_storage(self, storage: Any) -> None:
        if not isinstance(storage, EpisodeStorage):
            raise TypeError(
                f"EpisodeWriter needs an EpisodeStorage, got {type(storage).__name__}; "
                "build the buffer with storage=torchrl_ext.storages.EpisodeStorage(max_size)."
            )
        super().register_storage(storage)

    # ---------------------------------------------------------------- writing
    def add(self, data: TensorDictBase) -> int | torch.Tensor:
        """Write one transition of a single-env buffer (``rb.add``)."""
        return self._write(data, "add")

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write a batch of steps; returns their physical rows, shaped like the batch."""
        return self._write(data, "extend")

    def _write(self, data: TensorDictBase, where: str) -> torch.Tensor:
        where = f"EpisodeWriter.{where}"
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"{where}: expected a TensorDict, got {type(data).__name__}.")
        storage: EpisodeStorage = self._storage
        flat = data.ndim == 1 and self.traj_key in _leaf_keys(data)
        if flat:
            mask, data = _pop(data, self.mask_key)
            if mask is not None:
                data = data[mask]
            batch_dims, checked = 1, data
        else:
            steps, restore = _as_streams_by_time(data)  # [K, T]
            mask, steps = _pop(steps, self.mask_key)
            batch_dims, checked = 2, steps
        if storage.schema is None:
            self._first_write(checked, batch_dims, where, flat)
        else:
            storage.schema.validate(checked, batch_dims, where)
        if flat:
            rows = self._write_fragments(data, where)
        else:
            if steps.shape[0] != storage.num_streams:
                raise ValueError(
                    f"{where}: data has {steps.shape[0]} envs (batch {tuple(data.shape)}), "
                    f"but the buffer holds {storage.num_streams} streams fixed by its first "
                    "write; the env count cannot change (start a new buffer)."
                )
            rows = restore(self._write_streams(steps, mask))
        self._write_count += int(rows.ge(0).sum())
        self._mark_update_entities(rows)
        return rows

    def _write_streams(self, steps: TensorDictBase, mask: torch.Tensor | None) -> torch.Tensor:
        # [K, T] steps, stream k = row k; masked-out steps (mask False) are skipped.
        storage: EpisodeStorage = self._storage
        K, T = steps.shape
        streams = torch.arange(K)
        if mask is None or bool(mask.all()):
            groups = [(streams, steps, None)]
        elif T == 1:
            keep = mask[:, 0]
            groups = [(streams[keep], steps[keep], keep)]
        else:  # holes inside the time dim: one stream at a time
            groups = [
                (streams[k : k + 1], steps[k][mask[k]].unsqueeze(0), k) for k in range(K)
            ]
        rows = torch.full((K, T), -1, dtype=torch.int64)
        for group, part, where in groups:
            if not part.numel():
                continue
            plan = storage.index.plan(group, self._done(part), self._traj(part))
            storage.write(plan, part)
            if where is None:
                rows = plan.rows
            elif T == 1:
                rows[where] = plan.rows
            else:
                rows[where, mask[where]] = plan.rows[0]
        return rows

    def _write_fragments(self, data: TensorDictBase, where: str) -> torch.Tensor:
        # A flat batch is a sequence of trajectory fragments, each in time order.
        storage: EpisodeStorage = self._storage
        index = storage.index
        traj = self._traj(data.unsqueeze(0))[0]  # [B]
        done = self._done(data.unsqueeze(0))[0]
        cuts = torch.nonzero(traj[1:] != traj[:-1]).view(-1) + 1
        bounds = [0, *cuts.tolist(), traj.numel()]
        rows = torch.empty_like(traj)
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            tid = int(traj[lo])
            match = torch.nonzero(index.stream_traj == tid).view(-1)
            if match.numel():
                stream = int(match[0])
            else:
                free = torch.nonzero(~index.is_open).view(-1)
                if not free.numel():
                    raise ValueError(
                        f"{where}: trajectory {key_str(self.traj_key)}={tid} starts while all "
                        f"{index.num_streams} streams hold running episodes; raise "
                        "EpisodeWriter(num_streams=...) to the number of envs, or end "
                        "episodes with a done flag before a new trajectory id."
                    )
                stream = int(free[0])
            fragment = data[lo:hi].unsqueeze(0)
            plan = index.plan(
                torch.tensor([stream]), done[None, lo:hi], traj[None, lo:hi]
            )
            storage.write(plan, fragment)
            rows[lo:hi] = plan.rows[0]
        return rows

    def _first_write(
        self, data: TensorDictBase, batch_dims: int, where: str, flat: bool
    ) -> None:
        keys = _leaf_keys(data)
        present_done = [k for k in self.done_keys if k in keys]
        if not present_done:
            raise KeyError(
                f"{where}: none of the done entries {[key_str(k) for k in self.done_keys]} "
                f"is in the data (entries: {sorted(map(key_str, keys))}); episodes cannot "
                "be delimited. Add ('next', 'done') or pass done_keys=."
            )
        if self.reward_key not in keys:
            raise KeyError(
                f"{where}: reward entry {key_str(self.reward_key)} is missing "
                f"(entries: {sorted(map(key_str, keys))}); pass reward_key= if it has another name."
            )
        for key in (self.reward_key, *present_done):
            value = data.get(key)
            if value.shape[batch_dims:] != (1,):
                raise ValueError(
                    f"{where}: {key_str(key)} has shape {tuple(value.shape)}, expected "
                    f"{tuple(value.shape[:batch_dims]) + (1,)} (a trailing dim of 1, TorchRL layout)."
                )
        for key in present_done:
            if data.get(key).dtype != torch.bool:
                raise TypeError(
                    f"{where}: {key_str(key)} has dtype {data.get(key).dtype}, expected torch.bool."
                )
        shared = [k for k in keys if k[0] != "next" and ("next", *k) in keys]
        if not shared:
            raise KeyError(
                f"{where}: no observation found: no entry is present both at the root and "
                "under 'next' (e.g. 'observation' and ('next', 'observation'))."
            )
        schema = RowSchema.infer(data, batch_dims)
        if flat:
            if self.num_streams is None:
                raise ValueError(
                    f"{where}: a flat batch with {key_str(self.traj_key)} needs the number of "
                    "envs: build EpisodeWriter(num_streams=...), or pass [num_envs, time] data."
                )
            num_streams = self.num_streams
        else:
            num_streams = data.shape[0]
            if self.num_streams is not None and self.num_streams != num_streams:
                raise ValueError(
                    f"{where}: data has {num_streams} envs (batch {tuple(data.shape)}), "
                    f"expected num_streams={self.num_streams}."
                )
        self._storage.initialize(schema, num_streams)

    def _done(self, steps: TensorDictBase) -> torch.Tensor:
        done = None
        for key in self.done_keys:
            value = steps.get(key, None)
            if value is not None:
                value = value.reshape(steps.shape)
                done = value if done is None else done | value
        return done

    def _traj(self, steps: TensorDictBase) -> torch.Tensor | None:
        value = steps.get(self.traj_key, None)
        return None if value is None else value.reshape(steps.shape).long()

    # -------------------------------------------------- TorchRL writer contract
    def _mark_update_entities(self, index: torch.Tensor) -> None:
        for entity in self._storage._attached_entities_iter():
            entity.mark_update(index)

    def _empty(self, empty_write_count: bool = True) -> None:
        if empty_write_count:
            self._write_count = 0

    def state_dict(self) -> dict[str, Any]:
        return {"_write_count": self._write_count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._write_count = int(state_dict["_write_count"])

    def dumps(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "metadata.json").write_text(json.dumps(self.state_dict()))

    def loads(self, path: str | Path) -> None:
        self.load_state_dict(json.loads((Path(path) / "metadata.json").read_text()))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_streams={self.num_streams}, "
            f"done_keys={self.done_keys}, write_count={self._write_count})"
        )


def _leaf_keys(data: TensorDictBase) -> set[tuple[str, ...]]:
    return {as_key(k) for k in data.keys(include_nested=True, leaves_only=True)}


def _pop(data: TensorDictBase, key: tuple[str, ...]):
    """Split an optional bool entry off ``data`` (shaped like the batch)."""
    value = data.get(key, None)
    if value is None:
        return None, data
    return value.reshape(data.shape).bool(), data.exclude(key)


def _as_streams_by_time(data: TensorDictBase):
    """View ``data`` as ``[streams, time]``; also return how to map rows back."""
    names = data.names if data.ndim else []
    if data.ndim == 0:
        return data.reshape(1, 1), lambda rows: rows[0, 0]
    if data.ndim == 1:
        if names[0] == "time":
            return data.unsqueeze(0), lambda rows: rows[0]
        return data.unsqueeze(1), lambda rows: rows[:, 0]
    if data.ndim == 2:
        if names[0] == "time":
            return data.transpose(0, 1), lambda rows: rows.transpose(0, 1)
        return data, lambda rows: rows
    raise ValueError(
        f"EpisodeWriter: batch shape {tuple(data.shape)} has {data.ndim} dims, expected "
        "[], [num_envs], [num_envs, time] or a flat batch with trajectory ids; "
        "reshape to [num_envs, time] first."
    )
