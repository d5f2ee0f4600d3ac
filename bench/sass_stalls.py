#!/usr/bin/env python3
"""Where a kernel's warps wait, per SASS instruction, from Nsight Compute's source page.

Reads the CSV that `ncu --import report.ncu-rep --page source --csv --print-source sass` writes (the
profilebwd and profilebwd90 stages of scripts/gpu_round.sh save it, xz-packed) and prints:
  - the share of all warp-stall samples that a stall reason (a column such as stall_long_sb) holds,
  - that reason's samples by opcode, and the instructions executed by opcode,
  - the hottest instructions for it, in program order, with their indices (to read their neighbours with
    --around).

  bench/sass_stalls.py ncu-bwd-flashtile-d128-s4096-full-sass.csv.xz --reason stall_long_sb
  bench/sass_stalls.py report-sass.csv --around 2569 --width 12
"""
import argparse
import collections
import csv
import io
import lzma
import sys

ALL = "Warp Stall Sampling (All Samples)"


def read_rows(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(io.StringIO(f.read())))
    # Line 1 names the kernel, line 2 the columns; the SASS follows.
    if len(rows) < 3 or "Source" not in rows[1]:
        sys.exit(f"{path}: not an ncu source-page CSV (expected the kernel's name, then a header with 'Source')")
    return rows[0], rows[1], rows[2:]


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    words = source.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu source page as CSV (.csv or .csv.xz)")
    ap.add_argument("--reason", default=ALL, help=f"stall column to rank by (default: '{ALL}')")
    ap.add_argument("--top", type=int, default=25, help="instructions to list (default 25)")
    ap.add_argument("--around", type=int, help="print the instructions around this index instead")
    ap.add_argument("--width", type=int, default=20, help="with --around: instructions on each side")
    args = ap.parse_args()

    kernel, header, data = read_rows(args.csv)
    if args.reason not in header:
        reasons = ", ".join(c for c in header if c.startswith("stall_") and "Not Issued" not in c)
        sys.exit(f"no column '{args.reason}'; the stall columns are: {reasons}")
    src, all_i, reason_i = header.index("Source"), header.index(ALL), header.index(args.reason)
    executed_i = header.index("Instructions Executed")
    print(next((x for x in kernel[1:] if x), kernel[0])[:200])  # line 1: "Kernel Name", then the name

    if args.around is not None:
        lo, hi = max(0, args.around - args.width), min(len(data), args.around + args.width + 1)
        for i in range(lo, hi):
            r = data[i]
            print(f"{i:6d} samples {number(r[all_i]):7.0f} {args.reason} {number(r[reason_i]):7.0f} "
                  f"executed {number(r[executed_i]):10.0f}  {' '.join(r[src].split())}")
        return

    total = sum(number(r[all_i]) for r in data)
    chosen = sum(number(r[reason_i]) for r in data)
    if total == 0 or chosen == 0:
        sys.exit("no stall samples in this report (was it taken with the SourceCounters section?)")
    print(f"{len(data)} instructions; {total:.0f} samples, {args.reason}: {chosen:.0f} ({100 * chosen / total:.1f}%)")
    by_op, executed = collections.Counter(), collections.Counter()
    for r in data:
        by_op[opcode(r[src])] += number(r[reason_i])
        executed[opcode(r[src])] += number(r[executed_i])
    print("by opcode:", ", ".join(f"{k} {100 * v / chosen:.1f}%" for k, v in by_op.most_common(12)))
    print("warp instructions executed:", ", ".join(f"{k} {v / 1e6:.1f}M" for k, v in executed.most_common(12)))
    hottest = sorted(range(len(data)), key=lambda i: -number(data[i][reason_i]))[: args.top]
    for i in sorted(hottest):
        r = data[i]
        print(f"{i:6d} {100 * number(r[reason_i]) / chosen:5.1f}%  executed {number(r[executed_i]) / 1e3:8.0f}k  "
              f"{' '.join(r[src].split())[:100]}")


if __name__ == "__main__":
    main()
