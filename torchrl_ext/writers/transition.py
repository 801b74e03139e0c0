"""Episode-aware writer: splits incoming data into env streams and places each step."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.data.replay_buffers.writers import Writer

from torchrl_ext.core.schema import EntryKeyError, RowSchema, as_key, key_str
from torchrl_ext.storages.transition import TransitionStorage

__all__ = ["TransitionWriter", "DEFAULT_DONE_KEYS"]

logger = logging.getLogger(__name__)

# TorchRL's multi-agent layout keeps rewards and dones per agent, [batch, n_agents, 1];
# episodes (and n-step windows) need one reward and one done per env step.
_MULTI_AGENT_FIX = (
    "TorchRL's multi-agent layout ([batch, n_agents, 1] rewards and dones) is not "
    "supported as the reward or done entries. Store one value per env step beside "
    "the per-agent ones, e.g. td['next', 'reward'] = td[{key!r}].{op}(-2) (and "
    "td['next', 'done'] / td['next', 'terminated'] likewise, with .any(-2)); the "
    "per-agent entries are then stored and sampled like any other entry."
)

DEFAULT_DONE_KEYS: tuple[NestedKey, ...] = (
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
)


class TransitionWriter(Writer):
    """Writes transitions into an :class:`~torchrl_ext.storages.TransitionStorage`.

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
        >>> from torchrl_ext.storages import TransitionStorage
        >>> from torchrl_ext.writers import TransitionWriter
        >>> from torchrl_ext.samplers import UniformTransitionSampler
        >>> rb = TensorDictReplayBuffer(storage=TransitionStorage(64), writer=TransitionWriter(),
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
            raise ValueError(f"TransitionWriter: num_streams={num_streams}, expected >= 1.")
        self.num_streams = num_streams
        self.done_keys = tuple(as_key(k) for k in done_keys)
        self.reward_key = as_key(reward_key)
        self.traj_key = as_key(traj_key)
        self.mask_key = as_key(mask_key)
        self._write_count = 0

    def register_storage(self, storage: Any) -> None:
        if not isinstance(storage, TransitionStorage):
            raise TypeError(
                f"TransitionWriter needs an TransitionStorage, got {type(storage).__name__}; "
                "build the buffer with storage=torchrl_ext.storages.TransitionStorage(max_size)."
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
        where = f"TransitionWriter.{where}"
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"{where}: expected a TensorDict, got {type(data).__name__}.")
        storage: TransitionStorage = self._storage
        leaves = {as_key(k): v for k, v in data.items(include_nested=True, leaves_only=True)}
        mask = leaves.pop(self.mask_key, None)
        batch = tuple(data.shape)
        flat = data.ndim == 1 and self.traj_key in leaves
        layout = None if flat else _Layout.of(data)
        if storage.schema is None:
            self._first_write(leaves, batch, where, layout)
        else:
            storage.schema.validate(leaves, batch, where)
        if layout is None:
            placed = self._write_fragments(leaves, mask, where)
            rows = torch.from_numpy(placed)
        else:
            if layout.streams != storage.num_streams:
                raise ValueError(
                    f"{where}: data has {layout.streams} envs (batch {batch}), but the "
                    f"buffer holds {storage.num_streams} streams fixed by its first write; "
                    "the env count cannot change (start a new buffer)."
                )
            leaves = {k: layout.flatten(v) for k, v in leaves.items()}
            if mask is not None:
                mask = layout.flatten(mask.reshape(batch)).numpy().reshape(layout.shape)
            placed = self._write_streams(leaves, layout.shape, mask)
            rows = layout.restore(torch.from_numpy(placed))
        self._write_count += int((placed >= 0).sum())  # skipped (masked) steps are -1
        self._mark_update_entities(rows)
        return rows

    def _write_streams(
        self,
        leaves: dict[tuple[str, ...], torch.Tensor],
        shape: tuple[int, int],
        mask: np.ndarray | None,
    ) -> np.ndarray:
        # leaves are [K * T, ...] with stream k at rows k*T .. k*T+T-1, in time order;
        # steps where mask is False are skipped.
        K, T = shape
        done, traj = self._done(leaves, shape), self._traj(leaves, shape)
        if mask is None or mask.all():
            return self._write_block(np.arange(K), done, traj, leaves)
        rows = np.full(shape, -1, dtype=np.int64)
        # streams with the same number of kept steps could share a plan; holes are
        # rare (padding, gymnasium reset steps), so keep it simple: T == 1 at once,
        # otherwise stream by stream.
        groups = [np.flatnonzero(mask[:, 0])] if T == 1 else [np.array([k]) for k in range(K)]
        for streams in groups:
            keep = mask[streams]  # [k, T]
            if not keep.any():
                continue
            flat = torch.from_numpy((streams[:, None] * T + np.arange(T))[keep])
            part = {key: value.index_select(0, flat) for key, value in leaves.items()}
            n = int(keep.sum()) // streams.size
            sub_traj = None if traj is None else traj[streams][keep].reshape(-1, n)
            sub_done = done[streams][keep].reshape(-1, n)
            placed = self._write_block(streams, sub_done, sub_traj, part)
            rows[streams[:, None].repeat(n, 1), np.nonzero(keep)[1].reshape(-1, n)] = placed
        return rows

    def _write_fragments(
        self,
        leaves: dict[tuple[str, ...], torch.Tensor],
        mask: torch.Tensor | None,
        where: str,
    ) -> np.ndarray:
        # A flat batch is a sequence of trajectory fragments, each in time order.
        storage: TransitionStorage = self._storage
        index = storage.index
        B = next(iter(leaves.values())).shape[0]
        rows = np.full(B, -1, dtype=np.int64)
        if mask is not None:
            kept = torch.nonzero(mask.reshape(B)).view(-1)
            leaves = {k: v.index_select(0, kept) for k, v in leaves.items()}
        else:
            kept = torch.arange(B)
        kept_np = kept.numpy()
        n = kept.numel()
        if not n:
            return rows
        traj = self._traj(leaves, (1, n))[0]
        done = self._done(leaves, (1, n))[0]
        cuts = np.flatnonzero(traj[1:] != traj[:-1]) + 1
        bounds = [0, *cuts.tolist(), n]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            tid = int(traj[lo])
            match = np.flatnonzero(index.stream_traj.numpy() == tid)
            if match.size:
                stream = int(match[0])
            else:
                free = np.flatnonzero(~index.is_open.numpy())
                if not free.size:
                    raise ValueError(
                        f"{where}: trajectory {key_str(self.traj_key)}={tid} starts while all "
                        f"{index.num_streams} streams hold running episodes; raise "
                        "TransitionWriter(num_streams=...) to the number of envs, or end "
                        "episodes with a done flag before a new trajectory id."
                    )
                stream = int(free[0])
            part = {k: v[lo:hi] for k, v in leaves.items()}
            placed = self._write_block(np.array([stream]), done[None, lo:hi], traj[None, lo:hi], part)
            rows[kept_np[lo:hi]] = placed[0]
        return rows

    def _write_block(
        self,
        streams: np.ndarray,
        done: np.ndarray,
        traj: np.ndarray | None,
        leaves: dict[tuple[str, ...], torch.Tensor],
    ) -> np.ndarray:
        """Plan and write ``[K, T]`` steps (leaves ``[K * T, ...]``); returns their rows.

        A stream's ring holds ``stream_capacity`` rows and ``c`` steps need at most
        ``2c`` of them, so longer writes go in time chunks of ``stream_capacity // 2``
        steps: the ring then keeps the newest rows, as any FIFO would.
        """
        storage: TransitionStorage = self._storage
        K, T = done.shape
        chunk = max(1, storage.index.stream_capacity // 2)
        if T <= chunk:
            plan = storage.index.plan(streams, done, traj)
            storage.write(plan, leaves)
            return plan.rows
        rows = np.empty((K, T), dtype=np.int64)
        for lo in range(0, T, chunk):
            hi = min(T, lo + chunk)
            flat = torch.from_numpy((np.arange(K)[:, None] * T + np.arange(lo, hi)).reshape(-1))
            part = {key: value.index_select(0, flat) for key, value in leaves.items()}
            plan = storage.index.plan(
                streams, done[:, lo:hi], None if traj is None else traj[:, lo:hi]
            )
            storage.write(plan, part)
            rows[:, lo:hi] = plan.rows
        return rows

    def _first_write(
        self,
        leaves: dict[tuple[str, ...], torch.Tensor],
        batch: tuple[int, ...],
        where: str,
        layout: _Layout | None,
    ) -> None:
        names = sorted(map(key_str, leaves))
        present_done = [k for k in self.done_keys if k in leaves]
        if not present_done:
            raise EntryKeyError(
                f"{where}: none of the done entries {[key_str(k) for k in self.done_keys]} "
                f"is in the data (entries: {names}); episodes cannot be delimited. "
                "Add ('next', 'done') or pass done_keys=."
            )
        if self.reward_key not in leaves:
            grouped = [k for k in leaves if k[0] == "next" and k[-1] == self.reward_key[-1]]
            raise EntryKeyError(
                f"{where}: reward entry {key_str(self.reward_key)} is missing "
                f"(entries: {names}); pass reward_key= if it has another name."
                + (f" {key_str(grouped[0])} looks like a per-agent reward: "
                   + _MULTI_AGENT_FIX.format(key=grouped[0], op="sum") if grouped else "")
            )
        nb = len(batch)
        for key in (self.reward_key, *present_done):
            value = leaves[key]
            shape = tuple(value.shape)
            if shape[:nb] == batch and len(shape) > nb + 1 and shape[-1] == 1:
                raise ValueError(
                    f"{where}: {key_str(key)} has shape {shape}, expected {batch + (1,)}: "
                    f"one value per env step, not per agent. "
                    + _MULTI_AGENT_FIX.format(key=key, op="sum" if key == self.reward_key
                                              else "any")
                )
            if shape != batch + (1,):
                raise ValueError(
                    f"{where}: {key_str(key)} has shape {shape}, expected "
                    f"{batch + (1,)} (the batch {batch} plus a trailing dim of 1, TorchRL layout)."
                )
        for key in present_done:
            if leaves[key].dtype != torch.bool:
                raise TypeError(
                    f"{where}: {key_str(key)} has dtype {leaves[key].dtype}, expected torch.bool."
                )
        if not any(k[0] != "next" and ("next", *k) in leaves for k in leaves):
            raise EntryKeyError(
                f"{where}: no observation found: no entry is present both at the root and "
                "under 'next' (e.g. 'observation' and ('next', 'observation'))."
            )
        schema = RowSchema.infer(leaves, nb)
        if layout is None:
            if self.num_streams is None:
                raise ValueError(
                    f"{where}: a flat batch with {key_str(self.traj_key)} needs the number of "
                    "envs: build TransitionWriter(num_streams=...), or pass [num_envs, time] data."
                )
            num_streams = self.num_streams
        else:
            num_streams = layout.streams
            if self.num_streams is not None and self.num_streams != num_streams:
                raise ValueError(
                    f"{where}: data has {num_streams} envs (batch {batch}), "
                    f"expected num_streams={self.num_streams}."
                )
        self._storage.initialize(schema, num_streams)
        rows = self._storage.max_size
        logger.info(
            "TransitionWriter: %d stream(s) fixed by the first write (batch %s): each "
            "gets %d of the %d rows%s; later writes must have %d envs.",
            num_streams, batch, rows // num_streams, rows,
            f" ({rows % num_streams} left unused)" if rows % num_streams else "",
            num_streams,
        )

    def _done(self, leaves: dict, shape: tuple[int, int]) -> np.ndarray:
        done = None
        for key in self.done_keys:
            value = leaves.get(key)
            if value is not None:
                done = value if done is None else done | value
        return done.reshape(shape).numpy()

    def _traj(self, leaves: dict, shape: tuple[int, int]) -> np.ndarray | None:
        value = leaves.get(self.traj_key)
        return None if value is None else value.reshape(shape).long().numpy()

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


class _Layout:
    """Which batch dims are streams and which is time, and how to flatten.

    ``flatten`` maps an entry to ``[streams * time, ...]`` (stream-major);
    ``restore`` maps ``[streams, time]`` rows back to the batch shape.
    """

    def __init__(self, batch: tuple[int, ...], time_first: bool) -> None:
        self.batch = batch
        self.time_first = time_first
        if len(batch) == 0:
            self.shape = (1, 1)
        elif len(batch) == 1:
            self.shape = (1, batch[0]) if time_first else (batch[0], 1)
        elif len(batch) == 2:
            self.shape = (batch[1], batch[0]) if time_first else (batch[0], batch[1])
        else:
            raise ValueError(
                f"TransitionWriter: batch shape {batch} has {len(batch)} dims, expected "
                "[], [num_envs], [num_envs, time] or a flat batch with trajectory ids; "
                "reshape to [num_envs, time] first."
            )
        self.streams = self.shape[0]

    @classmethod
    def of(cls, data: TensorDictBase) -> _Layout:
        return cls(tuple(data.shape), bool(data.ndim) and data.names[0] == "time")

    def flatten(self, value: torch.Tensor) -> torch.Tensor:
        nb = len(self.batch)
        if nb == 1 and not self.time_first:
            return value  # [N, ...] is already stream-major with T == 1
        if nb == 2 and self.time_first:
            value = value.transpose(0, 1)
        return value.reshape(self.shape[0] * self.shape[1], *value.shape[nb:])

    def restore(self, rows: torch.Tensor) -> torch.Tensor:
        if len(self.batch) == 0:
            return rows[0, 0]
        if len(self.batch) == 1:
            return rows[0] if self.time_first else rows[:, 0]
        return rows.transpose(0, 1) if self.time_first else rows
