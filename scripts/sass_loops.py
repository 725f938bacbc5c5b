"""Per kernel of an nvdisasm listing: registers, instructions, and each loop body.

Usage: python3 scripts/sass_loops.py FILE.sass FILE.resources [KERNEL_FILTER]
(scripts/sass.sh runs it). A loop is a backward branch; its body is every instruction
from the branch's target to the branch, nested loops included, so one pass of the
innermost loops is what a warp issues per iteration. Prints one line per kernel and one
indented line per loop, in the order of their backward branches.
"""
import re
import sys


def kernels(sass):
    """Yields (name, [(label or None, instruction)]) for each function of the listing."""
    name, body = None, []
    for line in sass.splitlines():
        match = re.match(r"\s*\.text\.(\S+):", line)
        if match:
            if name:
                yield name, body
            name, body = match.group(1), []
            continue
        if name is None:
            continue
        match = re.match(r"(\.L_x_\d+):", line)
        if match:
            body.append((match.group(1), None))
            continue
        match = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if match:
            body.append((None, match.group(1)))
    if name:
        yield name, body


def registers(resources):
    regs, current = {}, None
    for line in resources.splitlines():
        match = re.match(r"\s*Function (\S+):", line)
        if match:
            current = match.group(1)
            continue
        match = re.search(r"REG:(\d+)", line)
        if current and match:
            regs[current] = int(match.group(1))
    return regs


def main():
    sass = open(sys.argv[1]).read()
    regs = registers(open(sys.argv[2]).read())
    wanted = sys.argv[3] if len(sys.argv) > 3 else ""
    for name, body in kernels(sass):
        if wanted not in name:
            continue
        labels, instructions = {}, []
        for label, instruction in body:
            if label:
                labels[label] = len(instructions)
            else:
                instructions.append(instruction)
        print(f"{name}: {regs.get(name, '?')} registers, {len(instructions)} instructions")
        for end, instruction in enumerate(instructions):
            match = re.search(r"\bBRA\b.*\((\.L_x_\d+)\)", instruction)
            if match and labels.get(match.group(1), end + 1) <= end:
                start = labels[match.group(1)]
                print(f"  loop at {start:5d}: {end - start + 1:5d} instructions per pass")


if __name__ == "__main__":
    main()
