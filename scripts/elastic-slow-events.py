"""The node log lines around each slow event of a `harp-bench elastic --across --keep-logs`
run: for every `elastic-event` line whose event took at least --min-ms (default 4), prints
the event and, from each node's log, the lines from --before-ms before its start to
--after-ms after its end, each with its time from the event's start.

    HARP_LOG=harp::server=debug,harp=info \
        harp-bench elastic --rounds 40 --across --keep-logs > elastic.jsonl
    python3 scripts/elastic-slow-events.py elastic.jsonl [--min-ms 4] [--log master.log]

The log directory is the summary's `node_logs` (override with --logs DIR); --log adds a
file, e.g. the bench's own stderr, where the job's master logs (`2> master.log`). The nodes log
in UTC with microseconds (plain text when their stderr is a file); the bench gives each
event's start as UNIX time (`started_unix_s`) and its duration (`event_s`), and what the
kernel and the job's processes counted over it (`host`: compaction and reclaim stalls,
faults, context switches), printed where not zero.
"""
import argparse
import datetime
import json
import pathlib
import re
import sys

STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z\s+(.*)$")
# Colour codes, in logs of builds that coloured them in files too.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def unix_time(stamp):
    parsed = datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc)
    return parsed.timestamp()


def read_log(path):
    """(the log's name, [(unix time, text)]) of a log file; a node's log is named with the
    node id its "joined the job" line gives (the files are numbered in start order)."""
    name, lines = path.stem, []
    for raw in path.read_text(errors="replace").splitlines():
        match = STAMP.match(ANSI.sub("", raw))
        if match:
            lines.append((unix_time(match.group(1)), match.group(2)))
            joined = re.search(r"joined the job node=(\d+)", match.group(2))
            if joined:
                name = f"{path.stem} (node {joined.group(1)})"
    return name, lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jsonl", help="the bench's stdout (JSON lines)")
    parser.add_argument("--logs", help="the node logs' directory (default: node_logs)")
    parser.add_argument("--log", action="append", default=[],
                        help="another log file to read (repeatable)")
    parser.add_argument("--min-ms", type=float, default=4.0)
    parser.add_argument("--before-ms", type=float, default=2.0)
    parser.add_argument("--after-ms", type=float, default=10.0)
    args = parser.parse_args()

    events, logs_dir = [], args.logs
    for line in open(args.jsonl):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("bench") == "elastic-event":
            events.append(record)
        elif record.get("bench") == "elastic" and not logs_dir:
            logs_dir = record.get("node_logs")
    if not logs_dir:
        sys.exit("no node_logs in the summary: run the bench with --across --keep-logs, "
                 "or pass --logs DIR")
    paths = sorted(pathlib.Path(logs_dir).glob("node-*.log"))
    if not paths:
        sys.exit(f"no node-*.log in {logs_dir}")
    logs = [read_log(path) for path in paths + [pathlib.Path(p) for p in args.log]]
    slow = [e for e in events if e["event_s"] * 1e3 >= args.min_ms]
    print(f"{len(slow)} of {len(events)} events took at least {args.min_ms} ms; logs: {logs_dir}")
    for event in slow:
        start = event["started_unix_s"]
        end = start + event["event_s"]
        print(f"\n== round {event['round']} ({event['direction']}): {event['event_s'] * 1e3:.2f} ms, "
              f"{event['tasks_during']} tasks during, during_ratio {event['during_ratio']}, "
              f"slowest move {event.get('slowest_move')}")
        # The kernel's memory stalls and the job's faults and switches over the event
        # (harp-bench's `host`), the non-zero ones.
        host = {k: v for k, v in (event.get("host") or {}).items() if v}
        if host:
            print("  host: " + ", ".join(f"{k} {v}" for k, v in sorted(host.items())))
        for name, lines in logs:
            window = [(t, text) for t, text in lines
                      if start - args.before_ms / 1e3 <= t <= end + args.after_ms / 1e3]
            print(f"  {name}: {len(window)} lines")
            for t, text in window:
                print(f"    {1e3 * (t - start):+8.3f} ms  {text}")


if __name__ == "__main__":
    main()
