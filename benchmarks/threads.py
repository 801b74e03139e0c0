"""One thread per native thread pool in every benchmark process: imported first, before numpy and torch.

``torch.set_num_threads(1)`` sizes torch's own pool only. numpy's BLAS (OpenBLAS)
and the OpenMP runtimes start one thread per core when they load, and idle
pool threads spin for a while after each call, taking the CPU from whatever runs
next: on this 2-core machine, from the next library timed (W5 times each
library in its own process, one after another). Measured in W5: cpprb read
15.8k samples/s at B = 32 with the pools at their defaults and 152k with one
thread each. Every library gets the same: one thread per pool. Variables the
caller already set are kept.
"""
import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ.setdefault(_name, "1")
