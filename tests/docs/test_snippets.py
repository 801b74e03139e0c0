"""Every ```python block of README.md and docs/**/*.md runs as pasted.

Each block is a complete program: it runs alone, in a fresh namespace, in an
empty working directory. A block fenced as ```text, ```bash or ```py (the code of
other libraries on the migration pages, which are not installed) is not run.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PAGES = [p for p in PAGES if "_build" not in p.parts]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def snippets() -> list:
    out = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 2  # first line of code
            name = f"{page.relative_to(ROOT)}:{line}"
            out.append(pytest.param(match.group(1), name, id=name))
    return out


SNIPPETS = snippets()


def test_pages_have_snippets():
    """The extraction finds the README's and the docs' code (not vacuous)."""
    names = [p.values[1] for p in SNIPPETS]
    assert any(n.startswith("README.md:") for n in names)
    assert any(n.startswith("docs/quickstart.md:") for n in names)


@pytest.mark.parametrize(("code", "name"), SNIPPETS)
def test_snippet_runs(code: str, name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        # torchrl 0.14 warns about its own weight updaters when torchrl.collectors
        # is imported (not our code, not the reader's)
        warnings.filterwarnings(
            "ignore", message=r"Creating \w+ which inherits from WeightUpdaterBase",
            category=DeprecationWarning,
        )
        exec(compile(code, name, "exec"), {"__name__": "__main__"})
