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


NAMED = """## W6 model-based epochs (1,000 transitions)

| buffer | epoch, 1 model (ms) | vs floor |
|---|---|---|
| ours | 159 | 1.36x |
| mbrl | 435 | 3.73x |

Insert one step

| buffer | µs / step |
|---|---|
| ours | 11.3 |

## W5 frame stacks: u8[1, 84, 84]

| buffer | samples/s B=32 | samples/s B=256 |
|---|---|---|
| ours | 29,875 | 57,713 |
| cpprb | 46,805 | not installed |

Each buffer in its own process.
"""


def test_unnumbered_sections_chart_their_first_table(docs_page, tmp_path):
    w6, w5 = docs_page.parse_tables(NAMED)
    assert (w6.number, w6.title) == (None, "W6 model-based epochs (1,000 transitions)")
    assert [row[0] for row in w6.rows] == ["ours", "mbrl"]  # the insert table is not parsed
    assert docs_page.chart_of(w5) == (
        "samples/s B=256", "samples/s at batch 256", "w5_frames.png", True)
    lines = docs_page.page(NAMED, tmp_path).splitlines()
    # each chart right after its section's first table, none after the second
    w6_chart = lines.index("![W6 model-based epochs (1,000 transitions)](w6_epochs.png)")
    assert lines[w6_chart - 2] == "| mbrl | 435 | 3.73x |"
    assert lines[w6_chart + 2] == "Insert one step"
    w5_chart = lines.index("![W5 frame stacks: u8[1, 84, 84]](w5_frames.png)")
    assert lines[w5_chart - 2] == "| cpprb | 46,805 | not installed |"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w5_frames.png", "w6_epochs.png"]


def test_tables_run_elsewhere_are_appended(docs_page, tmp_path):
    # gpu.py's tables come from a GPU machine, kept in their own results file
    results, gpu = tmp_path / "latest.md", tmp_path / "gpu.md"
    results.write_text(RESULTS)
    gpu.write_text("## Device-resident sampling (NVIDIA H200)\n\n| impl | us |\n|---|---|\n| ours | 268 |\n")
    docs_page.main(["--results", str(results), "--extra", str(gpu), str(tmp_path / "absent.md"),
                    "--out-dir", str(tmp_path / "page")])
    lines = (tmp_path / "page" / "index.md").read_text().splitlines()
    assert "### 1. Sample rate (batch 256 from a full buffer)" in lines
    assert lines.index("### Device-resident sampling (NVIDIA H200)") > lines.index("| ours | 10,000 | 157.1 |")
    assert "| ours | 268 |" in lines
