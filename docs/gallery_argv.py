"""Command-line arguments sphinx-gallery gives each example: its quick mode."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


def quick(gallery_conf: dict[str, Any], script_vars: dict[str, Any]) -> list[str]:
    """``--quick``, a run of a few seconds that still draws the example's plot.

    The image file the example saves goes to a temporary folder; the gallery
    takes the open figure itself.
    """
    name = Path(script_vars["src_file"]).stem
    plot = Path(tempfile.gettempdir()) / "torchrl_ext-gallery" / f"{name}.png"
    return ["--quick", "--plot", str(plot)]
