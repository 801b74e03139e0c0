"""Write the docs' benchmark page from benchmarks/results/latest.md (and gpu_h200.md).

    .venv/bin/python benchmarks/docs_page.py        # after benchmarks/run.py (make bench does both)

Reads the markdown tables that ``run.py`` (and ``nstep.py``, ``her.py``,
``sequence.py``, ``model_based.py``, ``frames.py``...) wrote, and writes
``docs/benchmarks/index.md``: every table, under its workload's description,
each headline table followed by a bar chart of the time, rate or memory per
implementation (matplotlib PNGs in ``docs/benchmarks/``).
"""
from __future__ import annotations

import argparse
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "latest.md"
#: tables measured on another machine than ``make bench``'s, appended after RESULTS when present
EXTRA_RESULTS = [HERE / "results" / "gpu_h200.md"]  # gpu.py on a lent GPU machine
PAGE_DIR = HERE.parent / "docs" / "benchmarks"

#: table number -> (column plotted, axis label, file name); smaller is better in each
CHARTS = {
    1: ("us/batch (median)", "µs per batch of 256 (median)", "w1_sample.png"),
    2: ("value", "µs per transition written", "w1_write.png"),
    3: ("bytes/transition", "bytes held per transition", "w1_memory.png"),
    6: ("us/batch (median)", "µs per batch of 256 n-step transitions (median)", "w2_nstep.png"),
    9: ("us/batch (median)", "µs per HER batch of 1024 (median)", "w3_her.png"),
    12: ("us per extend+sample (median)", "µs per one-step write + 64 x 50 sequences (median)",
         "w4_sequences.png"),
}
#: unnumbered sections (``## W5 frame stacks: ...``), by the start of their title ->
#: (column plotted, axis label, file name, larger is better); their first table is charted
NAMED_CHARTS = {
    "W5 frame stacks": ("samples/s B=256", "samples/s at batch 256", "w5_frames.png", True),
    "W1 samples through the facades": ("samples/s", "samples/s at batch 256", "w1_facades.png", True),
    "W6 model-based epochs": ("epoch, 1 model (ms)", "ms per epoch of batches of 256, one model",
                              "w6_epochs.png", False),
}


@dataclass
class Table:
    number: int | None  # None: an unnumbered section (``## W5 frame stacks: ...``)
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    done: bool = False  # its first table ended (later tables of the section are not parsed)


def parse_tables(text: str) -> list[Table]:
    """The first markdown table of each ``## N. title`` or ``## title`` section."""
    tables: list[Table] = []
    current: Table | None = None
    for line in text.splitlines():
        heading = re.match(r"^## (?:(\d+)\. )?(.*)$", line)
        if heading:
            number = heading.group(1)
            current = Table(None if number is None else int(number), heading.group(2), [])
            tables.append(current)
        elif current is not None and not current.done and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not current.header:
                current.header = cells
            elif not set("".join(cells)) <= set("-: "):
                current.rows.append(cells)
        elif current is not None and current.header:
            current.done = True
    return tables


def chart_of(table: Table) -> tuple[str, str, str, bool] | None:
    """``(column, label, file name, larger is better)`` of the chart after ``table``, if any."""
    if table.number is not None:
        spec = CHARTS.get(table.number)
        return None if spec is None else (*spec, False)
    return next((spec for start, spec in NAMED_CHARTS.items() if table.title.startswith(start)), None)


def number(cell: str) -> float | None:
    """``"1,336,511"`` -> 1336511.0; ``"MB"`` suffixes and words -> None where no number leads."""
    match = re.match(r"^-?[\d,]*\.?\d+", cell.replace(" ", ""))
    return float(match.group(0).replace(",", "")) if match else None


def chart(table: Table, column: str, label: str, path: Path, larger_is_better: bool = False) -> bool:
    """A horizontal bar per implementation; ours in the first colour. False if no data."""
    col = table.header.index(column)
    bars = [(row[0], number(row[col])) for row in table.rows]
    bars = [(name, value) for name, value in bars if value is not None]
    if not bars:
        return False
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(bars) + 1.2), layout="constrained")
    names = [name for name, _ in bars][::-1]
    values = [value for _, value in bars][::-1]
    colors = ["#1f77b4" if n.startswith("ours") else "#bbbbbb" if n.startswith(("floor", "raw"))
              else "#ff7f0e" for n in names]
    ax.barh(names, values, color=colors)
    ax.set_xlabel(label + (" (larger is better)" if larger_is_better else " (smaller is better)"))
    title = table.title if table.number is None else f"{table.number}. {table.title}"
    ax.set_title(textwrap.fill(title, 80), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.tick_params(axis="y", labelsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def page(text: str, out_dir: Path) -> str:
    """The markdown page: the results file, one heading level down, with a chart
    after each headline table."""
    out = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`benchmarks/run.py`, then `benchmarks/docs_page.py`) from",
        "`benchmarks/results/latest.md`; the method is in `benchmarks/README.md`. Every",
        "implementation is timed in the same run as its peers, interleaved, with",
        "`torch.set_num_threads(1)` and one thread per native pool (OpenMP, BLAS).",
        "In the charts, blue bars are torchrl_ext, orange bars the peers, grey bars floors",
        "(bare tensor operations that bound what any buffer can do).",
        "",
    ]
    parsed = iter(parse_tables(text))
    section: Table | None = None
    in_table = charted = False
    for line in text.splitlines():
        if line.startswith("## "):
            section, charted = next(parsed), False
        if line.startswith("#"):
            line = "#" + line  # the page's own title is the only level-1 heading
        if in_table and not line.startswith("|") and section is not None and not charted:
            charted = True  # after the section's first table only
            spec = chart_of(section)
            if spec is not None and spec[0] in section.header:
                column, label, name, larger = spec
                if chart(section, column, label, out_dir / name, larger):
                    out += ["", f"![{section.title}]({name})"]
        in_table = line.startswith("|")
        out.append(line)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write docs/benchmarks/ from the results.")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--extra", type=Path, nargs="*", default=EXTRA_RESULTS,
                        help="results files appended after --results, where they exist")
    parser.add_argument("--out-dir", type=Path, default=PAGE_DIR)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    text = "\n".join(p.read_text() for p in [args.results, *args.extra] if p.exists())
    (args.out_dir / "index.md").write_text(page(text, args.out_dir))
    print(f"wrote {args.out_dir / 'index.md'}")


if __name__ == "__main__":
    main()
