#!/usr/bin/env python3
"""Prints each kernel of a harp-kernel-bench JSON-lines file as a share of the device's copy
bandwidth, flags those below issue 6's 60% target, and lists each LDA case's alternative
kernels (the other variants that can sample that K, timed on the same data).

    python3 kernel-bench-summary.py bench.jsonl
"""
import json
import sys


def main(path):
    for line in open(path):
        r = json.loads(line)
        if r["kernel"] == "copy":
            continue
        flag = "ok" if r["ratio"] >= 0.6 else "BELOW 60% of copy bandwidth"
        variant = f'  [{r["variant"]}]' if "variant" in r else ""
        print(
            f'{r["kernel"]:>16}: {r["gbps"]:8.1f} GB/s = {100 * r["ratio"]:5.1f}% of copy '
            f'({r["copy_gbps"]:.1f} GB/s)  {flag}{variant}'
        )
        for name, gbps in sorted(r.get("alternatives_gbps", {}).items()):
            print(f'{"":>18}alternative {name}: {100 * gbps / r["copy_gbps"]:5.1f}% of copy')


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: kernel-bench-summary.py BENCH.jsonl")
    main(sys.argv[1])
