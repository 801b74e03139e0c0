"""What a stored row holds, inferred once from the first write and enforced after.

Incoming transitions use TorchRL's layout: observation keys at the root and again
under ``"next"``, next-only entries (reward, done flags) under ``"next"``, and
root-only entries (action, trajectory ids, ...). A row stores each observation
key once (``shared``), plus the ``root_only`` and ``next_only`` entries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

__all__ = [
    "EntryKeyError", "RowSchema", "as_key", "get_unchecked", "key_str", "missing_entry",
    "pop_unchecked", "put_leaf", "set_unchecked", "tensordict_of", "unchecked_tensordict",
]

_NEW = TensorDict.__new__  # a bare TensorDict, as _new_unsafe makes one (see tensordict_of)


class EntryKeyError(KeyError):
    """A ``KeyError`` about an entry, shown as written (``KeyError`` shows its repr).

    Examples:
        >>> print(EntryKeyError("missing 'reward'"), KeyError("missing 'reward'"))
        missing 'reward' "missing 'reward'"
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def as_key(key: NestedKey, name: str | None = None, owner: str | None = None) -> tuple[str, ...]:
    """Normalise a nested key to a tuple of strings.

    ``name`` (and ``owner``) name the argument in the error: a key a user
    passes (``reward_key=``) is refused naming it.

    Raises:
        TypeError: ``key`` is not a str or a non-empty sequence of str (``3``, ``[3]``).

    Examples:
        >>> as_key("reward"), as_key(["next", "reward"])
        (('reward',), ('next', 'reward'))
        >>> as_key(3)
        Traceback (most recent call last):
        ...
        TypeError: key 3 (int): expected a str or a tuple of str (a nested key such as ('next', 'reward')).
        >>> as_key(3, "reward_key", "NStepTransform")
        Traceback (most recent call last):
        ...
        TypeError: NStepTransform: reward_key=3 (int), expected a str or a tuple of str (a nested key such as ('next', 'reward')).
    """
    if isinstance(key, str):
        return (key,)
    parts = tuple(key) if isinstance(key, (tuple, list)) else None
    if not parts or not all(isinstance(part, str) for part in parts):
        expected = "expected a str or a tuple of str (a nested key such as ('next', 'reward'))."
        if name is None:
            raise TypeError(f"key {key!r} ({type(key).__name__}): {expected}")
        raise TypeError(f"{owner + ': ' if owner else ''}{name}={key!r} ({type(key).__name__}), {expected}")
    return parts


def put_leaf(tree: dict[str, Any], key: tuple[str, ...], value: Any) -> None:
    """Put ``value`` at the tuple ``key`` of the nested dicts ``tree``, making the dicts on the way.

    Examples:
        >>> tree = {}
        >>> put_leaf(tree, ("next", "reward"), 1.0); put_leaf(tree, ("action",), 2.0)
        >>> tree
        {'next': {'reward': 1.0}, 'action': 2.0}
    """
    for part in key[:-1]:
        tree = tree.setdefault(part, {})
    tree[key[-1]] = value


def set_unchecked(tensordict: TensorDictBase, key: NestedKey, value: torch.Tensor) -> None:
    """``tensordict.set(key, value)`` without TensorDict's checks, for a value known to fit.

    For entries computed from the batch itself (its leading dims, on its
    device): the checks would cost more than the computation.

    Examples:
        >>> td = TensorDict({"next": {"reward": torch.zeros(2, 1)}}, [2])
        >>> set_unchecked(td, ("next", "reward"), torch.ones(2, 1))
        >>> td["next", "reward"].view(-1).tolist()
        [1.0, 1.0]
    """
    if type(key) is not tuple:
        key = as_key(key)
    node: Any = tensordict
    # the parents of a nested key, read from plain TensorDicts' entry dicts (TensorDict's
    # _set_tuple walks four layers of Python per level); a missing or other kind of
    # parent is left to _set_tuple, which makes or refuses it
    for depth in range(len(key) - 1):
        child = node._tensordict.get(key[depth]) if type(node) is TensorDict else None
        if type(child) is not TensorDict:
            node._set_tuple(key[depth:], value, inplace=False, validated=True)
            return
        node = child
    if type(node) is TensorDict and not node._is_locked:
        node._tensordict[key[-1]] = value  # what _set_str does with a validated value
    else:  # a locked one refuses as its own set does
        node._set_str(key[-1], value, inplace=False, validated=True)


def get_unchecked(tensordict: TensorDictBase, key: NestedKey) -> Any:
    """``tensordict.get(key, None)``, read from a plain TensorDict's entry dicts.

    A sample-time transform reads a few entries of every batch; TensorDict's
    ``get`` walks several layers of Python per key, which cost more than the
    transform's arithmetic once a gather has cooled the caches. Other kinds
    (lazy stacks, tensorclasses...) answer through their own ``get``. A key
    that runs through a tensor (``("reward", "x")``) holds nothing: ``None``.

    Raises:
        TypeError: ``tensordict`` is not a TensorDict.

    Examples:
        >>> td = TensorDict({"next": {"reward": torch.zeros(2, 1)}}, [2])
        >>> get_unchecked(td, ("next", "reward")).shape, get_unchecked(td, ("next", "done"))
        (torch.Size([2, 1]), None)
    """
    if type(key) is str and type(tensordict) is TensorDict:  # a root key: one dict lookup
        return tensordict._tensordict.get(key)
    if type(key) is not tuple:
        key = as_key(key)
    node: Any = tensordict
    for depth, part in enumerate(key):
        if type(node) is not TensorDict:
            if isinstance(node, TensorDictBase):
                return node.get(key[depth:], None)
            if not depth:
                raise _not_a_tensordict("get_unchecked", tensordict)
            return None
        node = node._tensordict.get(part)
        if node is None:
            return None
    return node


def pop_unchecked(tensordict: TensorDictBase, key: str) -> Any:
    """``tensordict.pop(key, None)`` for a root key, from a plain TensorDict's entry dict.

    See :func:`get_unchecked`; a locked TensorDict, or another kind, pops (or
    refuses) as its own ``pop`` does.

    Raises:
        TypeError: ``tensordict`` is not a TensorDict.

    Examples:
        >>> td = TensorDict({"n_step": {"reward": torch.zeros(2, 3)}}, [2])
        >>> pop_unchecked(td, "n_step").batch_size, "n_step" in td.keys()
        (torch.Size([2]), False)
    """
    if type(tensordict) is TensorDict and not tensordict._is_locked:
        return tensordict._tensordict.pop(key, None)
    if not isinstance(tensordict, TensorDictBase):
        raise _not_a_tensordict("pop_unchecked", tensordict)
    return tensordict.pop(key, None)


def _not_a_tensordict(where: str, value: Any) -> TypeError:
    return TypeError(f"{where}: expected a TensorDict, got {type(value).__name__}.")


def unchecked_tensordict(
    leaves: Mapping[tuple[str, ...], torch.Tensor],
    batch_size: torch.Size,
    device: torch.device | None = None,
    names: list[str | None] | None = None,
) -> TensorDict:
    """A TensorDict of ``leaves`` (tuple keys), with no check of their shapes or devices.

    For entries whose leading dims are ``batch_size`` and which are on
    ``device`` by construction (a gather's views, a write's checked inputs):
    TensorDict's own checks would cost more than building them. ``names``:
    the batch dims' names (the root's).

    Examples:
        >>> td = unchecked_tensordict({("next", "reward"): torch.zeros(2, 1)}, torch.Size([2]))
        >>> td["next", "reward"].shape, td["next"].batch_size
        (torch.Size([2, 1]), torch.Size([2]))
    """
    tree: dict[str, Any] = {}
    for key, value in leaves.items():
        put_leaf(tree, key, value)
    return tensordict_of(tree, batch_size, device, names)


def tensordict_of(
    tree: dict[str, Any],
    batch_size: torch.Size,
    device: torch.device | None = None,
    names: list[str | None] | None = None,
) -> TensorDict:
    """Nested dicts of tensors to a TensorDict (each sub-dict one of the same batch size and device), unchecked.

    For tensors whose leading dims are ``batch_size`` and which are on
    ``device`` by construction. The TensorDicts carry ``device``, so entries
    set later (masks, window lengths) are put there too; ``names``: the
    batch dims' names (the root's). ``tree``'s sub-dicts are replaced by
    their TensorDicts (it is consumed).

    Built from the leaves up, each TensorDict given the four attributes
    ``TensorDict._new_unsafe`` gives one (the same in tensordict 0.13 and
    0.14; a test pins them): its entries, batch size, dim names and device.
    ``_new_unsafe`` itself, given a device, converts it again and asks torch
    whether MPS is available, for every TensorDict it makes (nested ones
    too), and parses its keywords and copies the entries each time: ~0.8 µs
    a TensorDict warm, against ~0.2 here. A W1 ``rb.sample()`` (two
    TensorDicts) took 0.945-0.965x the time without the device handling,
    then 0.89-0.95x without ``_new_unsafe`` (in-process A/Bs, 2-CPU Xeon).
    (Under ``torch.compile``, ``_new_unsafe`` calls the checked constructor;
    no batch of a buffer's sample is built in a compiled graph.)

    Examples:
        >>> td = tensordict_of({"next": {"r": torch.zeros(2, 1)}}, torch.Size([2]), torch.device("cpu"))
        >>> td["next"].batch_size, td["next"].device
        (torch.Size([2]), device(type='cpu'))
    """
    for name, value in tree.items():
        if isinstance(value, dict):  # (as the constructor: a dict subclass too)
            tree[name] = tensordict_of(value, batch_size, device)
    td = _NEW(TensorDict)
    td._tensordict = tree if type(tree) is dict else dict(tree)
    td._batch_size = batch_size
    td._td_dim_names = names
    td._device = device if device is None or type(device) is torch.device else torch.device(device)
    return td


def key_str(key: NestedKey) -> str:
    """The way a key is written in error messages: ``"a"`` or ``("next", "a")``.

    Examples:
        >>> print(key_str("a"), key_str(("next", "a")))
        'a' ('next', 'a')
    """
    key = as_key(key)
    return repr(key[0]) if len(key) == 1 else repr(key)


def missing_entry(
    owner: str, name: str, key: NestedKey, held: Iterable[NestedKey], where: str
) -> EntryKeyError:
    """The error for ``key``, the ``name=`` argument of ``owner``, not found among ``held``.

    Examples:
        >>> print(missing_entry("T", "reward_key", ("next", "r"), [("next", "reward")], "windows"))
        T: reward_key=('next', 'r') is not among the windows (held: ('next', 'reward')); pass reward_key= one of them.
    """
    entries = ", ".join(sorted(key_str(k) for k in held))
    return EntryKeyError(
        f"{owner}: {name}={key_str(key)} is not among the {where} (held: {entries}); "
        f"pass {name}= one of them."
    )


@dataclass(frozen=True)
class LeafSpec:
    """Shape (after the batch dims) and dtype of one entry."""

    shape: torch.Size
    dtype: torch.dtype


@dataclass(frozen=True)
class RowSchema:
    """The entries of a transition and how each is stored.

    Attributes:
        shared: root keys that also appear under ``"next"`` (stored once per row).
        root_only: root keys with no ``"next"`` counterpart (action, ids).
        next_only: keys under ``"next"`` (without the ``"next"`` prefix) with no
            root counterpart (reward, done flags).
        leaves: spec of every input leaf, by its full key.

    Examples:
        >>> import torch
        >>> schema = RowSchema.infer({("obs",): torch.zeros(4, 3), ("next", "obs"): torch.zeros(4, 3),
        ...     ("action",): torch.zeros(4, 1), ("next", "reward"): torch.zeros(4, 1)}, batch_dims=1)
        >>> schema.row_keys  # the observation is stored once per row
        (('obs',), ('action',), ('next', 'reward'))
    """

    shared: tuple[tuple[str, ...], ...]
    root_only: tuple[tuple[str, ...], ...]
    next_only: tuple[tuple[str, ...], ...]
    leaves: dict[tuple[str, ...], LeafSpec]
    # full shape and dtype of each entry for the last batch shape validated (one
    # slot: [N, T] writes of many lengths must not grow it)
    _expected: dict[tuple[int, ...], dict[tuple[str, ...], tuple[torch.Size, torch.dtype]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def infer(cls, data: dict[tuple[str, ...], torch.Tensor], batch_dims: int) -> RowSchema:
        """Infer the schema from entries whose first ``batch_dims`` dims are batch."""
        leaves = {k: LeafSpec(v.shape[batch_dims:], v.dtype) for k, v in data.items()}
        root = [k for k in leaves if k[0] != "next"]
        nxt = [k[1:] for k in leaves if k[0] == "next"]
        nxt_set = set(nxt)
        shared = tuple(k for k in root if k in nxt_set)
        for key in shared:
            if leaves[key] != leaves[("next", *key)]:
                raise ValueError(
                    f"{key_str(key)} has shape {tuple(leaves[key].shape)} / {leaves[key].dtype} "
                    f"but {key_str(('next', *key))} has shape "
                    f"{tuple(leaves[('next', *key)].shape)} / {leaves[('next', *key)].dtype}; "
                    "an observation and its next observation must match."
                )
        shared_set = set(shared)
        return cls(
            shared=shared,
            root_only=tuple(k for k in root if k not in shared_set),
            next_only=tuple(k for k in nxt if k not in shared_set),
            leaves=leaves,
        )

    def to_meta(self) -> dict[str, Any]:
        """The schema as lists and strings, for a checkpoint's JSON; :meth:`from_meta` reads it back.

        Examples:
            >>> import torch
            >>> schema = RowSchema.infer({("obs",): torch.zeros(2, 3), ("next", "obs"): torch.zeros(2, 3),
            ...     ("next", "done"): torch.zeros(2, 1, dtype=torch.bool)}, batch_dims=1)
            >>> schema.to_meta()["leaves"][-1]
            [['next', 'done'], [1], 'bool']
            >>> RowSchema.from_meta(schema.to_meta()) == schema
            True
        """
        return {
            "shared": [list(k) for k in self.shared],
            "root_only": [list(k) for k in self.root_only],
            "next_only": [list(k) for k in self.next_only],
            "leaves": [
                [list(k), list(v.shape), str(v.dtype).removeprefix("torch.")]
                for k, v in self.leaves.items()
            ],
        }

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> RowSchema:
        """The schema :meth:`to_meta` wrote (other keys of ``meta`` are ignored).

        Examples:
            >>> meta = {"shared": [["obs"]], "root_only": [], "next_only": [["done"]], "max_size": 8,
            ...         "leaves": [[["obs"], [3], "float32"], [["next", "obs"], [3], "float32"],
            ...                    [["next", "done"], [1], "bool"]]}
            >>> RowSchema.from_meta(meta).row_keys
            (('obs',), ('next', 'done'))
        """
        return cls(
            shared=tuple(tuple(k) for k in meta["shared"]),
            root_only=tuple(tuple(k) for k in meta["root_only"]),
            next_only=tuple(tuple(k) for k in meta["next_only"]),
            leaves={
                tuple(k): LeafSpec(torch.Size(shape), getattr(torch, dtype))
                for k, shape, dtype in meta["leaves"]
            },
        )

    @property
    def row_keys(self) -> tuple[tuple[str, ...], ...]:
        """Keys of a stored row."""
        return (
            self.shared + self.root_only + tuple(("next", *k) for k in self.next_only)
        )

    def validate(
        self, leaves: dict[tuple[str, ...], torch.Tensor], batch: tuple[int, ...], where: str
    ) -> None:
        """Raise if ``leaves`` (batch shape ``batch``) are not exactly the schema's entries.

        Raises:
            KeyError: an entry is missing or unexpected.
            ValueError: an entry has another shape.
            TypeError: an entry has another dtype.
        """
        expected = self._expected.get(batch)
        if expected is None:
            expected = {k: (torch.Size(batch + tuple(s.shape)), s.dtype) for k, s in self.leaves.items()}
            self._expected.clear()
            self._expected[batch] = expected
        for key, value in leaves.items():
            want = expected.get(key)  # torch's dtypes are singletons: `is` settles them
            if want is None or value.shape != want[0] or value.dtype is not want[1]:
                self._refuse(key, value, batch, where)
        if len(leaves) != len(self.leaves):
            missing = sorted(key_str(k) for k in self.leaves if k not in leaves)
            raise EntryKeyError(f"{where}: missing entries {missing} (stored in every row).")

    def _refuse(self, key: tuple[str, ...], value: torch.Tensor, batch: tuple[int, ...], where: str) -> NoReturn:
        """The error for entry ``key`` of a write, which :meth:`validate` found not to match."""
        spec = self.leaves.get(key)
        if spec is None:
            raise EntryKeyError(
                f"{where}: unexpected entry {key_str(key)}; the buffer stores "
                f"{sorted(map(key_str, self.leaves))}. Remove it or start a new buffer "
                "with it from the first write."
            )
        if value.shape != batch + tuple(spec.shape):
            raise ValueError(
                f"{where}: {key_str(key)} has shape {tuple(value.shape)}, expected "
                f"{batch + tuple(spec.shape)} (batch {batch} + {tuple(spec.shape)} "
                "as in the first write)."
            )
        raise TypeError(
            f"{where}: {key_str(key)} has dtype {value.dtype}, expected "
            f"{spec.dtype} as in the first write."
        )
