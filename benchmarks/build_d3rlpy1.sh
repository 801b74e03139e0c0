#!/usr/bin/env bash
# Build d3rlpy 1.0.0 (W5's peer: its BatchReplayBuffer was removed in 1.1) into DIR, once.
#
#     benchmarks/build_d3rlpy1.sh DIR [PYTHON]   # then: D3RLPY1_PATH=DIR benchmarks/frames.py
#
# Its sdist needs Cython < 3, and d3rlpy 1.0 would clash with d3rlpy 2.x in one
# environment: it is built in a throwaway venv and installed with --target into
# DIR, which frames.py puts on PYTHONPATH for that peer's process only
# (../shared/PEERS-SETUP.md). Its Cython modules are compiled against the numpy of
# PYTHON (the bench's interpreter, default .venv/bin/python), the one they will run
# under; a DIR that already holds a build for that numpy is kept as it is.
set -euo pipefail
dir=${1:?usage: build_d3rlpy1.sh DIR [PYTHON]}
python=${2:-.venv/bin/python}
numpy=$("$python" -c 'import numpy; print(numpy.__version__)')
if [ "$(cat "$dir/.numpy" 2>/dev/null)" = "$numpy" ]; then
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "cython<3" "numpy==$numpy" setuptools wheel
# (no cache: pip would reuse a wheel compiled against another numpy)
"$work/venv/bin/pip" wheel -q --no-cache-dir --no-deps --no-build-isolation d3rlpy==1.0.0 -w "$work/wheels"
# its runtime imports that the bench's venv lacks (gym, torch... it has)
"$work/venv/bin/pip" install -q --no-deps --target "$work/target" "$work"/wheels/d3rlpy-1.0.0-*.whl \
    GPUtil tensorboardX
echo "$numpy" > "$work/target/.numpy"
rm -rf "$dir" && mkdir -p "$(dirname "$dir")" && mv "$work/target" "$dir"
