#!/usr/bin/env bash
# Creates target/torch-venv, a virtual environment with PyTorch (CPU) for the CNN benchmark
# (`cargo bench-harp cnn`). Idempotent: an environment that already imports torch is kept.
#
# Tries PyTorch's CPU-only wheel index first (small, no CUDA libraries); when that index is
# not reachable, falls back to PyPI's `torch` (which also runs on the CPU, but is large).
# Prints the path of the environment's python on its last line.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${TORCH_VENV:-$root/target/torch-venv}"
python="${PYTHON:-python3}"

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    echo "$venv/bin/python"
    exit 0
fi

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip >&2 || true
if "$venv/bin/python" -m pip install --quiet torch numpy \
    --index-url https://download.pytorch.org/whl/cpu >&2; then
    echo "torch-bench-venv: installed torch from download.pytorch.org/whl/cpu" >&2
else
    echo "torch-bench-venv: the CPU wheel index is not reachable; installing torch from PyPI" >&2
    "$venv/bin/python" -m pip install --quiet torch numpy >&2
fi
"$venv/bin/python" -c 'import torch; print("torch", torch.__version__, file=__import__("sys").stderr)'
echo "$venv/bin/python"
