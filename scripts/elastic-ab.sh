#!/usr/bin/env bash
# Issue 4's forwarding figure, both executor layouts, interleaved: runs
# `harp-bench elastic --rounds R --across` N times with the default layout (a `harp node`
# process runs its executors on a runtime of their own) and N times with
# HARP_EXECUTOR_THREADS=0 (executors on the node's runtime, the earlier layout), alternating
# which goes first, and prints every run's `during_ratio_pooled` and `move_ratio` and, per
# layout, the lowest and the mean. Target: during_ratio_pooled >= 0.8 in every run. Each
# run's line also gives what the kernel and the job's processes counted during its events
# (direct compaction and reclaim stalls, faults, context switches; non-zero ones), and the
# machine's transparent huge page settings are printed first.
#
#   bash scripts/elastic-ab.sh [RUNS [ROUNDS]]     # defaults: 5 runs of 40 rounds
#   ELASTIC_AB_LAYOUTS=own bash scripts/elastic-ab.sh 2   # only the default layout
#   ELASTIC_AB_ARGS="--master-threads 4" bash scripts/elastic-ab.sh   # more harp-bench arguments
#
# A run of 40 rounds takes about 70 s (each round: a 500 ms gap, a 1 s window, the event,
# 100 ms after), so 5 runs of both layouts take about 12 minutes.
#
# Uses the harp-bench and harp binaries beside this script (the GPU bundle:
# scripts/gpu-bundle.sh copies all three there), else target/release (build them first:
# `cargo build --release -p harp-apps -p harp-benches`). Every run's JSON lines go to
# elastic-ab.jsonl.runs in the current directory, the summaries (tagged with the layout)
# to elastic-ab.jsonl. Meant for a machine with many cores: on 2 cores the four processes
# share them and single runs vary by ±15%.
set -euo pipefail
runs="${1:-5}"
rounds="${2:-40}"
for layout in ${ELASTIC_AB_LAYOUTS:-}; do
    case "$layout" in
    own | shared) ;;
    *)
        echo "elastic-ab: unknown layout '$layout' in ELASTIC_AB_LAYOUTS (own, shared)" >&2
        exit 2
        ;;
    esac
done
here="$(cd "$(dirname "$0")" && pwd)"
if [ -x "$here/harp-bench" ] && [ -x "$here/harp" ]; then
    bin="$here"
else
    bin="$here/../${CARGO_TARGET_DIR:-target}/release"
fi
for exe in harp-bench harp; do
    if [ ! -x "$bin/$exe" ]; then
        echo "elastic-ab: $bin/$exe is missing; build it with" \
            "\`cargo build --release -p harp-apps -p harp-benches\`" >&2
        exit 1
    fi
done
out="$PWD/elastic-ab.jsonl"
: >"$out"
: >"$out.runs"

# Picks a run's summary line (the one with `during_ratio_pooled`) from stdin, tags it with
# the layout (argv[1]) and prints it; a one-line digest goes to stderr.
summary_py="$(mktemp)"
trap 'rm -f "$summary_py"' EXIT
cat >"$summary_py" <<'PY'
import json, sys
layout, found = sys.argv[1], None
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if "during_ratio_pooled" in r:
        found = r
if found is None:
    sys.exit("elastic-ab: a run with layout " + layout + " printed no summary")
found["layout"] = layout
print(json.dumps(found))
longest_ms = 1e3 * max(found["event_s"])
# Summed over the events: the kernel's memory stalls and the job's faults and switches.
host = ", ".join(f"{k} {v}" for k, v in sorted((found.get("host_during_events") or {}).items()) if v)
print(f"{layout:>6}: during_ratio_pooled {found['during_ratio_pooled']}, "
      f"move_ratio {found['move_ratio']}, longest event {longest_ms:.1f} ms"
      + (f"; during events: {host}" if host else ""), file=sys.stderr)
PY

# One run of one layout: every line goes to $out.runs, the tagged summary to $out.
run_one() {
    local layout="$1" threads=()
    [ "$layout" = shared ] && threads=(HARP_EXECUTOR_THREADS=0)
    local extra=()
    read -r -a extra <<<"${ELASTIC_AB_ARGS:-}"
    env -u HARP_EXECUTOR_THREADS "${threads[@]}" "$bin/harp-bench" elastic --rounds "$rounds" \
        --across "${extra[@]}" | tee -a "$out.runs" | python3 "$summary_py" "$layout" >>"$out"
}

for setting in enabled defrag; do
    file=/sys/kernel/mm/transparent_hugepage/$setting
    if [ -r "$file" ]; then
        echo "elastic-ab: transparent_hugepage/$setting: $(cat "$file")" >&2
    fi
done
for ((i = 0; i < runs; i++)); do
    if [ -n "${ELASTIC_AB_LAYOUTS:-}" ]; then
        read -r -a order <<<"$ELASTIC_AB_LAYOUTS"
    elif ((i % 2 == 0)); then order=(own shared); else order=(shared own); fi
    for layout in "${order[@]}"; do
        run_one "$layout"
    done
done

python3 - "$out" <<'PY'
import json, sys
by = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    by.setdefault(r["layout"], []).append(r["during_ratio_pooled"])
for layout, name in (("own", "own executor runtime (default)"), ("shared", "HARP_EXECUTOR_THREADS=0")):
    xs = by.get(layout, [])
    if xs:
        verdict = "every run >= 0.8" if min(xs) >= 0.8 else "BELOW 0.8 in some run"
        print(f"{name}: {', '.join(f'{x:.2f}' for x in xs)}; lowest {min(xs):.2f}, mean {sum(xs) / len(xs):.2f}  {verdict}")
PY
