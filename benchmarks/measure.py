"""Timing and memory helpers.

Timing: every callable is timed in short blocks (``inner`` calls per block) and
the blocks of all implementations are interleaved, in an order shuffled anew for
each round (:func:`block_orders`), so drift in CPU frequency / cache state hits
everyone alike and no implementation always runs right after the same one.
Reported: median, p25, p75 of the per-call time over the blocks.
``time.perf_counter``; GC stays enabled.

Memory: ``python benchmarks/measure.py IMPL CAPACITY`` builds and fills ONE
buffer in a fresh process and prints JSON with the RSS growth (read from
/proc/self/statm after ``gc.collect()`` + ``malloc_trim(0)``, so freed
temporaries are not counted; a tiny warm-up instance is built and dropped
first so one-time import/first-call costs are not counted either) and the peak RSS growth during the fill
(VmHWM, reset through /proc/self/clear_refs when the kernel allows it).
"""

from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import ctypes
import gc
import json
import os
import random
import subprocess
import statistics
import sys
import time
from collections.abc import Iterator

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def huge_page_bytes() -> int:
    """Anonymous memory of this process held in transparent huge pages (0 where the kernel does not say).

    Random reads over gigabytes cost several times more on 4 KB pages (a TLB
    miss per read) than on 2 MB ones; the kernel gives huge pages only where
    it finds free 2 MB blocks, so a process filled on a fragmented machine
    can get few.
    """
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def settle() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def quantiles(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"median": statistics.median(xs), "p25": q[0], "p75": q[2], "min": min(xs), "n": len(xs)}


def block_orders(names: list, rounds: int, seed: int = 0) -> Iterator[list]:
    """``rounds`` orders of ``names``, each shuffled anew (seeded): the order of one round of blocks.

    Each name follows every other equally often on average. A fixed or rotated
    order gives each name the same predecessor in every round, and a call that
    runs right after a heavy one finds its caches cold: in W4, one buffer timed
    in two slots of the same rotated order read 303-327 µs per call in the slot
    after TorchRL's 5 ms call and 245-253 µs in the next (the same code, the
    same buffer); shuffled, the two slots read within 3 % of each other.

    Examples:
        >>> orders = list(block_orders(["a", "b", "c"], 2))
        >>> [sorted(o) for o in orders] == [["a", "b", "c"]] * 2
        True
    """
    order = random.Random(seed)
    for _ in range(rounds):
        block = list(names)
        order.shuffle(block)
        yield block


def interleaved(fns: dict, reps: int, inner: int, warmup: int = 5) -> dict[str, dict]:
    """Per-call time stats (seconds) for each zero-arg callable in ``fns``.

    ``reps`` rounds; in each, every callable runs one block of ``inner`` calls,
    in a shuffled order (:func:`block_orders`).
    """
    names = list(fns)
    for n in names:
        for _ in range(warmup):
            fns[n]()
    times: dict[str, list[float]] = {n: [] for n in names}
    clock = time.perf_counter
    for block in block_orders(names, reps):
        for n in block:
            f = fns[n]
            t0 = clock()
            for _ in range(inner):
                f()
            times[n].append((clock() - t0) / inner)
    return {n: quantiles(ts) for n, ts in times.items()}


def run_probe(cmd: list[str], key: str, timeout: int = 900) -> dict:
    """Run a probe in a fresh interpreter; return its ``JSON:`` line, or an error row."""
    env = {**os.environ, "RL_LOGGING_LEVEL": "WARNING"}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"key": key, "error": "timeout"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("JSON:"):
            return json.loads(line[5:])
    return {"key": key, "error": (p.stderr.strip().splitlines() or ["no output"])[-1][:100]}


def measured_fill(build_and_fill) -> dict:
    """Run ``build_and_fill()``: RSS it leaves held, its peak RSS growth, its time."""
    settle()
    rss0 = rss_bytes()
    hwm_ok = reset_hwm()
    t0 = time.perf_counter()
    build_and_fill()
    fill_s = time.perf_counter() - t0
    hwm = hwm_bytes()
    settle()
    return {"held_bytes": rss_bytes() - rss0, "fill_s": fill_s,
            "peak_extra_bytes": (hwm - rss0) if hwm_ok else None}


def logger(tag: str):
    """A progress logger: ``[tag HH:MM:SS] message`` on stderr."""
    def log(msg: str) -> None:
        print(f"[{tag} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
    return log


def status_of(key: str, exc: BaseException, ours: tuple[str, ...] = ("ours",)) -> str:
    """The table text for a buffer that failed; ``ours`` are the prefixes of our keys."""
    if isinstance(exc, ImportError):
        return "unavailable (import failed)" if key.startswith(ours) else "not installed"
    return f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:90] if str(exc) else ''}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def probe_main(probe, key: str, rows: str) -> None:
    """A ``--probe KEY ROWS`` subprocess: print ``probe(KEY, ROWS)`` as one JSON line."""
    try:
        out = probe(key, int(rows))
    except Exception as e:  # noqa: BLE001 -- reported as a row
        out = {"key": key, "error": status_of(key, e)}
    print("JSON:" + json.dumps(out))


def write_tables(out: str, path: str | None, append: bool) -> None:
    """Write the markdown ``out`` to ``path`` (if any), appended or overwriting."""
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a" if append else "w") as f:
        f.write(("\n" if append else "") + out + "\n")
    print(f"[bench {time.strftime('%H:%M:%S')}] wrote {path}", file=sys.stderr, flush=True)


def machine_line() -> str:
    """CPU model and count, for report headers."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), "?")
    return f"{cpu}, {os.cpu_count()} CPUs, torch.set_num_threads(1), one thread per native pool"


def probe(key: str, capacity: int) -> dict:
    """Fill one buffer in this (fresh) process and report its memory cost."""
    import torch

    torch.set_num_threads(1)
    from impls import BY_KEY
    from workload import EpisodeStream

    # warm-up on a tiny instance so one-time costs (lazy imports, first-call
    # caches) are not charged to the buffer
    warm = BY_KEY[key]()
    warm.build(1_600)
    for c in EpisodeStream(seed=9).chunks_for(1_600):
        warm.fill(c)
    warm.sample()
    del warm
    chunks = EpisodeStream(seed=0).chunks_for(capacity)  # source data: in baseline
    impl = BY_KEY[key]()

    def build_and_fill():
        impl.build(capacity)
        for c in chunks:
            impl.fill(c)

    return {"key": key, "capacity": capacity, **measured_fill(build_and_fill)}


def table_args(doc: str, argv: list[str], quick_help: str):
    """``--out FILE [--append] [--quick]``: the arguments of a script that writes one table for ``run.py``."""
    import argparse

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--quick", action="store_true", help=quick_help)
    return ap.parse_args(argv)


if __name__ == "__main__":
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [_here, os.path.dirname(_here)]  # benchmarks/, repo root
    os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")
    try:
        out = probe(sys.argv[1], int(sys.argv[2]))
    except Exception as e:  # reported as a row, not a crash
        out = {"key": sys.argv[1], "error": f"{type(e).__name__}: {e}"}
    print("JSON:" + json.dumps(out))
