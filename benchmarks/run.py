"""Side-by-side replay-buffer benchmark: ours vs TorchRL native, SB3, cpprb, floors.

    .venv/bin/python benchmarks/run.py              # full W1 run (1M rows; scale up to 10M), then W2 n-step
    .venv/bin/python benchmarks/run.py --quick      # smoke run (100k rows, few reps, no 10M; n-step at 20k)
    .venv/bin/python benchmarks/run.py --no-scale   # full run without the 10M-row buffers
    .venv/bin/python benchmarks/run.py --no-nstep   # skip the W2 n-step tables (nstep.py)
    .venv/bin/python benchmarks/run.py --no-her     # skip the W3 HER tables (her.py)
    .venv/bin/python benchmarks/run.py --no-seq     # skip the W4 sequence tables (sequence.py)
    .venv/bin/python benchmarks/run.py --no-mb      # skip the W6 model-based tables (model_based.py)
    .venv/bin/python benchmarks/run.py --no-frames  # skip the W5 frame-stack tables (frames.py)
    .venv/bin/python benchmarks/run.py --no-ray     # skip the W7 Ray tables (ray_writers.py)
    .venv/bin/python benchmarks/run.py --no-gpu     # skip the GPU tables (gpu.py; skipped anyway without CUDA)
    .venv/bin/python benchmarks/run.py --no-compress  # skip the compressed-frame tables (compressed.py)
    .venv/bin/python benchmarks/run.py --no-add       # skip the facade-add table (facade_add.py)
    .venv/bin/python benchmarks/run.py --no-facade-sample  # skip the W1-through-facades table (facade_sample.py)
    .venv/bin/python benchmarks/run.py --no-compiled-read  # skip the compiled-read floor tables (compiled_read.py)

Prints markdown tables and writes them to benchmarks/results/latest.md, then the
docs' benchmark page from them (docs_page.py: docs/benchmarks/); the W2
n-step tables (``nstep.py``), the W3 HER tables (``her.py``), the W4 sequence
tables (``sequence.py``), W5 frame stacks (``frames.py``), W6 model-based epochs
(``model_based.py``) and the W7 Ray tables (``ray_writers.py``), each run in a
fresh subprocess after the W1 buffers are freed, are appended to the same file.
See benchmarks/README.md for the workload and the method.
"""

from __future__ import annotations

import threads  # noqa: F401 -- first: one thread per native pool (threads.py)

import argparse
import importlib.metadata as md
import itertools
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # benchmarks/, repo root (torchrl_ext)
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")  # silence torchrl INFO lines

import torch  # noqa: E402

import docs_page  # noqa: E402
import pixels  # noqa: E402
from impls import ALL  # noqa: E402
from measure import (  # noqa: E402
    hwm_bytes,
    interleaved,
    logger,
    run_probe,
    settle,
    status_of,
    table,
    write_tables,
)
from workload import BATCH, N_ENVS, RAW_BYTES_PER_TRANSITION, EpisodeStream, chunk_len  # noqa: E402

log = logger('bench')

WRITE_STEPS = 2000  # distinct pre-built one-step writes per impl, cycled (2 episodes)


def fill_streamed(impl, rows: int, seed: int) -> None:
    """Build+fill ``impl`` with ``rows`` transitions, generated chunk by chunk."""
    stream = EpisodeStream(seed=seed)
    impl.build(rows)
    left = rows // N_ENVS
    while left:
        T = min(chunk_len(rows), left)
        impl.fill(stream.chunk(T))
        left -= T


def mem_probe(key: str, capacity: int) -> dict:
    return run_probe([sys.executable, os.path.join(HERE, "measure.py"), key, str(capacity)], key)


def fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def ratio(ours, peer) -> str:
    if ours is None or peer is None or peer == 0:
        return "n/a"
    return f"{ours / peer:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100k rows, few repetitions")
    ap.add_argument("--scale", action="store_true", help="include 10M rows even with --quick")
    ap.add_argument("--no-scale", action="store_true", help="skip the 10M-row buffers (~3 GB RSS)")
    ap.add_argument("--no-nstep", action="store_true", help="skip the W2 n-step tables (nstep.py, ~17 GB RSS)")
    ap.add_argument("--no-her", action="store_true", help="skip the W3 HER tables (her.py, ~2 min)")
    ap.add_argument("--no-seq", action="store_true", help="skip the W4 sequence tables (sequence.py)")
    ap.add_argument("--no-mb", action="store_true", help="skip the W6 model-based tables (model_based.py)")
    ap.add_argument("--no-add", action="store_true", help="skip the facade-add table (facade_add.py)")
    ap.add_argument("--no-facade-sample", action="store_true",
                    help="skip the W1-through-facades sample table (facade_sample.py)")
    ap.add_argument("--no-frames", action="store_true", help="skip the W5 frame-stack tables (frames.py)")
    ap.add_argument("--no-compiled-read", action="store_true",
                    help="skip the compiled-read floor tables (compiled_read.py)")
    ap.add_argument("--no-ray", action="store_true", help="skip the W7 Ray tables (ray_writers.py, ~3 min)")
    ap.add_argument("--no-gpu", action="store_true", help="skip the GPU tables (gpu.py; needs CUDA)")
    ap.add_argument("--no-compress", action="store_true",
                    help="skip the compressed-frame tables (compressed.py, real ALE frames)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "latest.md"))
    a = ap.parse_args()
    run_w1(a)
    if not a.no_nstep:  # fresh interpreter: the W1 buffers are gone, n-step needs ~17 GB (full)
        log("W2 n-step (nstep.py)")
        cmd = [sys.executable, os.path.join(HERE, "nstep.py"), "--out", a.out, "--append"]
        subprocess.run(cmd + (["--quick"] if a.quick else []), check=False)
    if not a.no_her:  # fresh interpreter as well
        log("W3 HER (her.py)")
        cmd = [sys.executable, os.path.join(HERE, "her.py"), "--out", a.out, "--append"]
        subprocess.run(cmd + (["--quick"] if a.quick else []), check=False)
    if not a.no_seq:  # fresh interpreter as well; 10M rows unless --quick / --no-scale
        log("W4 sequences (sequence.py)")
        cmd = [sys.executable, os.path.join(HERE, "sequence.py"), "--out", a.out, "--append"]
        flags = (["--quick"] if a.quick else []) + (["--scale"] if a.scale else [])
        flags += ["--no-scale"] if a.no_scale else []
        subprocess.run(cmd + flags, check=False)
    if not a.no_mb:  # fresh interpreter as well
        log("W6 model-based (model_based.py)")
        cmd = [sys.executable, os.path.join(HERE, "model_based.py"), "--out", a.out, "--append"]
        subprocess.run(cmd + (["--quick"] if a.quick else []), check=False)
    if not a.no_add:  # fresh interpreter: the facades' add beside SB3's
        log("facade adds (facade_add.py)")
        cmd = [sys.executable, os.path.join(HERE, "facade_add.py"), "--out", a.out, "--append"]
        subprocess.run(cmd + (["--quick"] if a.quick else []), check=False)
    if not a.no_facade_sample:  # fresh interpreter: W1 samples through the facades beside cpprb
        log("facade samples (facade_sample.py)")
        cmd = [sys.executable, os.path.join(HERE, "facade_sample.py"), "--out", a.out, "--append"]
        subprocess.run(cmd + (["--quick"] if a.quick else []), check=False)
    if not a.no_frames:  # fresh interpreters, one per buffer (frames.py)
        log("W5 frame stacks (frames.py)")
        cmd = [sys.executable, os.path.join(HERE, "frames.py"), "--out", a.out, "--append"]
        subprocess.run(cmd + (["--quick"] if a.quick else []), check=False)
    if not a.no_compiled_read:  # fresh interpreter: W1-sized n-step and W5 read by one compiled pass
        log("compiled-read floors (compiled_read.py)")
        cmd = [sys.executable, os.path.join(HERE, "compiled_read.py"), "--out", a.out, "--append"]
        subprocess.run(cmd + (["--quick"] if a.quick else []), check=False)
    if not a.no_ray:  # a local Ray cluster: 2 remote collectors + this process as learner
        log("W7 Ray writers (ray_writers.py)")
        cmd = [sys.executable, os.path.join(HERE, "ray_writers.py"), "--out", a.out, "--append"]
        subprocess.run(cmd + (["--quick"] if a.quick else []), check=False)
    if not a.no_gpu:  # rows on the GPU, W1 and W2 n-step (gpu.py; prints a skip line without CUDA)
        log("GPU W1 / W2 n-step (gpu.py)")
        cmd = [sys.executable, os.path.join(HERE, "gpu.py"), "--out", a.out, "--append"]
        subprocess.run(cmd + (["--quick"] if a.quick else []), check=False)
    if not a.no_compress:  # fresh interpreter; one more per buffer for its memory
        log("compressed frames (compressed.py)")
        cmd = [sys.executable, os.path.join(HERE, "compressed.py"), "--out", a.out, "--append"]
        subprocess.run(cmd + (["--quick"] if a.quick else []), check=False)
    if os.path.abspath(a.out) == str(docs_page.RESULTS):
        docs_page.main([])  # docs/benchmarks/: this run's tables and charts


def run_w1(a) -> None:
    torch.set_num_threads(1)
    cap = 100_000 if a.quick else 1_000_000
    small = 10_000
    s_reps, s_inner = (40, 10) if a.quick else (500, 20)
    w_reps, w_inner = (40, 20) if a.quick else (400, 20)
    a.big = not a.no_scale and (a.scale or not a.quick)
    t_start = time.perf_counter()

    # 3. memory: one fresh subprocess per buffer
    mem = {}
    for cls in ALL:
        log(f"memory probe {cls.key} @ {cap:,}")
        mem[cls.key] = mem_probe(cls.key, cap)

    # build + fill every buffer in this process (setup, untimed except fill_s)
    stream = EpisodeStream(seed=0)
    chunks = stream.chunks_for(cap)
    impls, status = {}, {}
    for cls in ALL:
        impl = cls()
        log(f"fill {cls.key} @ {cap:,}")
        try:
            impl.build(cap)
            for c in chunks:
                impl.fill(c)
            impl.sample()
            impls[cls.key] = impl
            status[cls.key] = "ok"
        except Exception as e:  # noqa: BLE001 -- report, keep going
            status[cls.key] = status_of(cls.key, e)
            log(f"  {cls.key}: {e!r}")
    del chunks
    settle()

    # 1. sample rate
    log(f"sampling: {s_reps} interleaved blocks x {s_inner} batches")
    samp = interleaved({k: i.sample for k, i in impls.items()}, s_reps, s_inner)

    # 2. write cost of one [16] vector-env step into the full buffer (steady state)
    step_chunk = stream.chunk(WRITE_STEPS)
    writers = {}
    for k, i in impls.items():
        if i.kind == "floor" and k != "gather":
            continue
        it = itertools.cycle(i.prep_steps(step_chunk))
        writers[k] = (lambda w, it: (lambda: w(next(it))))(i.write, it)
    log(f"writing: {w_reps} interleaved blocks x {w_inner} steps")
    wr = interleaved(writers, w_reps, w_inner)

    # 4. scale: sample time vs rows (ours; TorchRL native for reference)
    scale_sizes = [small, cap] + ([10_000_000] if a.big else [])
    scale_fns, scale_status = {}, {}
    for cls in [c for c in ALL if c.key in ("ours", "torchrl")]:
        for n in scale_sizes:
            name = (cls.key, n)
            if n == cap and cls.key in impls:
                scale_fns[name] = impls[cls.key].sample
                continue
            if cls.key not in impls:
                scale_status[name] = status[cls.key]
                continue
            log(f"scale fill {cls.key} @ {n:,}")
            try:
                impl = cls()
                fill_streamed(impl, n, seed=1)
                scale_fns[name] = impl.sample
            except Exception as e:  # noqa: BLE001
                scale_status[name] = status_of(cls.key, e)
    log("scale sampling")
    sc = interleaved(scale_fns, s_reps, s_inner)

    # 5. pixels memory (W2), fresh subprocesses
    log("pixels memory (W2)")
    pixels_table = pixels.report(4_000 if a.quick else 20_000)

    elapsed = time.perf_counter() - t_start
    out = report(a, cap, mem, status, samp, wr, sc, scale_sizes, scale_status, elapsed)
    out += "\n\n" + pixels_table
    print(out)
    write_tables(out, a.out, append=False)


def report(a, cap, mem, status, samp, wr, sc, scale_sizes, scale_status, elapsed) -> str:
    labels = {c.key: c.label for c in ALL}
    vers = []
    for p in ("torch", "torchrl", "tensordict", "stable-baselines3", "cpprb", "numpy", "torchrl_ext"):
        try:
            vers.append(f"{p} {md.version(p)}")
        except md.PackageNotFoundError:
            vers.append(f"{p} -")
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    L = [
        f"# Replay-buffer benchmark W1 ({'quick' if a.quick else 'full'})",
        "",
        f"- workload: obs f32[17], action f32[6], reward f32, done/terminated/truncated bool; "
        f"{N_ENVS} envs x 1000-step episodes; capacity {cap:,} (full); batch {BATCH}",
        f"- {platform.python_implementation()} {platform.python_version()}, {cpu}, {os.cpu_count()} CPUs, "
        f"torch.set_num_threads(1)",
        f"- {', '.join(vers)}",
        f"- wall time {elapsed:.0f} s; main-process peak RSS {hwm_bytes() / 2**20:,.0f} MiB",
        "",
    ]

    def st(k):  # status text for a missing row
        return status.get(k, "n/a")

    # 1. sampling
    o = samp.get("ours")
    ours_rate = BATCH / o["median"] if o else None
    rows = []
    for c in ALL:
        s = samp.get(c.key)
        if not s:
            rows.append([labels[c.key], "samples/s", st(c.key), "", "", "n/a"])
            continue
        rate = BATCH / s["median"]
        rows.append([
            labels[c.key], "samples/s", fmt_int(rate), f"{s['median'] * 1e6:.1f}",
            f"{s['p25'] * 1e6:.1f}-{s['p75'] * 1e6:.1f}",
            "-" if c.key == "ours" else ratio(ours_rate, rate),
        ])
    L += ["## 1. Sample rate (batch 256 from a full buffer)", "",
          table(["impl", "metric", "value", "us/batch (median)", "us/batch p25-p75", "ours/peer (rate; >1 = ours faster)"], rows),
          "", f"Median over {samp and next(iter(samp.values()))['n']} interleaved blocks of batches; "
          "SB3 returns torch tensors (includes its numpy->torch copy), cpprb returns numpy arrays, "
          "floors return raw tensors (packed: one [256,44] tensor, no split). "
          "Random rows from a large buffer miss the CPU caches, so per-field layouts pay ~1 DRAM miss "
          "per field per row; the packed floor pays ~3 adjacent cache lines per row.", ""]

    # 2. writing
    o = wr.get("ours")
    ours_cost = o["median"] / N_ENVS if o else None
    rows = []
    for c in ALL:
        if c.key == "packed":
            continue
        s = wr.get(c.key)
        if not s:
            rows.append([labels[c.key], "us/transition", st(c.key), "", "", "n/a"])
            continue
        cost = s["median"] / N_ENVS
        rows.append([
            labels[c.key], "us/transition", f"{cost * 1e6:.2f}", f"{s['median'] * 1e6:.1f}",
            f"{s['p25'] * 1e6:.1f}-{s['p75'] * 1e6:.1f}",
            "-" if c.key == "ours" else ratio(ours_cost, cost),
        ])
    L += ["## 2. Write cost (one [16]-env step per call, into the full buffer)", "",
          table(["impl", "metric", "value", "us/step-call (median)", "us/call p25-p75", "ours/peer (cost; <1 = ours cheaper)"], rows),
          "", f"Each call writes 16 transitions (rb.extend(td[16]) / SB3 add / cpprb add); inputs pre-built "
          f"outside the timed region, {WRITE_STEPS} distinct steps cycled; buffers are full, so this "
          "includes overwrite/eviction. Floor = 7 slice copies into preallocated tensors.", ""]

    # 3. memory
    raw = cap * RAW_BYTES_PER_TRANSITION
    om = mem.get("ours", {}).get("held_bytes")
    rows = [["raw transition bytes", "bytes held", f"{raw / 1e6:,.1f} MB", f"{RAW_BYTES_PER_TRANSITION}", "1.00", "", "", ""]]
    for c in ALL:
        m = mem.get(c.key, {})
        if "held_bytes" not in m:
            err = m.get("error", "n/a")
            err = ("unavailable (import failed)" if c.kind == "ours" else "not installed") if "ImportError" in err or "ModuleNotFound" in err else err
            rows.append([labels[c.key], "RSS growth", err, "", "", "", "", "n/a"])
            continue
        h = m["held_bytes"]
        pk = m.get("peak_extra_bytes")
        rows.append([
            labels[c.key], "RSS growth", f"{h / 1e6:,.1f} MB", f"{h / cap:.1f}", f"{h / raw:.2f}",
            "n/a" if pk is None else f"{pk / 1e6:,.1f} MB", f"{m['fill_s']:.2f}",
            "-" if c.key == "ours" else ratio(om, h),
        ])
    L += ["## 3. Memory held by a full buffer", "",
          table(["impl", "metric", "value", "bytes/transition", "x raw", "peak RSS growth during fill", "bulk fill s", "ours/peer (bytes; <1 = ours smaller)"], rows),
          "", f"One fresh subprocess per buffer; RSS (/proc/self/statm) after gc.collect()+malloc_trim(0), "
          f"minus the same before build (source data already allocated). Raw = {cap:,} x "
          f"((17+17+6+1) x 4 B + 3 bool B). Bulk fill = [16, <=1000]-step chunks "
          "(SB3: 1 add per step, its only API).", ""]

    # 4. scale
    rows = []
    for key in ("ours", "torchrl"):
        base = sc.get((key, scale_sizes[0]))
        for n in scale_sizes:
            s = sc.get((key, n))
            if not s:
                rows.append([labels[key], f"{n:,}", scale_status.get((key, n), "n/a"), "", "", ""])
                continue
            rows.append([
                labels[key], f"{n:,}", f"{s['median'] * 1e6:.1f}", f"{s['p25'] * 1e6:.1f}-{s['p75'] * 1e6:.1f}",
                fmt_int(BATCH / s["median"]), ratio(s["median"], base["median"]) if base else "n/a",
            ])
    L += ["## 4. Sample time vs buffer size", "",
          table(["impl", "rows", "us/batch (median)", "p25-p75", "samples/s", f"time / time@{scale_sizes[0]:,}"], rows),
          "", "Full buffers, filled with the same episode stream; all sizes sampled interleaved with "
          "each other only, so absolute times differ from table 1 (different cache pressure): "
          "compare within a table." + ("" if a.big else " 10M rows skipped (--quick / --no-scale)."), ""]
    return "\n".join(L)


if __name__ == "__main__":
    main()
