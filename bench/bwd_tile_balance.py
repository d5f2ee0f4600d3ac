"""How evenly the sm90 backward's persistent grid shares grid A's causal tiles among its CTAs (a count).

Not a measurement: docs/perf-log.md, sm90 backward v22 and v23, says what it predicted.

Each tile (kBlockN keys of one batch and K/V head) costs its steps (blocks of kBlockM query rows that see its keys)
plus `--fixed` steps; every step costs the same. A CTA takes its next tile from the counter `lead` steps before it
ends the current one (None: when it starts it, as v15-v17 do). Printed: how far past the mean CTA's work the last
CTA ends, for three hand-outs:
    start  the next tile claimed when the current one starts (v15-v17)
    late   claimed as its last step loads (v22: kStages = 2 steps before its end)
    tail   late, and the last `--rounds` x CTAs tiles, in whole heads, numbered key block major (v23)

    python3 bench/bwd_tile_balance.py [--sms 132] [--rounds 4] [--fixed 1]

Then grid G's causal rows (GQA: a tile walks its K/V head's `group` query heads, so its steps are `group` times
an MHA tile's), with the tail counted in K/V heads as for MHA (main) and in query heads (backward v27).
"""
import argparse
import heapq
import math


def tile_steps(batch, heads, seqlen, head_dim, tail_heads=0):
    """Steps of each tile in the order the counter hands them out (causal, seqlen_q = seqlen_k)."""
    block_n = 128 if head_dim <= 128 else 64
    block_m = 128 if head_dim == 64 else 64
    n_blocks = seqlen // block_n
    steps = [(seqlen - n * block_n // block_m * block_m) // block_m for n in range(n_blocks)]
    all_heads = batch * heads
    order = [steps[n] for _ in range(all_heads - tail_heads) for n in range(n_blocks)]
    order += [steps[n] for n in range(n_blocks) for _ in range(tail_heads)]
    return order, n_blocks


def makespan(tiles, ctas, lead, fixed):
    """When the last CTA ends, with each CTA claiming its next tile `lead` steps before its current one ends."""
    queue = iter(tiles)
    claims = []  # (when the CTA asks the counter, CTA, when its current tile ends)
    for cta in range(min(ctas, len(tiles))):
        end = next(queue) + fixed
        heapq.heappush(claims, (0.0 if lead is None else max(0.0, end - lead), cta, end))
    finish = 0.0
    while claims:
        _, cta, end = heapq.heappop(claims)
        steps = next(queue, None)
        if steps is None:
            finish = max(finish, end)
            continue
        new_end = end + steps + fixed
        heapq.heappush(claims, (end if lead is None else max(end, new_end - lead), cta, new_end))
    return finish


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sms", type=int, default=132, help="CTAs of the persistent grid (default 132)")
    parser.add_argument("--rounds", type=int, default=4, help="tail rounds of the grid (v23's kTailRounds)")
    parser.add_argument("--fixed", type=float, default=1.0, help="a tile's fixed cost in steps (default 1)")
    args = parser.parse_args()
    print("grid A, causal: the last CTA's end past the mean CTA's work (start / late / tail)")
    for head_dim, heads in ((64, 32), (128, 16), (256, 8)):
        for seqlen in (512, 2048, 8192):
            batch = 16384 // seqlen
            tiles, n_blocks = tile_steps(batch, heads, seqlen, head_dim)
            tail_heads = min(batch * heads, math.ceil(args.rounds * args.sms / n_blocks))
            tail_tiles, _ = tile_steps(batch, heads, seqlen, head_dim, tail_heads)
            mean = (sum(tiles) + args.fixed * len(tiles)) / args.sms
            over = [makespan(t, args.sms, lead, args.fixed) / mean - 1
                    for t, lead in ((tiles, None), (tiles, 2), (tail_tiles, 2))]
            print(f"D={head_dim:3d} S={seqlen:5d} tiles={len(tiles)} tail_heads={tail_heads:3d}: "
                  + " / ".join(f"{100 * o:.1f}%" for o in over))
    print("grid G (32 query heads on 8, D=128), causal: the last CTA's end past the mean (tail in K/V heads / in "
          "query heads)")
    group, heads_kv = 4, 8
    for seqlen in (4096, 8192):
        batch = 2  # peers.py's grid G
        tiles, n_blocks = tile_steps(batch, heads_kv, seqlen, 128)
        mean = (group * sum(tiles) + args.fixed * len(tiles)) / args.sms
        text = []
        for rows in (n_blocks, n_blocks * group):
            tail_heads = min(batch * heads_kv, math.ceil(args.rounds * args.sms / rows))
            tail_tiles, _ = tile_steps(batch, heads_kv, seqlen, 128, tail_heads)
            end = makespan([group * t for t in tail_tiles], args.sms, 2, args.fixed)
            text.append(f"{tail_heads} K/V heads {100 * (end / mean - 1):.1f}%")
        print(f"S={seqlen:5d} tiles={len(tiles)}: " + " / ".join(text))


if __name__ == "__main__":
    main()
