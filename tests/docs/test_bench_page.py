"""benchmarks/docs_page.py: the docs' benchmark page from the results markdown."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "docs_page.py"

RESULTS = """# Replay-buffer benchmark W1 (quick)

- workload: tiny

## 1. Sample rate (batch 256 from a full buffer)

| impl | metric | value | us/batch (median) | us/batch p25-p75 |
|---|---|---|---|---|
| ours: make_replay_buffer | samples/s | 1,336,511 | 191.5 | 181.6-201.4 |
| TorchRL LazyTensorStorage+RandomSampler | samples/s | 585,121 | 437.5 | 417.8-453.6 |
| cpprb ReplayBuffer | samples/s | not installed |  |  |

Median over blocks.

## 4. Sample time vs buffer size

| impl | rows | us/batch (median) |
|---|---|---|
| ours | 10,000 | 157.1 |
"""


@pytest.fixture(scope="module")
def docs_page():
    spec = importlib.util.spec_from_file_location("docs_page", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves annotations through it
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_tables_are_parsed(docs_page):
    first, second = docs_page.parse_tables(RESULTS)
    assert (first.number, second.number) == (1, 4)
    assert first.header[3] == "us/batch (median)"
    assert [row[0] for row in first.rows] == [
        "ours: make_replay_buffer", "TorchRL LazyTensorStorage+RandomSampler", "cpprb ReplayBuffer"]
    assert docs_page.number("1,336,511") == 1336511.0
    assert docs_page.number("121.1 MB") == 121.1
    assert docs_page.number("not installed") is None


def test_page_keeps_every_table_and_charts_the_headline_ones(docs_page, tmp_path):
    page = docs_page.page(RESULTS, tmp_path)
    lines = page.splitlines()
    assert lines[0] == "# Benchmarks"
    assert "## Replay-buffer benchmark W1 (quick)" in lines  # one level down
    assert "### 1. Sample rate (batch 256 from a full buffer)" in lines
    # the chart follows table 1, before its note; table 4 has none
    chart = lines.index("![Sample rate (batch 256 from a full buffer)](w1_sample.png)")
    assert lines[chart - 2].startswith("| cpprb ReplayBuffer")
    assert lines[chart + 2] == "Median over blocks."
    assert (tmp_path / "w1_sample.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w1_sample.png"]
    assert "| ours | 10,000 | 157.1 |" in lines
