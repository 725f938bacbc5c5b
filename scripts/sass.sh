#!/usr/bin/env bash
# The SASS of harp's CUDA kernels, without a GPU: compiles every CUDA source with NVRTC for
# a real architecture (`harp-kernel-bench --cubin-dir`, the same compile the kernels get at
# run time on that GPU), disassembles it with nvdisasm and prints, per kernel, its
# registers and instructions and the instructions of each loop body (one pass of a loop is
# what a warp issues per iteration: compare kernels by these).
#
#   bash scripts/sass.sh [ARCH [KERNEL_FILTER]]   # default sm_90 (H100), every kernel
#   bash scripts/sass.sh sm_90 harp_lda_sample_tiles
#
# Needs the NVRTC wheel of scripts/install-test-deps.sh (target/nvrtc); installs nvdisasm
# and cuobjdump (PyPI wheels, plain executables) into target/sass-tools. Writes
# target/sass/<source>.cubin and .sass. See docs/KERNELS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
arch="${1:-sm_90}"
filter="${2:-}"
target="${CARGO_TARGET_DIR:-$root/target}"
tools="$root/target/sass-tools"
out="$root/target/sass"
nvrtc_lib="$root/target/nvrtc/nvidia/cu13/lib"

if [ ! -f "$nvrtc_lib/libnvrtc.so.13" ]; then
    bash scripts/install-test-deps.sh
fi
bin="$tools/nvidia/cu13/bin"
if [ ! -x "$bin/nvdisasm" ] || [ ! -x "$bin/cuobjdump" ]; then
    echo "sass: installing nvdisasm and cuobjdump into $tools" >&2
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
        --no-deps --target "$tools" \
        nvidia-cuda-nvdisasm==13.5.37 nvidia-cuda-cuobjdump==13.5.37
fi

cargo build --quiet --release --locked -p harp-kernels --features cuda --bin harp-kernel-bench
rm -rf "$out"
LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$target/release/harp-kernel-bench" --cubin-dir "$out" --arch "$arch" >/dev/null
for cubin in "$out"/*.cubin; do
    "$bin/nvdisasm" -c "$cubin" >"${cubin%.cubin}.sass"
    "$bin/cuobjdump" --dump-resource-usage "$cubin" >"${cubin%.cubin}.resources"
    python3 scripts/sass_loops.py "${cubin%.cubin}.sass" "${cubin%.cubin}.resources" "$filter"
done
echo "sass: disassembly in $out" >&2
