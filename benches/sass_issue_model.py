#!/usr/bin/env python3
"""A one-warp issue model of a SASS listing (benches/RESULTS.md, fiftieth session).

Usage:
    nvdisasm -c -hex kernel.cubin > kernel.sass        (or: cuobjdump -sass kernel.cubin)
    python3 benches/sass_issue_model.py kernel.sass LABEL [--at 0xADDR] [--until 0xADDR]
                                        [--lds 30] [--mufu 24] [--trace]

LABEL is a function's label in the listing: a kernel's name, or a device function's label
as nvdisasm prints it (e.g. '$walk_american$_Z7walk_gjPKddPdi'). With a cuobjdump
listing, LABEL is the kernel's name and '--at 0xADDR' starts at a device function's
address instead. '--until 0xADDR' stops before that address instead of at the first RET
(a section of a kernel: a phase between two barriers, say).

The model issues the instructions in order, one warp alone on its SM sub-partition. Each
instruction waits for the scoreboards named in its control word, then issues; the next
follows after its stall count (at least one cycle). Instructions that set a write
scoreboard complete after a fixed latency: LDS --lds cycles, MUFU --mufu, SHFL 26, REDUX
and others 20, global and local loads 400. A read scoreboard clears after 4 cycles.

It prints the modelled cycles from the label to its first RET (or to the end), and the
cycles between successive MUFU.RCP64H (for walk_gj: one per 2 x 2 pivot step).

Limits: no other warp (no contention for the FP64 / tensor pipe, the issue slot or shared
memory), fixed latencies, branches taken straight through (both sides of an if are
counted). It ranks variants of a serial chain on one warp; it does not predict a
kernel's time. In the fiftieth session it was right about walk_gj's software pipelining
(model 5.1k -> 3.9k cycles, measured 4.3% per step) and the acceptance test's maxima; it
credited two other changes on the solving warp's chain that measured nothing, and it was
wrong about changes to phases that both warps run beside other blocks (the exercise, the
copies). In the fifty-first session it showed that edits to the caller move ptxas's
allocation of the noinline callees (walk_gj 3,857 -> 2,971 cycles after the join pass's
rewrite; measured 12%), but it also favoured a variant that measured 4% slower (s1r), and
the measured single-warp solve is ~1.6x the model beside another walk's building warp.
"""

import argparse
import re
import sys

LINE = re.compile(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/")
WORD = re.compile(r"/\* (0x[0-9a-f]+) \*/")


def read_listing(path, label, at, until=None):
    """(address, text, high control word) for each instruction from label (or address at)
    to its first RET, or up to (not including) address until."""
    lines = open(path).read().split("\n")
    start = None
    for k, line in enumerate(lines):
        if line.startswith(label + ":") or line.strip().endswith("Function : " + label):
            start = k + 1
            break
    if start is None:
        sys.exit(f"label {label!r} not found in {path}")
    out = []
    k = start
    while k < len(lines):
        line = lines[k]
        if "Function :" in line and out:
            break
        m = LINE.match(line)
        if m and k + 1 < len(lines):
            hi = WORD.search(lines[k + 1])
            if hi:
                out.append((int(m.group(1), 16), m.group(2).strip(), int(hi.group(1), 16)))
                k += 2
                continue
        k += 1
    if at is not None:
        out = [i for i in out if i[0] >= at]
    if until is not None:
        return [i for i in out if i[0] < until]
    end = next((n for n, i in enumerate(out) if opcode(i[1]).startswith("RET")), None)
    return out if end is None else out[: end + 1]


def control(hi):
    """The control fields of an sm_70+ instruction's high 64 bits."""
    return {
        "stall": (hi >> 41) & 15,
        "write": (hi >> 46) & 7,
        "read": (hi >> 49) & 7,
        "wait": (hi >> 52) & 63,
    }


def opcode(text):
    parts = text.split()
    return parts[1] if parts[0].startswith("@") else parts[0]


def model(instrs, lds, mufu, trace=False):
    t = 0
    board = [0] * 6
    rcp = []
    for _, text, hi in instrs:
        c = control(hi)
        for b in range(6):
            if (c["wait"] >> b) & 1:
                t = max(t, board[b])
        op = opcode(text)
        if c["write"] < 6:
            if op.startswith("LDS"):
                lat = lds
            elif op.startswith("MUFU"):
                lat = mufu
            elif op.startswith("SHFL"):
                lat = 26
            elif op.startswith("LD"):
                lat = 400
            else:
                lat = 20
            board[c["write"]] = max(board[c["write"]], t + lat)
        if c["read"] < 6:
            board[c["read"]] = max(board[c["read"]], t + 4)
        if op.startswith("MUFU.RCP64H"):
            rcp.append(t)
        if trace:
            print(t, text)
        t += max(c["stall"], 1)
    return t, rcp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("listing")
    ap.add_argument("label")
    ap.add_argument("--at", type=lambda s: int(s, 0), default=None)
    ap.add_argument("--until", type=lambda s: int(s, 0), default=None)
    ap.add_argument("--lds", type=int, default=30)
    ap.add_argument("--mufu", type=int, default=24)
    ap.add_argument("--trace", action="store_true")
    a = ap.parse_args()
    instrs = read_listing(a.listing, a.label, a.at, a.until)
    t, rcp = model(instrs, a.lds, a.mufu, a.trace)
    print(f"{len(instrs)} instructions, {t} cycles (one warp, in order)")
    if len(rcp) > 1:
        print("cycles between MUFU.RCP64H:", [b - x for x, b in zip(rcp, rcp[1:])])


if __name__ == "__main__":
    main()
