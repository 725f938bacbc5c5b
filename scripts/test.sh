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
cargo test --workspace --locked --features harp-kernels/cuda "$@"
