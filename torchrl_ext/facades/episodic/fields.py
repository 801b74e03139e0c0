"""What an episodic dataset stores: field types, verification levels, statistics."""
from __future__ import annotations

import copy
import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl_ext.core.schema import EntryKeyError

__all__ = [
    "ColorImage",
    "EpisodeDatasetInfo",
    "Fields",
    "PaddedPointcloud",
    "Scalar",
    "TensorType",
    "Vector",
    "VerificationMode",
    "as_episode",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TensorType:
    """Shape (one step), dtype and device of a field.

    The device is where sampled batches of this field are returned.

    Examples:
        >>> TensorType("cpu", "float32", (3,)).dtype
        torch.float32
    """

    device: torch.device | str
    dtype: torch.dtype | str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        dtype = getattr(torch, self.dtype) if isinstance(self.dtype, str) else self.dtype
        object.__setattr__(self, "device", torch.device(self.device))
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))

    def to(self, device: torch.device | str) -> TensorType:
        """This field type, with its batches returned on ``device``.

        Examples:
            >>> ColorImage("cpu", 8, 8).to("meta")
            ColorImage(device=device(type='meta'), dtype=torch.uint8, shape=(8, 8, 3))
        """
        out = copy.copy(self)
        object.__setattr__(out, "device", torch.device(device))
        return out


class Scalar(TensorType):
    """A 0-d field (reward, done flag).

    Examples:
        >>> Scalar("cpu", "float32", ()).shape
        ()
    """


class Vector(TensorType):
    """A 1-d field (state, action).

    Examples:
        >>> Vector("cpu", "float32", (17,)).shape
        (17,)
    """


class ColorImage(TensorType):
    """A uint8 ``(height, width, 3)`` image, channel-last.

    Built as the original builds it, ``ColorImage(device, height, width)``
    (or from ``dtype=`` and ``shape=``, as ``dataclasses.replace`` does).

    Examples:
        >>> image = ColorImage("cpu", height=64, width=48)
        >>> image.shape, image.dtype
        ((64, 48, 3), torch.uint8)
    """

    def __init__(
        self, device: torch.device | str, height: int | None = None, width: int | None = None, *,
        dtype: torch.dtype | str = torch.uint8, shape: tuple[int, ...] | None = None,
    ) -> None:
        if shape is None:
            if height is None or width is None:
                raise TypeError(f"ColorImage: height={height}, width={width}; expected both (or shape=).")
            shape = (height, width, 3)
        super().__init__(device, dtype, shape)

    @property
    def height(self) -> int:
        return self.shape[0]

    @property
    def width(self) -> int:
        return self.shape[1]


class PaddedPointcloud(TensorType):
    """A float32 ``(num_points, 4)`` cloud: x, y, z and a validity mask.

    Built as the original builds it, ``PaddedPointcloud(device, num_points)``
    (or from ``dtype=`` and ``shape=``, as ``dataclasses.replace`` does).

    Examples:
        >>> PaddedPointcloud("cpu", num_points=128).shape
        (128, 4)
    """

    def __init__(
        self, device: torch.device | str, num_points: int | None = None, *,
        dtype: torch.dtype | str = torch.float32, shape: tuple[int, ...] | None = None,
    ) -> None:
        if shape is None:
            if num_points is None:
                raise TypeError("PaddedPointcloud: num_points=None; expected a count (or shape=).")
            shape = (num_points, 4)
        super().__init__(device, dtype, shape)

    @property
    def num_points(self) -> int:
        return self.shape[0]


class Fields(dict):
    """Field name to :class:`TensorType`, inferred from a first episode.

    Examples:
        >>> import torch
        >>> fields = Fields.from_episode({"obs": [torch.zeros(3)], "reward": [torch.tensor(1.0)],
        ...                                "image": [torch.zeros(8, 8, 3, dtype=torch.uint8)]})
        >>> {k: type(v).__name__ for k, v in fields.items()}
        {'obs': 'Vector', 'reward': 'Scalar', 'image': 'ColorImage'}
    """

    @classmethod
    def from_episode(cls, episode: Mapping[str, Any]) -> Fields:
        """Types from the first step of each field of ``episode``.

        Raises:
            ValueError: a field is empty or not a tensor.
        """
        out = cls()
        for key, steps in episode.items():
            first = steps[0] if isinstance(steps, (list, tuple)) and steps else steps
            if isinstance(steps, (list, tuple)) and not steps:
                raise ValueError(f"Fields.from_episode: field {key!r} has no steps.")
            if not isinstance(first, torch.Tensor):
                raise ValueError(
                    f"Fields.from_episode: field {key!r} holds {type(first).__name__}, "
                    "expected tensors."
                )
            if not isinstance(steps, (list, tuple)):
                first = first[0]  # a stacked [L, ...] tensor
            out[key] = _type_of(first)
        return out

    def spec(self) -> TensorDict:
        """One empty step with these fields (shapes and dtypes)."""
        return TensorDict({k: torch.zeros(t.shape, dtype=t.dtype) for k, t in self.items()}, [])


def _type_of(x: torch.Tensor) -> TensorType:
    args = (x.device, x.dtype, tuple(x.shape))
    if x.ndim == 0:
        return Scalar(*args)
    if x.ndim == 1:
        return Vector(*args)
    if x.ndim == 3 and x.dtype == torch.uint8 and x.shape[-1] == 3:
        return ColorImage(x.device, x.shape[0], x.shape[1])
    if x.ndim == 2 and x.dtype == torch.float32 and x.shape[-1] == 4:
        return PaddedPointcloud(x.device, x.shape[0])
    return TensorType(*args)


class VerificationMode(enum.IntEnum):
    """How much each added episode is checked.

    * ``NO_CHECKS``: only the field names (a missing or unknown field cannot be
      stored); the shapes still have to fit the storage.
    * ``BASIC_CHECKS``: every field present, no unknown field, one length for
      all fields, each step's shape and dtype as in :attr:`EpisodeDataset.fields`.
    * ``EXTENDED_CHECKS``: also, floating-point fields are finite.
    * ``DEBUGGING_CHECKS``: also, each added episode is logged (``logging.DEBUG``).

    Examples:
        >>> VerificationMode.EXTENDED_CHECKS > VerificationMode.BASIC_CHECKS
        True
    """

    NO_CHECKS = 0
    BASIC_CHECKS = 1
    EXTENDED_CHECKS = 2
    DEBUGGING_CHECKS = 3


@dataclass
class EpisodeDatasetInfo:
    """The fields and the running statistics of a dataset.

    Attributes:
        fields: the stored fields, ``None`` until the first episode.
        verification_mode: checks run on each added episode.
        num_episodes: stored episodes.
        num_timesteps: stored steps (the sum of :attr:`episode_lengths`).
        episode_lengths: lengths of the stored episodes, oldest first.
        is_full: an episode was evicted at least once.

    Examples:
        >>> EpisodeDatasetInfo().num_episodes
        0
    """

    fields: Fields | None = None
    verification_mode: VerificationMode = VerificationMode.BASIC_CHECKS
    num_episodes: int = 0
    num_timesteps: int = 0
    episode_lengths: list[int] = field(default_factory=list)
    is_full: bool = False


def as_episode(episode: Any) -> TensorDictBase:
    """An episode as a ``[L]`` TensorDict.

    Accepts a dict of per-step tensor lists (the seed's format), a dict of
    stacked ``[L, ...]`` tensors, or a TensorDict with batch size ``[L]``.

    Raises:
        TypeError: not a mapping of tensors or tensor lists, or a list whose
            steps have different dtypes.
        ValueError: fields of different lengths, no step, or a list whose
            steps have different shapes.

    Examples:
        >>> import torch
        >>> as_episode({"obs": [torch.zeros(2), torch.ones(2)]}).batch_size
        torch.Size([2])
    """
    if isinstance(episode, TensorDictBase):
        if episode.ndim != 1:
            raise ValueError(
                f"add_episode: a TensorDict episode needs batch size [length], got "
                f"{list(episode.batch_size)}."
            )
        out = episode
    elif isinstance(episode, Mapping):
        values = {}
        for key, steps in episode.items():
            if isinstance(steps, (list, tuple)):
                if not steps or not all(isinstance(x, torch.Tensor) for x in steps):
                    raise TypeError(
                        f"add_episode: field {key!r} must be a non-empty list of tensors "
                        f"(one per step) or a stacked tensor, got {_describe(steps)}."
                    )
                _check_steps(key, steps)
                steps = torch.stack(list(steps))
            elif not isinstance(steps, torch.Tensor) or steps.ndim == 0:
                raise TypeError(
                    f"add_episode: field {key!r} must be a list of tensors (one per step) "
                    f"or a stacked [length, ...] tensor, got {_describe(steps)}."
                )
            values[key] = steps
        lengths = {key: int(v.shape[0]) for key, v in values.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"add_episode: fields have different numbers of steps: {lengths}.")
        if not lengths:
            raise ValueError("add_episode: the episode has no field.")
        out = TensorDict(values, [next(iter(lengths.values()))])
    else:
        raise TypeError(
            f"add_episode: expected a dict of per-step tensor lists, a dict of stacked "
            f"tensors or a TensorDict, got {type(episode).__name__}."
        )
    if out.shape[0] == 0:
        raise ValueError("add_episode: the episode has no step.")
    return out


def _check_steps(key: str, steps: Any) -> None:
    """Every step of a per-step list has step 0's shape and dtype (``torch.stack`` would promote)."""
    shape, dtype = steps[0].shape, steps[0].dtype
    t = next((t for t, x in enumerate(steps) if x.shape != shape or x.dtype != dtype), None)
    if t is None:
        return
    x = steps[t]
    if x.shape != shape:
        raise ValueError(
            f"add_episode: field {key!r} has shape {tuple(x.shape)} at step {t}, expected "
            f"{tuple(shape)} as at step 0; a field keeps its shape within an episode."
        )
    raise TypeError(
        f"add_episode: field {key!r} has dtype {x.dtype} at step {t}, expected {dtype} as at "
        f"step 0; cast the steps to one dtype."
    )


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        kinds = sorted({type(x).__name__ for x in value})
        return f"a {type(value).__name__} of {len(value)} ({', '.join(kinds) or 'empty'})"
    return type(value).__name__


def verify(episode: TensorDictBase, fields: Fields, mode: VerificationMode) -> None:
    """Check ``episode`` against ``fields`` at level ``mode`` (see :class:`VerificationMode`).

    Raises:
        KeyError: a field is missing or unknown.
        ValueError: a step has another shape, or (extended) a value is not finite.
        TypeError: a field has another dtype.
    """
    # the fields at every level, NO_CHECKS too: a missing or unknown one cannot be
    # stored (one set comparison an episode)
    keys = set(episode.keys())
    if keys != fields.keys():
        missing, extra = sorted(fields.keys() - keys), sorted(keys - fields.keys())
        raise EntryKeyError(
            f"add_episode: the episode's fields differ from the dataset's {sorted(fields)}: "
            f"missing {missing}, unexpected {extra}."
        )
    if mode < VerificationMode.BASIC_CHECKS:
        return
    for key, kind in fields.items():
        value = episode.get(key)
        if tuple(value.shape[1:]) != kind.shape:
            raise ValueError(
                f"add_episode: field {key!r} has steps of shape {tuple(value.shape[1:])}, "
                f"expected {kind.shape}."
            )
        if value.dtype != kind.dtype:
            raise TypeError(
                f"add_episode: field {key!r} has dtype {value.dtype}, expected {kind.dtype}."
            )
        if mode >= VerificationMode.EXTENDED_CHECKS and value.is_floating_point():
            if not bool(torch.isfinite(value).all()):
                raise ValueError(f"add_episode: field {key!r} holds NaN or infinite values.")
    if mode >= VerificationMode.DEBUGGING_CHECKS:
        logger.debug("add_episode: %d steps, fields %s", episode.shape[0], sorted(fields))
