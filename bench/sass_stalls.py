#!/usr/bin/env python3
"""Where a kernel's warps wait, per SASS instruction, from Nsight Compute's source page.

Reads the CSV that `ncu --import report.ncu-rep --page source --csv --print-source sass` writes (the
profilebwd and profilebwd90 stages of scripts/gpu_round.sh save it, xz-packed) and prints:
  - the share of all warp-stall samples that a stall reason (a column such as stall_long_sb) holds,
  - that reason's samples by opcode, and the instructions executed by opcode,
  - the hottest instructions for it, in program order, with their indices (to read their neighbours with
    --around);
  - with --regions, the samples by how often an instruction ran: code that runs once a loop step (the most
    executed), once a tile, once a kernel, each count's runs of neighbouring instructions apart (a tile's
    prologue and epilogue), so a per-tile cost shows beside the per-step one;
  - with --work, the instructions that tell a kernel's schedule, by their whole opcode and how often they ran:
    HGMMA by shape and operands (SS: both from shared memory, RS: A from registers; tnspA / tnspB: transposed
    views), MUFU, the TMA, bulk and global reductions and loads, the barriers, the shared-memory traffic. Set
    beside another kernel's for the same problem it tells who does which products, how often, and how dQ leaves
    (cuDNN's kernels included: their SASS is readable though their source is not).

  bench/sass_stalls.py ncu-bwd-flashtile-d128-s4096-full-sass.csv.xz --reason stall_long_sb
  bench/sass_stalls.py report-sass.csv --around 2569 --width 12
  bench/sass_stalls.py ncu-bwd-sm90-s512-sass.csv.xz --regions
  bench/sass_stalls.py ncu-bwd-cudnn-d256-sass.csv.xz --work
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


# The opcodes --work lists, by their first word.
WORK_OPS = ("HGMMA", "MUFU", "UTMALDG", "UTMASTG", "UTMAREDG", "UBLKCP", "UBLKRED", "REDG", "ATOMG", "LDS", "STS",
            "LDSM", "STSM", "SYNCS", "BAR", "WARPGROUP")


def print_work(data, src, executed_i):
    """Warp instructions executed of the schedule's opcodes, by whole opcode; an HGMMA also by where its A
    operand comes from (registers: RS) and which operands are transposed views."""
    work = collections.Counter()
    for r in data:
        words = r[src].split()
        if not words:
            continue
        full = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        if full.split(".")[0] not in WORK_OPS:
            continue
        if full.startswith("HGMMA"):
            operands = [o.strip() for o in " ".join(words[words.index(full) + 1 :]).split(",")]
            a = operands[1] if len(operands) > 1 else ""  # after the accumulator: registers, or a descriptor
            full += " RS" if a.startswith("R") else " SS"
            full += "".join(f" {t}" for t in ("tnspA", "tnspB") if t in r[src])
        work[full] += number(r[executed_i])
    for op, count in sorted(work.items(), key=lambda kv: -kv[1]):
        print(f"  {op:58s} {count / 1e6:9.3f} M")


def print_regions(data, src, all_i, reason_i, executed_i, reason, gap=5):
    """Samples by execution count, and for each of the largest counts its runs of instructions (neighbours
    closer than `gap` join one run): the loop body, a tile's prologue and epilogue."""
    total = sum(number(r[all_i]) for r in data) or 1.0
    by_count, instructions = collections.Counter(), collections.Counter()
    for r in data:
        by_count[number(r[executed_i])] += number(r[all_i])
        instructions[number(r[executed_i])] += 1
    for count, samples in by_count.most_common(6):
        print(f"executed {count:10.0f}: {instructions[count]:5d} instructions, {100 * samples / total:5.1f}% of samples")
        where = [i for i, r in enumerate(data) if number(r[executed_i]) == count]
        runs, first = [], where[0]
        for prev, i in zip(where, where[1:] + [None]):
            if i is None or i - prev >= gap:
                runs.append((first, prev))
                first = i
        for lo, hi in runs:
            part = data[lo : hi + 1]
            share = sum(number(r[all_i]) for r in part) / total
            if share >= 0.005:
                print(f"    {lo:6d}-{hi:<6d} {100 * share:5.1f}% ({reason}: "
                      f"{100 * sum(number(r[reason_i]) for r in part) / total:.1f}%)  "
                      f"first: {' '.join(part[0][src].split())[:60]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu source page as CSV (.csv or .csv.xz)")
    ap.add_argument("--reason", default=ALL, help=f"stall column to rank by (default: '{ALL}')")
    ap.add_argument("--top", type=int, default=25, help="instructions to list (default 25)")
    ap.add_argument("--around", type=int, help="print the instructions around this index instead")
    ap.add_argument("--width", type=int, default=20, help="with --around: instructions on each side")
    ap.add_argument("--regions", action="store_true", help="samples by execution count and region instead")
    ap.add_argument("--work", action="store_true", help="the schedule's instructions by whole opcode instead")
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

    if args.regions:
        print_regions(data, src, all_i, reason_i, executed_i, args.reason)
        return
    if args.work:
        print_work(data, src, executed_i)
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
