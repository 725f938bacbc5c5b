#!/usr/bin/env bash
# The project's test command (README; .ci/run runs it): installs what the build and the tests
# need beyond the Rust toolchain (protoc for etcd-client, etcd for the membership tests; see
# scripts/install-test-deps.sh), then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
cargo test --workspace --locked "$@"
