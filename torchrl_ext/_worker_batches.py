"""How a DataLoader worker's batch reaches the main process: packed into one buffer, through a pipe that holds it.

DataLoader would send each tensor of a worker's batch through shared memory,
one file descriptor per tensor: for a batch of a dozen entries, several times
the cost of the sample. Here a worker packs its TensorDict batch into one
byte buffer (:class:`_Packed`), which crosses by value through the result
queue's pipe, widened to hold it whole (:class:`_WidePipeLoader`), or, above
:data:`_BY_VALUE_BYTES` (pixels), as one shared-memory block. Private to
:mod:`torchrl_ext.loader`, which builds every loader with them.
"""
from __future__ import annotations

import multiprocessing.connection
import weakref
from typing import Any, Callable

import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader, get_worker_info

from torchrl_ext.core.schema import tensordict_of

__all__: list[str] = []


class _WidePipeLoader(DataLoader):
    """A ``DataLoader`` whose workers' batches cross a pipe that holds a whole batch.

    A worker sends each batch through one pipe, which Linux sizes to 64 KiB:
    a batch packed by value (:class:`_Packed`, up to :data:`_BY_VALUE_BYTES`)
    above that crosses in pieces, the worker's feeder thread waiting for the
    main process to read each one; with 4 workers on 2 cores, each wait is a
    trip through the scheduler. The pipe is widened to hold a batch whole, up
    to the system's cap (Linux; elsewhere, or past the user's pipe quota, it
    stays as it is).
    """

    def _get_iterator(self) -> Any:
        iterator = super()._get_iterator()
        # with workers: the queue their batches come by, read here through its pipe (the
        # workers may have sent their first batches already: a pipe holding data can grow)
        reader = getattr(getattr(iterator, "_worker_result_queue", None), "_reader", None)
        if reader is not None:
            _widen(reader)
        queues = getattr(iterator, "_index_queues", None)
        if queues:
            weakref.finalize(iterator, _open_until_stopped, queues).atexit = False
        return iterator


def _open_until_stopped(queues: list[Any]) -> None:
    """Nothing: a finalizer of a multi-process iterator holds its workers' index ``queues`` with it.

    An iterator in a reference cycle (a facade whose methods it calls, the
    traceback of a worker's error) is collected by gc, which first runs the
    finalizers of the queues it reaches through weak references: they tell
    the queues' feeder threads to stop. DataLoader's own ``__del__`` then
    puts its workers' stop signal in queues that never send it, waits 5 s
    for each worker and kills it. Held by this finalizer, the queues are not
    collected with the iterator: they are released once it is collected,
    after its ``__del__``.
    """


def _widen(pipe: multiprocessing.connection.Connection) -> None:
    """Grow ``pipe`` to hold a batch packed by value whole: twice :data:`_BY_VALUE_BYTES`, at most the system's cap."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return
    get, set_ = getattr(fcntl, "F_GETPIPE_SZ", None), getattr(fcntl, "F_SETPIPE_SZ", None)
    if get is None or set_ is None:  # not Linux
        return
    try:
        size = min(2 * _BY_VALUE_BYTES, _pipe_max_size())
        if fcntl.fcntl(pipe.fileno(), get) < size:  # only ever grown
            fcntl.fcntl(pipe.fileno(), set_, size)
    except OSError:  # past the user's pipe quota: left as it is
        pass


def _pipe_max_size() -> int:
    """The largest pipe an unprivileged process may ask for (Linux), 1 MiB if unknown."""
    try:
        with open("/proc/sys/fs/pipe-max-size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20


class _CollateByValue:
    """``collate_fn``; in a worker, its TensorDict batches then cross to the main process packed.

    DataLoader sends a worker's tensors through shared memory, one file
    descriptor per tensor, each fetched by the main process over a socket: for
    a batch of a dozen entries that costs several times the sample itself
    (2 workers served fewer batches than sampling in the loop). Packed into
    one byte buffer (:class:`_Packed`) and pickled by value, a batch costs one
    copy of its bytes through the pipe.
    """

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, items: Any) -> Any:
        batch = self.collate_fn(items)
        if type(batch) is TensorDict and get_worker_info() is not None:
            packed = _Packed.of(batch)
            return batch if packed is None else packed
        return batch


#: A packed TensorDict's tree: ``(batch size, device, entries)``, each entry
#: ``(name, leaf number)`` or ``(name, tree)`` of a nested TensorDict.
_Tree = tuple[tuple[int, ...], Any, tuple[tuple[str, Any], ...]]


class _Packed:
    """A TensorDict that unpickles as itself, sent as one byte buffer and the tree of its entries.

    Every leaf is copied into one buffer, leaves of wider dtypes first, so
    that each leaf starts at a multiple of its item size: it is packed and
    unpacked as a strided view of the buffer seen in its dtype (one tensor
    call each way, the copy aside). TensorDict's ``consolidate`` took about
    five times as long, and a worker packs every batch it serves. The batch
    received is a plain TensorDict, as a batch sampled in the main process:
    ``.to(device)`` moves it leaf by leaf (a consolidated one moved in one copy).

    Packed when built, in the worker's fetch (where DataLoader forwards an error
    to the main process), not when pickled (in the queue's feeder thread, where
    an error only prints and the batch is lost: the main process would wait
    forever). A buffer above :data:`_BY_VALUE_BYTES` (pixels) is put in shared
    memory: one file descriptor, and no copy through the pipe.

    Examples:
        >>> import pickle, torch
        >>> td = TensorDict({"x": torch.arange(4.).view(2, 2), "next": {"done": torch.ones(2, 1, dtype=torch.bool)}}, [2])
        >>> back = pickle.loads(pickle.dumps(_Packed.of(td)))
        >>> back["x"].tolist(), back["next", "done"].dtype, back["next"].batch_size
        ([[0.0, 1.0], [2.0, 3.0]], torch.bool, torch.Size([2]))
    """

    def __init__(self, tree: _Tree, spans: list[_Span], data: Any) -> None:
        self.reduced = (_unpack, (tree, spans, data))

    @classmethod
    def of(cls, batch: TensorDict) -> _Packed | None:
        """``batch`` packed; ``None`` if it holds anything but CPU tensors and TensorDicts (sent as it is)."""
        leaves: list[torch.Tensor] = []
        tree = _leaves_of(batch, leaves)
        if tree is None:
            return None
        # widest first: each leaf's offset is then a multiple of its item size (sizes are powers of 2)
        order = sorted(range(len(leaves)), key=lambda i: -leaves[i].element_size())
        spans: list[Any] = [None] * len(leaves)
        end = 0
        for i in order:
            leaf = leaves[i]
            size = leaf.element_size()
            spans[i] = (leaf.dtype, tuple(leaf.shape), _strides(leaf.shape), end // size)
            end += leaf.numel() * size
        widest = leaves[order[0]].element_size() if leaves else 1
        size = -(-end // widest) * widest  # the buffer is seen in every leaf's dtype
        shared = size > _BY_VALUE_BYTES
        if shared:  # made in shared memory (share_memory_ would copy it there)
            data = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(size))
        else:
            data = torch.empty(size, dtype=torch.uint8)
        place = _Placer(data)
        with torch.no_grad():  # a leaf that requires grad is sent as data
            for leaf, span in zip(leaves, spans):
                place(span).copy_(leaf)  # copy_ resolves neg / conj views
        return cls(tree, spans, data if shared else data.numpy())

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.reduced


#: A packed leaf: its dtype, shape, contiguous strides and offset (in items of its dtype).
_Span = tuple[torch.dtype, tuple[int, ...], tuple[int, ...], int]


def _strides(shape: torch.Size) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (as torch gives them: a 0 size counts as 1)."""
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class _Placer:
    """A packed leaf's place in the buffer ``data``: a strided view of it seen in the leaf's dtype.

    Packing writes through these views and unpacking returns them; ``data``
    is seen once in each dtype.
    """

    def __init__(self, data: torch.Tensor) -> None:
        self.data = data
        self.typed: dict[torch.dtype, torch.Tensor] = {}

    def __call__(self, span: _Span) -> torch.Tensor:
        dtype, shape, stride, offset = span
        view = self.typed.get(dtype)
        if view is None:
            view = self.typed[dtype] = self.data.view(dtype)
        return view.as_strided(shape, stride, offset)


def _leaves_of(td: TensorDict, leaves: list[torch.Tensor]) -> _Tree | None:
    """The tree of ``td``, its tensors appended to ``leaves``.

    ``None`` if ``td`` is not on the CPU or holds anything but dense CPU
    tensors and TensorDicts.
    """
    if td.device is not None and td.device.type != "cpu":
        return None
    entries: list[tuple[str, Any]] = []
    for name, value in td.items():
        if type(value) is torch.Tensor and value.device.type == "cpu" and value.layout is torch.strided:
            entries.append((name, len(leaves)))
            leaves.append(value)
        elif type(value) is TensorDict:
            sub = _leaves_of(value, leaves)
            if sub is None:
                return None
            entries.append((name, sub))
        else:  # a non-tensor entry, a lazy stack, a sparse tensor, a tensor elsewhere: sent as it is
            return None
    return tuple(td.batch_size), td.device, tuple(entries)


def _unpack(tree: _Tree, spans: list[_Span], data: Any) -> TensorDict:
    """The TensorDict packed by :class:`_Packed`: strided views of its one buffer."""
    place = _Placer(data if isinstance(data, torch.Tensor) else torch.from_numpy(data))

    def build(node: _Tree) -> TensorDict:
        batch, device, entries = node
        values: dict[str, Any] = {}
        for name, entry in entries:
            values[name] = place(spans[entry]) if type(entry) is int else build(entry)
        return tensordict_of(values, torch.Size(batch), device)

    return build(tree)


#: Worker batches up to this size cross by value, larger ones in shared memory (see :class:`_Packed`).
_BY_VALUE_BYTES = 1 << 20
