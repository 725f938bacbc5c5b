#!/usr/bin/env bash
# The project's test command (README; .ci/run runs it): installs what the build and the tests
# need beyond the Rust toolchain (protoc for etcd-client, etcd for the membership tests, NVRTC for
# the CUDA compile test; see scripts/install-test-deps.sh), then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
# NVRTC from install-test-deps.sh: harp-kernels' `cuda` feature loads libnvrtc.so.13 at run time
# (dlopen), and NVRTC itself loads libnvrtc-builtins from the same directory; with the feature
# on, the NVRTC compile test runs for real (the CUDA conformance suite skips without a GPU).
export LD_LIBRARY_PATH="$PWD/target/nvrtc/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A fresh clone (CI) gains nothing from incremental compilation and its caches cost disk.
if [ "${CI:-}" = "true" ]; then
    export CARGO_INCREMENTAL=0
fi
# The tests on real datasets read ../shared/data (or $HARP_SHARED_DATA) and skip that part,
# silently, where it is absent: say so where a CI log shows it, before and after the run.
data_dir="${HARP_SHARED_DATA:-$PWD/../shared/data}"
data_note=""
if [ ! -d "$data_dir" ]; then
    data_note="NOTE: no shared datasets at $data_dir: the tests on real data (MNIST, MovieLens, newsgroups, digits) skip those parts; set HARP_SHARED_DATA=DIR to run them"
    echo "$data_note"
fi
cargo test --workspace --locked --features harp-kernels/cuda "$@"
if [ -n "$data_note" ]; then
    echo "$data_note"
fi
