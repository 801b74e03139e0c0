"""Proportional prioritized replay over live transitions (Schaul et al., 2016).

A sum tree over the storage's physical rows holds each row's sampling mass
``p_i = (priority_i + eps) ** alpha``; rows that are not live transitions
(unwritten, evicted, or holding only an episode's final or pending
observation) hold 0, so they are never drawn. Sampling and updates are
vectorized numpy over the tree levels: O(batch * log capacity).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torchrl.data.replay_buffers.samplers import PrioritizedSampler, Sampler

from torchrl_ext.core.checks import as_priorities, check_number
from torchrl_ext.samplers._generator import generator_state, restore_generator
from torchrl_ext.samplers.uniform import (
    EMPTY_BUFFER,
    EmptyBufferError,
    check_batch_size,
    storage_index,
)
from torchrl_ext.storages.transition import TransitionStorage

__all__ = ["PrioritizedTransitionSampler"]

_MAX_ROUNDS = 64
# Sampling finds the node of level _SCAN_LEVEL (2**11 nodes) by a prefix sum and
# a binary search, then descends from there: a 16 KiB cumsum costs less than the
# 11 numpy descent steps it replaces.
_SCAN_LEVEL = 11


# ----------------------------------------------------------- sum-tree functions
# The tree is a flat float64 array of 2 * size entries, size a power of two:
# node n has children 2n and 2n + 1, the root is node 1, leaf r (physical row r)
# is node size + r, level l holds nodes [2**l, 2**(l+1)). ``pairs`` is the same
# memory viewed as complex128, so ``pairs[n]`` gathers both children of node n
# in one 16-byte read (``.real`` left, ``.imag`` right).


def _tree_set(tree: np.ndarray, pairs: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """Set leaves ``rows`` to ``values`` and recompute their ancestors.

    Each ancestor is recomputed from its two children (not incremented), so the
    tree never drifts from the sum of its leaves. Repeated rows must carry
    equal values: a repeated node is then written with equal sums.
    Cost: O(k * (log size - _SCAN_LEVEL) + 2**_SCAN_LEVEL).
    """
    size = tree.shape[0] // 2
    node = rows + size  # [k]
    tree[node] = values
    level = size.bit_length() - 1  # of node
    while level > _SCAN_LEVEL:  # the ancestors, one level up at a time
        node >>= 1
        level -= 1
        children = pairs[node]
        tree[node] = children.real + children.imag
    # the top levels (< 2**_SCAN_LEVEL nodes) whole: cheaper than gathers
    for top in range(level - 1, -1, -1):
        children = pairs[1 << top : 2 << top]
        np.add(children.real, children.imag, out=tree[1 << top : 2 << top])


def _tree_descend(
    tree: np.ndarray, pairs: np.ndarray, node: np.ndarray, u: np.ndarray, *, guarded: bool
) -> np.ndarray:
    """Walk from ``node`` (all on one level) down to the leaf holding mass ``u``.

    ``u`` is consumed (made relative to the chosen subtree). With ``guarded``,
    a step never enters a zero-mass child, so a positive node always ends on a
    positive leaf, whatever float rounding did to ``u``.
    """
    size = tree.shape[0] // 2
    for _ in range(size.bit_length() - node[0].item().bit_length()):
        children = pairs[node]
        left = children.real
        go_right = u >= left
        if guarded:
            go_right = (go_right & (children.imag > 0)) | (left <= 0)
        u -= left * go_right
        node <<= 1
        node += go_right
    return node


def _tree_sample(
    tree: np.ndarray, pairs: np.ndarray, r: np.ndarray, segments: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """Stratified proportional draws: draw ``i`` falls in segment ``segments[i]`` of the mass.

    Args:
        r: ``[B]`` uniform draws in ``[0, 1)``.
        segments: ``[B]`` a permutation of ``0 .. B - 1``.

    Returns:
        ``(rows, mass, total)``: the drawn leaves ``[B]``, their masses ``[B]``
        (all positive) and the total mass (0: nothing can be drawn).
    """
    size = tree.shape[0] // 2
    level = min(size.bit_length() - 1, _SCAN_LEVEL)
    first = 1 << level
    top = tree[first : 2 * first]  # [2**level] masses of one level
    cum = np.cumsum(top)
    total = float(cum[-1])
    B = r.shape[0]
    if total <= 0.0:
        return np.empty(0, dtype=np.int64), np.empty(0), total
    u = (segments + r) * (total / B)  # [B] one per segment
    pos = np.searchsorted(cum, u, side="right")  # first node whose cumulated mass exceeds u
    if pos.max() >= top.shape[0]:  # u rounded up to the total: take the last positive node
        np.minimum(pos, np.flatnonzero(top)[-1], out=pos)
    u -= cum[pos] - top[pos]
    node = _tree_descend(tree, pairs, pos + first, u, guarded=False)
    mass = tree[node]
    zero = mass <= 0
    if zero.any():
        # rounding carried u past a subtree's mass into a zero-mass sibling: redo
        # those draws from the root, never entering a zero-mass child
        redo = np.flatnonzero(zero)
        u_redo = np.minimum((segments[redo] + r[redo]) * (tree[1] / B), tree[1])
        node[redo] = _tree_descend(tree, pairs, np.ones(redo.size, np.int64), u_redo, guarded=True)
        mass = tree[node]
    return node - size, mass, total


def _tree_size(num_rows: int) -> int:
    """Leaves of the tree: the smallest power of two >= ``num_rows`` (at least 2)."""
    return 1 << max(1, (num_rows - 1).bit_length())


# ---------------------------------------------------------------- the sampler
class PrioritizedTransitionSampler(Sampler):
    """Proportional prioritized transitions of an :class:`~torchrl_ext.storages.TransitionStorage`.

    Live transition ``i`` is drawn with probability

    .. math::

        P(i) = \\frac{p_i}{\\sum_j p_j}, \\qquad p_i = (\\text{priority}_i + \\epsilon)^\\alpha,

    the sum running over live transitions only (Schaul et al., 2016,
    "Prioritized Experience Replay", proportional variant). A batch of ``B`` is
    stratified: the total mass is cut in ``B`` equal segments, one draw is
    uniform within each, and the draws come in random order (so that a
    position of the batch is a draw from the whole distribution, whatever a
    refining sampler does with it). Each draw comes with the importance weight

    .. math::

        w_i = \\frac{(N \\, P(i))^{-\\beta}}{\\max_{j \\in \\text{batch}} (N \\, P(j))^{-\\beta}}
            = \\left(\\frac{\\min_{j \\in \\text{batch}} p_j}{p_i}\\right)^{\\beta},

    ``N`` the number of live transitions, returned as ``"priority_weight"``.
    This is *batch-max* normalization (as in TorchRL's
    :class:`~torchrl.data.PrioritizedSampler` and most implementations): the
    paper's normalization by the largest weight in the whole buffer would need
    the global minimum mass, hence a second (min) tree to maintain on every
    write. Weights are in ``(0, 1]`` either way; batch-max ones are larger.

    Priorities follow the buffer:

    * a write gives its new transitions the largest priority ever set
      (``max_priority`` until a larger one is set), so each is seen at least
      once soon; the rows after them, which hold only an observation (an
      episode's final or pending one), get mass 0. The writer reports the rows
      it wrote through ``mark_update``; rows evicted by the write are among
      them or their next rows, so eviction needs nothing else.
    * :meth:`update_priority` (``rb.update_priority(sample["index"], td_error)``)
      sets the priorities of sampled transitions; rows that stopped being
      transitions since they were sampled are skipped, not resurrected. A row
      overwritten by a *new* transition since it was sampled gets the priority
      meant for the old one (there is no generation check, as in TorchRL).
      ``rb.update_tensordict_priority(td)`` acts in a plain TorchRL
      ``TensorDictReplayBuffer`` too (the class is registered as a virtual
      subclass of TorchRL's ``PrioritizedSampler``, whose instances only that
      method serves; ``reduction = "max"`` reduces per-step priorities). Not
      so under a refining sampler (``NStepSampler(3, base=...)``, hindsight,
      frame stacks), which that check does not know: a plain
      ``TensorDictReplayBuffer`` then ignores the call, silently. Call
      ``rb.update_priority(td["index"], td["td_error"])`` there, or build the
      buffer as a :class:`~torchrl_ext.TransitionReplayBuffer`
      (:func:`~torchrl_ext.make_replay_buffer`), whose
      ``update_tensordict_priority`` serves every chain.

    The tree (float64, 2 entries per row rounded up to a power of two: 16 MiB
    for 1M rows) is allocated on first use, in shared memory: DataLoader
    workers (:mod:`torchrl_ext.loader`) see the priorities the main process sets.

    Randomness comes from the buffer's generator (``TensorDictReplayBuffer(generator=...)``,
    checkpointed with ``rb.dumps``), else from ``generator``, else torch's global RNG.

    Args:
        alpha (float): priority exponent, ``>= 0`` (0: uniform). Read-only: the
            tree stores ``p ** alpha``, not the raw priorities. Defaults to 0.6.
        beta (float): importance-weight exponent, ``>= 0`` (1: full
            correction). Settable: anneal it with ``sampler.beta = ...``.
            Defaults to 0.4.

    Keyword Args:
        eps (float): added to every priority so that no transition starves,
            ``>= 0``. Defaults to 1e-6.
        max_priority (float): priority of new transitions until a larger one is
            set, ``> 0``. Defaults to 1.0.
        generator (torch.Generator, optional): RNG used when the buffer sets none.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import TensorDictReplayBuffer
        >>> from torchrl_ext import TransitionStorage, TransitionWriter, PrioritizedTransitionSampler
        >>> rb = TensorDictReplayBuffer(storage=TransitionStorage(64), writer=TransitionWriter(),
        ...     sampler=PrioritizedTransitionSampler(alpha=1.0, beta=1.0), batch_size=5,
        ...     generator=torch.Generator().manual_seed(0))
        >>> obs = torch.arange(5.).view(1, 5, 1)  # one env, 5 steps, the last ends the episode
        >>> _ = rb.extend(TensorDict({"observation": obs, "action": torch.zeros(1, 5, 1),
        ...     "next": {"observation": obs + 1, "reward": torch.zeros(1, 5, 1),
        ...              "done": obs == 4}}, batch_size=[1, 5]))
        >>> sample = rb.sample()  # new transitions share the max priority: one per segment
        >>> sorted(sample["observation"].view(-1).tolist()), sample["priority_weight"]
        ([0.0, 1.0, 2.0, 3.0, 4.0], tensor([1., 1., 1., 1., 1.]))
        >>> td_error = torch.where(sample["observation"].view(-1) == 2, 8.0, 1.0)
        >>> rb.update_priority(sample["index"], td_error)
        >>> sample = rb.sample()
        >>> sorted((o, round(w, 3)) for o, w in zip(sample["observation"].view(-1).tolist(),
        ...                                           sample["priority_weight"].tolist()))
        [(1.0, 1.0), (2.0, 0.125), (2.0, 0.125), (2.0, 0.125), (3.0, 1.0)]
        >>> drawn = torch.cat([rb.sample()["observation"].view(-1) for _ in range(200)])
        >>> round((drawn == 2).float().mean().item(), 1)  # P = 8 / (8 + 4 * 1)
        0.7
    """

    # settings a checkpoint must be loaded with (torchrl_ext._checkpoint)
    checkpoint_settings: ClassVar[tuple[str, ...]] = ("alpha", "eps")

    def __init__(
        self,
        alpha: float = 0.6,
        beta: float = 0.4,
        *,
        eps: float = 1e-6,
        max_priority: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        owner = "PrioritizedTransitionSampler"
        self._alpha = check_number(owner, "alpha", alpha, 0.0)
        self._eps = check_number(owner, "eps", eps, 0.0)
        self.beta = beta
        # the priority of new transitions
        self._initial_max_priority = check_number(owner, "max_priority", max_priority, 0.0, low_open=True)
        with np.errstate(over="ignore"):
            if not np.isfinite(self._mass(np.array(self._initial_max_priority))):
                raise ValueError(
                    f"{owner}: max_priority={max_priority} gives an infinite mass (max_priority + "
                    f"eps) ** alpha with alpha={alpha}; expected a smaller max_priority."
                )
        self.max_priority = self._initial_max_priority
        self.generator = generator
        self._tree: torch.Tensor | None = None  # [2 * size] float64, shared memory
        self._bind()

    # ------------------------------------------------------------ parameters
    @property
    def alpha(self) -> float:
        """Priority exponent (read-only: the tree holds ``(priority + eps) ** alpha``)."""
        return self._alpha

    @property
    def eps(self) -> float:
        """Added to every priority before the exponent (read-only, like ``alpha``)."""
        return self._eps

    @property
    def beta(self) -> float:
        """Importance-weight exponent; set it to anneal (e.g. towards 1)."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = check_number("PrioritizedTransitionSampler", "beta", value, 0.0)

    reduction = "max"  # how TorchRL's buffers reduce a [B, ...] priority entry to [B]

    @property
    def default_priority(self) -> float:
        """Priority given to new transitions: the largest ever set."""
        return self.max_priority

    def _mass(self, priority: np.ndarray) -> np.ndarray:
        return (priority + self._eps) ** self._alpha

    # ------------------------------------------------------------------ tree
    def _bind(self) -> None:
        # numpy views over the shared tensor (re-made after a load or unpickling)
        if self._tree is None:
            self._np: tuple[np.ndarray, np.ndarray] | None = None
        else:
            tree = self._tree.numpy()
            self._np = (tree, tree.view(np.complex128))

    def _views(self, storage: Any, where: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The tree's numpy views, allocating the tree at the storage's first use."""
        if not isinstance(storage, TransitionStorage):
            raise TypeError(
                f"PrioritizedTransitionSampler.{where}: needs the buffer's TransitionStorage as "
                f"storage=, got {type(storage).__name__}; call it through the replay buffer "
                "(rb.update_priority, rb.sample) or pass storage=rb.storage."
            )
        if storage.index is None:
            return None
        size = _tree_size(storage.index.num_rows)
        if self._tree is None:
            self._tree = torch.zeros(2 * size, dtype=torch.float64).share_memory_()
            self._bind()
        elif self._tree.shape[0] != 2 * size:
            raise ValueError(
                f"PrioritizedTransitionSampler.{where}: its priority tree covers "
                f"{self._tree.shape[0] // 2} rows, but the storage has "
                f"{storage.index.num_rows}; use one sampler per buffer."
            )
        return self._np

    @property
    def total(self) -> float:
        """Sum of ``(priority + eps) ** alpha`` over live transitions (0 before any write)."""
        return 0.0 if self._np is None else float(self._np[0][1])

    def priorities(self) -> torch.Tensor:
        """Mass ``(priority + eps) ** alpha`` of every physical row (0: not a transition).

        Returns:
            a float64 copy of the tree's leaves, ``[size]`` (``size`` >= the
            storage's rows); empty before the first write.
        """
        if self._tree is None:
            return torch.zeros(0, dtype=torch.float64)
        return self._tree[self._tree.shape[0] // 2 :].clone()

    # ---------------------------------------------------------------- writes
    def mark_update(self, index: Any, *, storage: Any = None) -> None:
        """Give the transitions just written the max priority, their next rows 0.

        Args:
            index: rows written (``rb.extend``'s result, any shape; ``-1``:
                a skipped step).

        Keyword Args:
            storage (TransitionStorage): the buffer's storage (``rb.mark_update`` passes it).

        Every row written and every row after it gets ``max_priority`` if it
        is now a transition and 0 otherwise. Read from the index after the
        write, this is "next rows to 0, then rows to max" in every case,
        including a write longer than a stream's ring, whose later steps
        overwrite its earlier rows with observation-only rows.
        """
        views = self._views(storage, "mark_update")
        if views is None:
            return
        rows = torch.as_tensor(index).reshape(-1).to(torch.int64).numpy()
        rows = rows[rows >= 0]  # [k]
        if not rows.size:
            return
        touched = np.concatenate([rows, storage.next_rows(rows)])  # [2k]
        top = self._mass(np.array(self.max_priority))
        mass = np.where(storage_index(storage).is_transition(touched), top, 0.0)
        _tree_set(*views, touched, mass)

    def update_priority(
        self, index: Any, priority: Any, *, storage: Any = None
    ) -> None:
        """Set the priorities of sampled transitions.

        Args:
            index: rows as drawn, ``sample["index"]``: a LongTensor ``[B]``,
                ``[B, 2]`` whose column 0 is the row (an n-step sampler's
                ``(rows, steps)``, stacked by TorchRL), that tuple itself, or an int.
                Negative rows are skipped, as are rows that are no longer
                transitions (evicted or overwritten since sampling).
            priority: ``[B]`` or ``[B, 1]`` (e.g. ``td_error.abs()``), or a
                scalar for every row; finite and ``>= 0``. A row given twice
                gets its last priority.

        Keyword Args:
            storage (TransitionStorage): the buffer's storage (``rb.update_priority`` passes it).

        Raises:
            ValueError: if the priority count does not match the rows, a
                priority is negative, NaN or infinite, or a row is out of range.
        """
        rows, values = _rows_and_priorities(index, priority)
        views = self._views(storage, "update_priority")
        if views is None:
            return
        episodes = storage_index(storage)
        num_rows = episodes.num_rows
        if rows.size and rows.max() >= num_rows:
            raise ValueError(
                f"update_priority: row {int(rows.max())} is out of range; the storage has "
                f"{num_rows} rows. Pass sample['index'] of this buffer."
            )
        keep = rows >= 0
        keep[keep] = episodes.is_transition(rows[keep])
        rows, values = rows[keep], values[keep]
        if not rows.size:
            return
        # every row at the largest mass must still sum to a finite total (else draws go astray)
        largest = float(values.max())
        with np.errstate(over="ignore"):
            mass_of_largest = float(self._mass(np.array(largest)))
        if not mass_of_largest * num_rows < np.finfo(np.float64).max:
            raise ValueError(
                f"update_priority: priority {largest} gives the mass (priority + eps) ** alpha = "
                f"{mass_of_largest} (alpha={self._alpha}, eps={self._eps}), too large for the "
                f"sum over {num_rows} rows to stay finite; scale the priorities down "
                "(e.g. td_error.abs().clamp(max=1e6))."
            )
        self.max_priority = max(self.max_priority, largest)
        # last write wins: the last occurrence of each row, rows sorted
        rows, last = np.unique(rows[::-1], return_index=True)
        values = values[::-1][last]
        _tree_set(*views, rows, self._mass(values))

    # -------------------------------------------------------------- sampling
    def _generator(self) -> torch.Generator | None:
        return self._rng if self._rng is not None else self.generator

    def sample(self, storage: TransitionStorage, batch_size: int) -> tuple[torch.Tensor, dict]:
        """Draw ``batch_size`` live transitions in proportion to their priority.

        Returns:
            ``(rows, {"priority_weight": w})``: LongTensor ``[B]`` of physical
            rows and float32 ``[B]`` importance weights, normalized by the
            batch's largest (see the class docstring).

        Raises:
            ValueError: the buffer holds no transition, ``batch_size < 1``, or
                every live transition has priority 0 (possible only with
                ``eps=0``). Draws are with replacement: ``batch_size`` may exceed
                the number of live transitions.
        """
        views = self._views(storage, "sample")
        if views is None:
            raise EmptyBufferError(EMPTY_BUFFER)
        index = storage_index(storage)
        # as in draw_transitions: the exact count only near the (rows - S) / 2 bound
        rows_live = int(index.live_rows().sum())
        if batch_size < 1 or (rows_live - index.num_streams) // 2 < 1:
            check_batch_size(batch_size, len(storage))
        tree, pairs = views
        generator = self._generator()
        r = torch.rand(batch_size, generator=generator, dtype=torch.float64).numpy()
        # segments in random order: where a draw lies in the batch says nothing of
        # its row (HindsightSampler relabels the last positions; a frame stack
        # redraws a position from a new batch)
        segments = torch.randperm(batch_size, generator=generator).numpy()
        rows, mass, total = _tree_sample(tree, pairs, r, segments)
        if total <= 0.0:
            raise ValueError(
                f"cannot sample: all {len(storage)} live transitions have priority 0 "
                f"(eps={self._eps}); use eps > 0 or set a positive priority."
            )
        for _ in range(_MAX_ROUNDS):
            # A row whose index entry changed after its mass was read (a writer in
            # another process, between its commit and mark_update): redraw it.
            stale = np.flatnonzero(~index.is_transition(rows))
            if not stale.size:
                break
            r = torch.rand(stale.size, generator=generator, dtype=torch.float64).numpy()
            u = r * tree[1]
            node = _tree_descend(tree, pairs, np.ones(stale.size, np.int64), u, guarded=True)
            rows[stale], mass[stale] = node - tree.shape[0] // 2, tree[node]
        else:
            raise RuntimeError(
                "PrioritizedTransitionSampler.sample: drawn rows keep failing the episode "
                "index; the priorities do not match this storage (restore both from "
                "the same checkpoint)."
            )
        weight = (mass.min() / mass) ** self._beta  # [B] = (N P(i))^-beta / batch max
        return torch.from_numpy(rows), {"priority_weight": torch.from_numpy(weight.astype(np.float32))}

    # ---------------------------------------------------- state and persistence
    def _empty(self) -> None:
        if self._tree is not None:
            self._tree.zero_()
        self.max_priority = self._initial_max_priority

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "alpha": self._alpha,
            "eps": self._eps,
            "beta": self._beta,
            "max_priority": self.max_priority,
            "tree": None if self._tree is None else self._tree.clone(),
        }
        state.update(generator_state(self.generator))
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name in ("alpha", "eps"):
            if state_dict[name] != getattr(self, name):
                raise ValueError(
                    f"PrioritizedTransitionSampler: the checkpoint has {name}="
                    f"{state_dict[name]}, this sampler {getattr(self, name)}; the stored "
                    f"priorities depend on it: build the sampler with {name}={state_dict[name]}."
                )
        self.beta = state_dict["beta"]
        self.max_priority = float(state_dict["max_priority"])
        tree = state_dict["tree"]
        if tree is None:
            if self._tree is not None:
                self._tree.zero_()
        elif self._tree is not None and self._tree.shape == tree.shape:
            self._tree.copy_(tree)  # in place: workers keep sharing it
        else:
            self._tree = tree.to(torch.float64).clone().share_memory_()
            self._bind()
        self.generator = restore_generator(self.generator, state_dict)

    def dumps(self, path: str | Path) -> None:
        """Write the tree, the max priority, the parameters and the generator state."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = self.state_dict()
        torch.save(state, path / "state.pt")
        meta = {k: state[k] for k in ("alpha", "eps", "beta", "max_priority")}
        (path / "metadata.json").write_text(json.dumps(meta))

    def loads(self, path: str | Path) -> None:
        """Restore what :meth:`dumps` wrote, in place."""
        self.load_state_dict(torch.load(Path(path) / "state.pt", weights_only=True))

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()  # drops the buffer's generator
        state.pop("_np")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(alpha={self._alpha}, beta={self._beta}, eps={self._eps}, "
            f"max_priority={self.max_priority})"
        )


def _rows_and_priorities(index: Any, priority: Any) -> tuple[np.ndarray, np.ndarray]:
    """``update_priority``'s inputs as ``(rows [B] int64, priorities [B] float64)``.

    A ``[B, 2]`` index is ``(row, steps)`` pairs when there is one priority per
    pair (or a scalar); any other index shape is a grid of rows, one priority each
    (``rb.extend``'s result when the data carries a priority entry).
    """
    if isinstance(index, tuple):
        index = index[0]  # (rows, steps) of an n-step sampler
    idx = torch.as_tensor(index)
    if idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise TypeError(
            f"update_priority: index has dtype {idx.dtype}, expected integer rows "
            "(pass sample['index'])."
        )
    p = as_priorities(priority).detach().to("cpu", torch.float64)
    if idx.ndim == 2 and idx.shape[1] == 2 and p.numel() in (1, idx.shape[0]):
        rows = idx[:, 0]
    else:
        rows = idx.reshape(-1)
    rows_np = rows.to("cpu", torch.int64).numpy()
    p_np = p.reshape(-1).numpy()
    if p_np.size == 1:
        p_np = np.broadcast_to(p_np, rows_np.shape)
    elif p_np.size != rows_np.size:
        raise ValueError(
            f"update_priority: {p_np.size} priorities (shape {tuple(p.shape)}) for "
            f"{rows_np.size} rows (index shape {tuple(idx.shape)}); expected one priority "
            "per sampled transition, [B] or [B, 1]."
        )
    bad = ~(np.isfinite(p_np) & (p_np >= 0))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"update_priority: {int(bad.sum())} priorities are negative, NaN or infinite "
            f"(first: {p_np[first]} at position {first}); expected finite values >= 0, "
            "e.g. td_error.abs()."
        )
    return rows_np, p_np


# TorchRL's TensorDictReplayBuffer.update_tensordict_priority serves only
# instances of its PrioritizedSampler (an ABC): register this one, which has
# the attributes that method reads (default_priority, reduction, update_priority).
PrioritizedSampler.register(PrioritizedTransitionSampler)
