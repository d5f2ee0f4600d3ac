#!/usr/bin/env python3
"""Per-shape ratios of two `flashtile bench` files over the same shapes: a candidate library against the base,
run one after the other in one call on the GPU machine (`scripts/gpu_round.sh ab`). Prints a markdown table of
forward TFLOP/s (and backward, where both files have it), the candidate / base ratio, and geometric means by
head dim and over all shapes. Rows the oracle did not verify are marked.

    python3 bench/ab_table.py ab-base.jsonl ab-<name>.jsonl
"""
import json
import math
import sys


def load(path):
    with open(path) as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return {(r["dtype"], r["D"], r["S"], r["B"], r["H"], r["Hkv"], r["causal"]): r
            for r in rows if r.get("kind") == "attn"}


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    base, cand = load(argv[1]), load(argv[2])
    shared = [k for k in base if k in cand]
    if not shared:
        sys.exit(f"ab_table: {argv[1]} and {argv[2]} have no shape in common")
    # A field is shown where any shape has it in both files (a backend may time the backward only at some head
    # dims); a row without it gets dashes and stays out of that field's means.
    fields = [f for f in ("fwd_tflops", "bwd_tflops") if any(f in base[k] and f in cand[k] for k in shared)]
    head = "| dtype | D | S | mask |" + "".join(f" base {f[:3]} | cand {f[:3]} | ratio |" for f in fields)
    print(head)
    print("|" + "---|" * head.count(" |"))
    ratios = {f: {} for f in fields}
    for k in shared:
        dtype, d, s, _, _, _, causal = k
        cells = ""
        for f in fields:
            if f not in base[k] or f not in cand[k]:
                cells += " - | - | - |"
                continue
            r = cand[k][f] / base[k][f]
            ratios[f].setdefault(d, []).append(r)
            cells += f" {base[k][f]:.1f} | {cand[k][f]:.1f} | {r:.3f} |"
        unverified = "" if base[k].get("verified", True) and cand[k].get("verified", True) else " (NOT VERIFIED)"
        print(f"| {dtype} | {d} | {s} | {'causal' if causal else 'full'}{unverified} |{cells}")
    print()
    for f in fields:
        by_d = ", ".join(f"D={d} {geomean(rs):.3f}" for d, rs in sorted(ratios[f].items()))
        every = [r for rs in ratios[f].values() for r in rs]
        print(f"- {f}: candidate / base geometric mean {geomean(every):.3f} (min {min(every):.3f}, "
              f"max {max(every):.3f}; {by_d}) over {len(every)} shapes")


if __name__ == "__main__":
    main(sys.argv)
