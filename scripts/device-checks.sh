#!/usr/bin/env bash
# The measurements issues 4 and 6 still need from a GPU machine with many cores, in phases
# that each fit a 10-minute command (the `device` tool's limit), run from the GPU bundle
# (scripts/gpu-bundle.sh copies this script there as checks.sh):
#
#   gpu-bundle/checks.sh quick        # the decisive figures of both issues in one call of at
#                                     # most ~8.5 min (each step under a timeout): LDA
#                                     # sampling's conformance and bandwidth at K 20-256 with
#                                     # every variant, then 3 elastic runs (default layout).
#                                     # For a task with 15 minutes of device time in all
#                                     # (a machine's start counts): run this first.
#   gpu-bundle/checks.sh kernels      # run.sh: CUDA tests, the apps on the GPU, kernel bandwidth
#   gpu-bundle/checks.sh elastic [N]  # elastic-ab.sh N 40, both executor layouts (default N 3, ~7 min)
#   gpu-bundle/checks.sh after        # state-transfer and scale-out, then 2 runs of elastic
#                                     # (default layout): the "after other benchmarks" case
#   gpu-bundle/checks.sh slow         # one elastic run with the nodes' logs at debug level and
#                                     # elastic-slow-events.py's timeline of its slow events
#
# Every phase writes its output (JSON lines and logs) to $OUT (the device tool's folder
# that comes back), else ./checks-out; each prints what to read in it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$PWD/checks-out}"
mkdir -p "$out"
phase="${1:-}"
cd "$here"
case "$phase" in
quick)
    status=0
    export HARP_REQUIRE_GPU=1
    echo "== LDA sampling conformance (every variant against the CPU, bit for bit)"
    timeout 120 ./cuda_conformance_lda_mf lda sample_variant --nocapture 2>&1 \
        | tee "$out/quick-conformance.log" || status=1
    echo "== LDA sampling bandwidth, each K with every variant that can sample it"
    lda_cases=()
    for k in 20 64 80 100 128 256; do
        lda_cases+=(--kernel "lda_sample_k$k")
    done
    timeout 120 ./harp-kernel-bench "${lda_cases[@]}" >"$out/quick-bench.jsonl" || status=1
    python3 kernel-bench-summary.py "$out/quick-bench.jsonl" | tee "$out/quick-bench.txt" || true
    echo "== issue 4's forwarding figure: 3 runs of elastic --rounds 40 --across (default layout)"
    (cd "$out" && ELASTIC_AB_LAYOUTS=own timeout 280 "$here/elastic-ab.sh" 3 40) || status=1
    echo "checks: quick-conformance.log, quick-bench.jsonl/.txt (K's share of copy bandwidth" \
        "per variant), elastic-ab.jsonl (one summary per run)"
    exit "$status"
    ;;
kernels)
    status=0
    ./run.sh 2>&1 | tee "$out/kernels.log" || status=$?
    cp bench.jsonl "$out/" 2>/dev/null || true
    echo "checks: kernels.log (tests, then each kernel's share of copy bandwidth), bench.jsonl"
    exit "$status"
    ;;
elastic)
    (cd "$out" && "$here/elastic-ab.sh" "${2:-3}" 40)
    echo "checks: elastic-ab.jsonl (one summary per run, tagged with its layout), .runs (every line)"
    ;;
after)
    # README's table's settings: 3 rounds of 1 GiB; epochs sized for a 30 s static run.
    ./harp-bench state-transfer --rounds 3 | tee "$out/state-transfer.jsonl"
    ./harp-bench scale-out --rounds 1 | tee "$out/scale-out.jsonl"
    (cd "$out" && ELASTIC_AB_LAYOUTS=own "$here/elastic-ab.sh" 2 40)
    echo "checks: state-transfer.jsonl, scale-out.jsonl, then elastic-ab.jsonl as in 'elastic'"
    ;;
slow)
    HARP_LOG=harp::server=debug,harp=info ./harp-bench elastic --rounds 40 --across \
        --keep-logs >"$out/slow.jsonl" 2>"$out/slow-master.log"
    logs="$(python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("bench") == "elastic":
        print(r["node_logs"])' "$out/slow.jsonl")"
    mkdir -p "$out/node-logs"
    cp "$logs"/node-*.log "$out/node-logs/" # not the job's credentials beside them
    python3 elastic-slow-events.py "$out/slow.jsonl" --logs "$out/node-logs" \
        --log "$out/slow-master.log" | tee "$out/slow-events.txt"
    echo "checks: slow-events.txt (each slow event's host counters and log lines), slow.jsonl"
    ;;
*)
    echo "usage: checks.sh quick | kernels | elastic [RUNS] | after | slow" >&2
    exit 2
    ;;
esac
