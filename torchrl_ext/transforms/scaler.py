"""Per-feature standardisation of dynamics-model inputs and targets."""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["STATISTICS", "StandardScaler"]

#: a feature whose standard deviation is below this is left unscaled (std := 1)
MIN_STD = 1e-8
_UNFITTED = "StandardScaler.{where}: not fitted yet; call fit(inputs, targets) first."
#: the statistics a scaler holds (pytorchrl's names), as :meth:`StandardScaler.state_dict` gives them
STATISTICS = ("input_mu", "input_std", "target_mu", "target_std")


class StandardScaler:
    """Standardise model inputs and targets with statistics of the training rows.

    The semantics of pytorchrl's ``StandardScaler``, which its world models use
    to predict: ``fit`` computes per-feature means and unbiased standard
    deviations over the leading dims, ``transform`` maps ``x -> (x - mu) / std``
    and ``inverse_transform`` maps normalised targets back. Two differences:
    a standard deviation below ``1e-8`` *or not finite* becomes ``1``, so a
    single sample gives ``std = 1`` instead of NaN (pytorchrl's M9); and the
    scaler is only refitted when ``fit`` is called (nothing here refits it
    behind the caller's back).

    Attributes:
        input_mu, input_std: ``[1, in_dim]`` (``None`` before :meth:`fit`).
        target_mu, target_std: ``[1, out_dim]`` (``None`` before :meth:`fit`).

    Keyword Args:
        device (torch.device or str, optional): where the statistics live;
            defaults to the device of the data given to :meth:`fit`.

    Examples:
        >>> import torch
        >>> scaler = StandardScaler()
        >>> inputs, targets = torch.tensor([[0.0, 5.0], [2.0, 5.0]]), torch.tensor([[1.0], [3.0]])
        >>> scaler.fit(inputs, targets)
        >>> scaler.input_mu.tolist(), scaler.input_std.tolist()  # constant feature: std 1
        ([[1.0, 5.0]], [[1.4142135381698608, 1.0]])
        >>> norm_in, norm_t = scaler.transform(inputs, targets)
        >>> norm_in[:, 1].tolist(), scaler.inverse_transform(norm_t).view(-1).tolist()
        ([0.0, 0.0], [1.0, 3.0])
    """

    def __init__(self, *, device: torch.device | str | None = None) -> None:
        self.device = None if device is None else torch.device(device)
        self.input_mu: torch.Tensor | None = None
        self.input_std: torch.Tensor | None = None
        self.target_mu: torch.Tensor | None = None
        self.target_std: torch.Tensor | None = None

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` has been called."""
        return self.input_mu is not None

    def fit(self, inputs: torch.Tensor, targets: torch.Tensor | None = None) -> None:
        """Compute the statistics from ``inputs`` ``[..., in_dim]`` and ``targets`` ``[..., out_dim]``.

        Without ``targets``, target statistics of an earlier fit are dropped
        (they described other data).

        Raises:
            ValueError: ``inputs`` (or ``targets``) has no rows or no feature dim, or
                a feature holds a NaN or an infinity (its statistics would be NaN).
        """
        input_stats = self._stats("inputs", inputs)
        target_stats = (None, None) if targets is None else self._stats("targets", targets)
        self.input_mu, self.input_std = input_stats
        self.target_mu, self.target_std = target_stats

    def transform(
        self, inputs: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``((inputs - input_mu) / input_std, (targets - target_mu) / target_std)``.

        ``targets`` may be ``None`` (then the second result is ``None``).

        Raises:
            RuntimeError: the scaler was never fitted.
            ValueError: ``inputs`` / ``targets`` have another number of features than in :meth:`fit`.
        """
        if self.input_mu is None or self.input_std is None:
            raise RuntimeError(_UNFITTED.format(where="transform"))
        self._check_width("transform", "inputs", inputs, self.input_mu)
        norm_inputs = (inputs - self.input_mu) / self.input_std
        if targets is None:
            return norm_inputs, None
        if self.target_mu is None or self.target_std is None:
            raise RuntimeError(
                "StandardScaler.transform: got targets, but fit() was called without "
                "targets; call fit(inputs, targets)."
            )
        self._check_width("transform", "targets", targets, self.target_mu)
        return norm_inputs, (targets - self.target_mu) / self.target_std

    def transform_(self, inputs: torch.Tensor, targets: torch.Tensor | None = None) -> None:
        """:meth:`transform` in place (float tensors the caller owns; saves two copies).

        Raises:
            RuntimeError: the scaler was never fitted.
            ValueError: ``inputs`` / ``targets`` have another number of features
                than in :meth:`fit` (checked before either is changed).

        Examples:
            >>> import torch
            >>> scaler = StandardScaler()
            >>> scaler.fit(torch.tensor([[1.0], [3.0]]))
            >>> x = torch.tensor([[3.0]])
            >>> scaler.transform_(x)
            >>> x.tolist()
            [[0.7071067690849304]]
        """
        if self.input_mu is None or self.input_std is None:
            raise RuntimeError(_UNFITTED.format(where="transform_"))
        self._check_width("transform_", "inputs", inputs, self.input_mu)
        target_mu, target_std = self.target_mu, self.target_std
        if targets is not None:
            if target_mu is None or target_std is None:
                raise RuntimeError(
                    "StandardScaler.transform_: got targets, but fit() was called without "
                    "targets; call fit(inputs, targets)."
                )
            self._check_width("transform_", "targets", targets, target_mu)
            targets.sub_(target_mu).div_(target_std)  # checked both first: none changed on refusal
        inputs.sub_(self.input_mu).div_(self.input_std)

    def inverse_transform(self, targets: torch.Tensor) -> torch.Tensor:
        """Normalised targets back to their units: ``targets * target_std + target_mu``."""
        if self.input_mu is None:
            raise RuntimeError(_UNFITTED.format(where="inverse_transform"))
        if self.target_mu is None or self.target_std is None:
            raise RuntimeError(
                "StandardScaler.inverse_transform: fit() was called without targets."
            )
        self._check_width("inverse_transform", "targets", targets, self.target_mu)
        return targets * self.target_std + self.target_mu

    def state_dict(self) -> dict[str, Any]:
        """The four statistics (``None`` where unfitted)."""
        return {k: getattr(self, k) for k in STATISTICS}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            KeyError: an entry is not one of the four statistics.
        """
        unknown = sorted(set(state_dict) - set(STATISTICS))
        if unknown:
            raise KeyError(
                f"StandardScaler.load_state_dict: unknown entries {unknown}; expected {list(STATISTICS)}."
            )
        for key, value in state_dict.items():
            setattr(self, key, value)

    @staticmethod
    def _check_width(where: str, name: str, x: torch.Tensor, mu: torch.Tensor) -> None:
        if x.shape[-1:] != mu.shape[-1:]:
            raise ValueError(
                f"StandardScaler.{where}: {name} have {x.shape[-1] if x.ndim else 0} features "
                f"(shape {tuple(x.shape)}), expected {mu.shape[-1]} as in fit()."
            )

    def _stats(self, name: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"StandardScaler.fit: {name} is {type(x).__name__}, expected a tensor.")
        if x.ndim < 2 or x.shape[0] == 0:
            raise ValueError(
                f"StandardScaler.fit: {name} has shape {tuple(x.shape)}, expected "
                f"(rows >= 1, ..., dim)."
            )
        x = x.reshape(-1, x.shape[-1]).float()
        if self.device is not None:
            x = x.to(self.device)
        mu = x.mean(0, keepdim=True)
        if not bool(torch.isfinite(mu).all()):
            bad = torch.nonzero(~torch.isfinite(mu[0])).view(-1).tolist()
            raise ValueError(
                f"StandardScaler.fit: {name} features {bad[:8]} hold NaN or infinite values; "
                "their statistics would be NaN and every normalised batch with them."
            )
        # one row: the unbiased std is NaN; a constant feature: 0. Both leave it unscaled.
        std = x.std(0, keepdim=True) if x.shape[0] > 1 else torch.ones_like(mu)
        std = torch.where(torch.isfinite(std) & (std >= MIN_STD), std, torch.ones_like(std))
        return mu, std

    def __repr__(self) -> str:
        dims = "unfitted" if self.input_mu is None else (
            f"in_dim={self.input_mu.shape[-1]}, "
            f"out_dim={None if self.target_mu is None else self.target_mu.shape[-1]}"
        )
        return f"{type(self).__name__}({dims})"
