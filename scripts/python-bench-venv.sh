#!/usr/bin/env bash
# Creates target/bench-venv, the Python environment of the LDA benchmark
# (`cargo bench-harp lda`): the `lda` package (collapsed Gibbs sampling, Cython) and numpy.
# Idempotent: an existing environment is reused and only missing packages are installed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BENCH_VENV:-$root/target/bench-venv}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet lda numpy
"$venv/bin/python" -c 'import lda, numpy; print("bench venv ready:", "lda", lda.__version__, "numpy", numpy.__version__)'
