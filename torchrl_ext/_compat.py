"""Old public names kept importable, with a DeprecationWarning naming the new one."""
from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable


def moved_names(module: str, moved: dict[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` serving ``moved`` (old name -> ``"new.module.Name"``).

    Each use of an old name warns (``DeprecationWarning``) and returns the object
    under its new name; any other name raises ``AttributeError`` as usual.

    Examples:
        >>> import warnings
        >>> getattr_ = moved_names("pkg", {"OldPath": "pathlib.PurePath"})
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     cls = getattr_("OldPath")
        >>> cls.__name__, str(caught[0].message)
        ('PurePath', 'pkg.OldPath is deprecated; use pathlib.PurePath instead.')
    """

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new_module, _, new_name = moved[name].rpartition(".")
        warnings.warn(
            f"{module}.{name} is deprecated; use {moved[name]} instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(new_module), new_name)

    return __getattr__
