#!/usr/bin/env python3
"""Count the atomic read-modify-writes a profiled run executed, per call, and where.

Reads a callgrind profile made with per-instruction counts, finds the instructions that are atomic
read-modify-writes on x86-64 (a `lock` prefix, or `xchg` with memory, which locks without one) in each object's
disassembly (objdump), and prints how many times each ran, divided by CALLS, with its function (addr2line):

    cargo build --release -p tower-cancel-bench --bins
    valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file=atomics.out \\
        target/release/call_profile "CancelStack::lsp(), requests read by a connection (connection path)" 100000
    python3 crates/tower-cancel-bench/count_atomics.py atomics.out 100000

Only instructions that ran at least CALLS / 2 times are listed (the per-call ones); the total counts them all.
BENCHMARKS.md's inventory of a request's atomics was taken this way.
"""

import collections
import re
import subprocess
import sys

# Where valgrind loads a position-independent executable: its addresses are the file's plus this.
PIE_BASE = 0x108000


def executed(profile):
    """Self counts per (object, instruction address) of a callgrind profile with `positions: instr line`."""
    names, counts = {}, collections.Counter()
    obj, last, after_calls = None, 0, False
    for line in open(profile):
        line = line.rstrip("\n")
        named = re.match(r"^c?ob=\((\d+)\)(?: (.*))?$", line)
        if named:
            if named.group(2):
                names[named.group(1)] = named.group(2)
            if line.startswith("ob="):
                obj = names.get(named.group(1))
            continue
        if line.startswith("calls="):
            # The next cost line is the call's inclusive cost, not the instruction's own.
            after_calls = True
            continue
        cost = re.match(r"^(0x[0-9a-f]+|[+-]\d+|\*)\s+\S+\s+(\d+)$", line)
        if not cost:
            continue
        position = cost.group(1)
        if position.startswith("0x"):
            last = int(position, 16)
        elif position != "*":
            last += int(position)
        if after_calls:
            after_calls = False
            continue
        counts[(obj, last)] += int(cost.group(2))
    return counts


def atomic_instructions(path):
    """The addresses of an object's atomic read-modify-writes, with their text."""
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True
    ).stdout
    found = {}
    for line in listing.splitlines():
        instruction = re.match(r"^\s*([0-9a-f]+):\s+(.*)$", line)
        if not instruction:
            continue
        text = instruction.group(2)
        if text.startswith("lock ") or (text.startswith("xchg") and "(" in text):
            found[int(instruction.group(1), 16)] = text
    return found


def function_at(path, address):
    named = subprocess.run(
        ["addr2line", "-f", "-C", "-e", path, hex(address)], capture_output=True, text=True
    ).stdout
    return named.splitlines()[0] if named else "?"


def main():
    profile, calls = sys.argv[1], int(sys.argv[2])
    counts = executed(profile)
    total, rows = 0, []
    for obj in {obj for obj, _ in counts if obj}:
        try:
            atomics = atomic_instructions(obj)
        except OSError:
            continue
        # An executable or library's addresses as valgrind saw them: as in the file, or past the PIE base.
        for offset in (0, PIE_BASE):
            hits = {a: c for (o, a), c in counts.items() if o == obj and a - offset in atomics}
            if not hits:
                continue
            total += sum(hits.values())
            for address, count in hits.items():
                if count >= calls // 2:
                    file_address = address - offset
                    rows.append((count / calls, function_at(obj, file_address), atomics[file_address]))
            break
    for per_call, function, text in sorted(rows, reverse=True):
        print(f"{per_call:6.2f}  {text:32}  {function[:110]}")
    print(f"atomic read-modify-writes per call: {total / calls:.2f}")


if __name__ == "__main__":
    main()
