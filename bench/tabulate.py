#!/usr/bin/env python3
"""Joins a flashtile result file with the peers.py file of the same run and prints the markdown table that
sits beside them in bench/results/: TFLOP/s and the ratios that count (flashtile / peer, same run).

    python3 bench/tabulate.py bench/results/<run>/flashtile.jsonl bench/results/<run>/peers.jsonl
"""
import json
import math
import sys


def load(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def gpu_table(ours, peers):
    peer = {(r["impl"], r["D"], r["S"], r["causal"]): r for r in peers if r.get("kind") == "attn" and "error" not in r}
    lines = ["| dtype | D | S | mask | flashtile fwd | FA2 (torch flash) fwd | cuDNN fwd | vs FA2 | vs cuDNN |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratios = {"flash": [], "cudnn": []}
    for r in ours:
        if r.get("kind") != "attn" or "fwd_tflops" not in r:
            continue
        key = (r["D"], r["S"], r["causal"])
        fa2, cud = peer.get(("flash",) + key), peer.get(("cudnn",) + key)
        if not fa2 or not cud:
            continue
        rf, rc = r["fwd_tflops"] / fa2["fwd_tflops"], r["fwd_tflops"] / cud["fwd_tflops"]
        ratios["flash"].append(rf)
        ratios["cudnn"].append(rc)
        lines.append(f'| {r["dtype"]} | {r["D"]} | {r["S"]} | {"causal" if r["causal"] else "full"} | '
                     f'{r["fwd_tflops"]:.0f} | {fa2["fwd_tflops"]:.0f} | {cud["fwd_tflops"]:.0f} | {rf:.2f}x | {rc:.2f}x |')
    lines.append(f'\nGeometric mean: {geomean(ratios["flash"]):.3f}x FA2 (min {min(ratios["flash"]):.2f}x), '
                 f'{geomean(ratios["cudnn"]):.3f}x cuDNN. Peers are bf16 (peers.py); fp16 rows compare with them too.')
    return lines


def cpu_table(ours, peers):
    torch = {(r["dtype"], r["S"], r["causal"]): r for r in peers if r.get("kind") == "cpu"}
    fa1 = {(r["dtype"], r["S"], r["causal"]): r for r in ours if r.get("impl") == "flashtile-cpu-fa1"}
    lines = ["| dtype | S | mask | flashtile FA2 | flashtile FA1 | torch CPU SDPA | FA2 / torch | FA2 / FA1 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in ours:
        if r.get("impl") != "flashtile-cpu":
            continue
        key = (r["dtype"], r["S"], r["causal"])
        t, f1 = torch.get(key), fa1.get(key)
        lines.append(f'| {r["dtype"]} | {r["S"]} | {"causal" if r["causal"] else "full"} | {r["tflops"]:.3f} | '
                     f'{f1["tflops"]:.3f} | {t["tflops"]:.3f} | {r["tflops"] / t["tflops"]:.2f}x | '
                     f'{r["tflops"] / f1["tflops"]:.2f}x |')
    return lines


def main():
    ours, peers = load(sys.argv[1]), load(sys.argv[2])
    env = [r for r in ours + peers if r.get("kind") in ("env", "gemm_bf16", "copy")]
    print("Measured in one call on the GPU machine; TFLOP/s by the headline count (4*B*H*S*S*D, halved for causal).\n")
    for r in env:
        print("- " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    print()
    kinds = {r.get("kind") for r in ours}
    print("\n".join(gpu_table(ours, peers) if "attn" in kinds else cpu_table(ours, peers)))


if __name__ == "__main__":
    main()
