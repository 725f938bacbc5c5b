#!/usr/bin/env bash
# Builds harp-kernels' CUDA test binaries (kernels/tests/cuda_*.rs), the bandwidth
# benchmark, the apps' GPU test (tests/tests/device_cuda.rs) with the `harp` command and
# the two small datasets it reads (release, feature `cuda`, no debug info, stripped) and
# copies them into gpu-bundle/ at the repository root, together with gpu-bundle/run.sh,
# which runs them on a GPU machine that has no cargo:
#
#   bash scripts/gpu-bundle.sh
#   scp -r gpu-bundle gpu-box: && ssh gpu-box gpu-bundle/run.sh
#
# The bundle also holds harp-bench and elastic-ab.sh (scripts/elastic-ab.sh), which measure
# issue 4's forwarding figure with both executor layouts on that machine's cores:
# `gpu-bundle/elastic-ab.sh 5 40`; elastic-slow-events.py lines up the node and master logs
# around each slow event of a `harp-bench elastic --across --keep-logs` run (README).
# checks.sh (scripts/device-checks.sh) runs all of it in phases that each fit a 10-minute
# command: `gpu-bundle/checks.sh kernels | elastic | after | slow`.
#
# Nothing CUDA is needed to build (the driver and NVRTC are loaded at run time); the GPU
# machine needs libcuda.so.1 (the driver) and libnvrtc.so.13 or .so.12 on its library path.
# Respects CARGO_TARGET_DIR. See docs/KERNELS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
bundle="$root/gpu-bundle"

# Small binaries: no debug info, symbols stripped (the bundle stays well under 60 MiB).
export CARGO_PROFILE_RELEASE_DEBUG=0
export CARGO_PROFILE_RELEASE_STRIP=symbols

# Prints the executables cargo reports for the given build command (JSON messages).
executables() {
    "$@" --message-format=json-render-diagnostics \
        | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
        print(msg["target"]["name"] + "\t" + msg["executable"])
'
}

# Every CUDA test target: kernels/tests/cuda_*.rs (cuda_nvrtc_compile, cuda_conformance, and
# any suite added later).
test_args=()
for file in kernels/tests/cuda_*.rs; do
    test_args+=(--test "$(basename "$file" .rs)")
done

echo "gpu-bundle: building (release, --features cuda)..." >&2
mapfile -t built < <(
    executables cargo test -p harp-kernels --features cuda --release --locked --no-run \
        "${test_args[@]}"
    executables cargo build -p harp-kernels --features cuda --release --locked \
        --bin harp-kernel-bench
    # The apps on the GPU (`--device cuda`): their test against the CPU paths, and `harp`.
    executables cargo test -p harp-tests --release --locked --no-run --test device_cuda
    executables cargo build -p harp-apps --release --locked --bin harp
    # Issue 4's forwarding figure on the GPU machine's cores (elastic-ab.sh).
    executables cargo build -p harp-benches --release --locked --bin harp-bench
)

rm -rf "$bundle"
mkdir -p "$bundle"
names=()
for entry in "${built[@]}"; do
    name="${entry%%$'\t'*}"
    path="${entry#*$'\t'}"
    # `cargo test --no-run` reports the bench binary (and harp-tests' own copy of the
    # command, `harp-cli`: `harp` serves) too; copy each name once.
    [ "$name" = harp-cli ] && continue
    if [ ! -e "$bundle/$name" ]; then
        cp "$path" "$bundle/$name"
        names+=("$name")
    fi
done
# The datasets device_cuda reads (LDA on newsgroups, the CNN on mnist10k): a few MB.
mkdir -p "$bundle/data"
for data in newsgroups-subset mnist10k; do
    if [ -d "$root/../shared/data/$data" ]; then
        cp -r "$root/../shared/data/$data" "$bundle/data/"
    fi
done
cp "$root/scripts/elastic-ab.sh" "$bundle/elastic-ab.sh"
cp "$root/scripts/elastic-slow-events.py" "$bundle/elastic-slow-events.py"
cp "$root/scripts/device-checks.sh" "$bundle/checks.sh"
cp "$root/scripts/kernel-bench-summary.py" "$bundle/kernel-bench-summary.py"
names+=(elastic-ab.sh elastic-slow-events.py checks.sh kernel-bench-summary.py)
for want in cuda_conformance cuda_nvrtc_compile harp-kernel-bench device_cuda harp harp-bench; do
    if [ ! -x "$bundle/$want" ]; then
        echo "gpu-bundle: $want was not built" >&2
        exit 1
    fi
done

cat >"$bundle/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs harp-kernels' CUDA test binaries and the bandwidth benchmark on a GPU machine (no
# cargo needed). HARP_REQUIRE_GPU=1 makes a missing device or NVRTC a failure instead of a
# skip. Benchmark JSON lines go to stdout and to bench.jsonl beside this script; extra
# arguments go to harp-kernel-bench (e.g. --elements 16777216 --reps 50).
# Exits non-zero if any test binary or the benchmark fails.
set -uo pipefail
cd "$(dirname "$0")"
export HARP_REQUIRE_GPU=1
failed=()
# NVRTC compile test first, then every other CUDA test binary (cuda_*).
tests=(cuda_nvrtc_compile)
for test in cuda_*; do
    [ "$test" = cuda_nvrtc_compile ] || tests+=("$test")
done
for test in "${tests[@]}"; do
    echo "== $test"
    ./"$test" --nocapture || failed+=("$test")
done
# Every app's --device cuda against its CPU path (data from ./data, the harp command here).
echo "== device_cuda"
HARP_BIN="$PWD/harp" HARP_SHARED_DATA="$PWD/data" ./device_cuda --nocapture \
    || failed+=(device_cuda)
echo "== harp-kernel-bench"
./harp-kernel-bench "$@" | tee bench.jsonl || failed+=(harp-kernel-bench)
# The update rules should reach >= 60% of copy bandwidth: report, don't fail.
python3 kernel-bench-summary.py bench.jsonl || true
if [ "${#failed[@]}" -ne 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all passed"
RUN
chmod +x "$bundle/run.sh"

echo "gpu-bundle: $(du -sh "$bundle" | cut -f1) in $bundle:"
for name in "${names[@]}" run.sh; do
    echo "  $name"
done
