#!/usr/bin/env python3
"""Reads the sm90 backward's step timeline (a FLASHTILE_BWD_TRACE build: bench/candidates/sm90-bwd-trace.patch) and
prints where a step's clocks go.

The file (FLASHTILE_BWD_TRACE_FILE) holds uint32 SM clocks [CTA][consumer][step][event], as the kernel wrote them
(bwd_kernel.cuh: kTraceCtas, kTraceSteps, kTraceEvents); event 13 is the step's tile ordinal, not a clock. For each
consumer the median over the steady steps (not a CTA's first steps, not a tile's first or last) of the clocks from
each event to the next, and of the offset between the two consumers' events in a step.

  bench/bwd_trace.py trace-4k-full.bin
"""
import argparse
import statistics
import struct

CTAS, STEPS, EVENTS = 8, 96, 14
NAMES = ["step top (Q/dO stage full)", "S^T, dP^T issued", "S^T waited", "P^T made, dV issued", "dP^T waited",
         "dS^T made, dV waited", "dS^T buffer free (step barrier)", "dS^T stored, fenced", "both dS^T (kDsBarrier)",
         "dQ, dK issued", "dQ waited", "dQ reductions issued", "dK waited, stage released"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=4, help="a CTA's first steps left out [4]")
    args = ap.parse_args()
    first = max(1, args.skip)  # a steady step is compared with the step before it
    data = open(args.trace, "rb").read()
    n = CTAS * 2 * STEPS * EVENTS
    vals = struct.unpack(f"<{n}I", data[:4 * n])

    def at(c, w, s, e):
        return vals[((c * 2 + w) * STEPS + s) * EVENTS + e]

    def d(a, b):  # clocks from a to b, modulo 2^32
        return (b - a) & 0xFFFFFFFF

    for w in range(2):
        phases = {e: [] for e in range(12)}
        steps = []
        for c in range(CTAS):
            for s in range(first, STEPS - 1):
                tile, prev, nxt = at(c, w, s, 13), at(c, w, s - 1, 13), at(c, w, s + 1, 13)
                if tile != prev or tile != nxt:
                    continue
                for e in range(12):
                    phases[e].append(d(at(c, w, s, e), at(c, w, s, e + 1)))
                steps.append(d(at(c, w, s, 0), at(c, w, s + 1, 0)))
        if not steps:
            print(f"consumer {w}: no steady steps")
            continue
        print(f"consumer {w}: {len(steps)} steady steps, median step {statistics.median(steps):.0f} clocks")
        for e in range(12):
            print(f"  {NAMES[e]:34s} -> {NAMES[e + 1]:34s} {statistics.median(phases[e]):7.0f}")
        tail = [d(at(c, w, s, 12), at(c, w, s + 1, 0)) for c in range(CTAS) for s in range(first, STEPS - 1)
                if at(c, w, s, 13) == at(c, w, s + 1, 13)]
        print(f"  {NAMES[12]:34s} -> next step top {'':19s} {statistics.median(tail):7.0f}")
    # Both consumers' events on one clock, from consumer 0's step top (the SM's clock is shared).
    def signed(x):
        return x - (1 << 32) if x >= 1 << 31 else x

    steady = [(c, s) for c in range(CTAS) for s in range(first, STEPS - 1)
              if at(c, 0, s - 1, 13) == at(c, 0, s, 13) == at(c, 0, s + 1, 13)]
    print("the step on consumer 0's clock (median clocks from its step top):")
    print(f"  {'event':34s} {'consumer 0':>10s} {'consumer 1':>10s}")
    for e in range(13):
        cols = [statistics.median(signed(d(at(c, 0, s, 0), at(c, w, s, e))) for c, s in steady) for w in range(2)]
        print(f"  {NAMES[e]:34s} {cols[0]:10.0f} {cols[1]:10.0f}")


if __name__ == "__main__":
    main()
