#!/usr/bin/env python3
"""Joins a flashtile result file with the peers.py file of the same run and prints the markdown table that
sits beside them in bench/results/: TFLOP/s and the ratios that count (flashtile / peer, same run).

    python3 bench/tabulate.py bench/results/<run>/flashtile.jsonl bench/results/<run>/peers.jsonl

A peers.py file run with `--candidate flashtile:...` holds both sides: pass it twice.
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
    """Forward and, where flashtile recorded one, backward TFLOP/s beside PyTorch's flash (FA2) and cuDNN."""
    def key(r):  # grids share shapes (G's D=128 S=4096 causal is A's with GQA), so the grid is part of the key
        return r["grid"], r["D"], r["S"], r["H"], r["Hkv"], r["causal"]

    peer = {(r["impl"],) + key(r): r for r in peers if r.get("kind") == "attn" and "error" not in r}
    with_bwd = any("bwd_tflops" in r for r in ours)
    head = "| grid | dtype | D | S | H/Hkv | mask | flashtile fwd | FA2 fwd | cuDNN fwd | fwd vs FA2 | fwd vs cuDNN |"
    if with_bwd:
        head += " flashtile bwd | FA2 bwd | cuDNN bwd | bwd vs FA2 | bwd vs cuDNN |"
    lines = [head, "|" + "---|" * head.count(" | ")]
    ratios = {name: [] for name in ("fwd flash", "fwd cudnn", "bwd flash", "bwd cudnn")}
    for r in ours:
        if r.get("kind") != "attn" or not r.get("impl", "").startswith("flashtile") or "fwd_tflops" not in r:
            continue
        fa2, cud = peer.get(("flash",) + key(r)), peer.get(("cudnn",) + key(r))
        if not fa2 or not cud:
            continue
        row = (f'| {r["grid"]} | {r["dtype"]} | {r["D"]} | {r["S"]} | {r["H"]}/{r["Hkv"]} | '
               f'{"causal" if r["causal"] else "full"} |')
        for pass_ in ("fwd", "bwd") if with_bwd else ("fwd",):
            ours_t = r.get(f"{pass_}_tflops")
            if ours_t is None:
                row += f' {r.get(f"{pass_}_error", "not run")[:40]} | {fa2[f"{pass_}_tflops"]:.0f} | ' \
                       f'{cud[f"{pass_}_tflops"]:.0f} | - | - |'
                continue
            rf, rc = ours_t / fa2[f"{pass_}_tflops"], ours_t / cud[f"{pass_}_tflops"]
            ratios[f"{pass_} flash"].append(rf)
            ratios[f"{pass_} cudnn"].append(rc)
            row += f' {ours_t:.0f} | {fa2[f"{pass_}_tflops"]:.0f} | {cud[f"{pass_}_tflops"]:.0f} | {rf:.2f}x | {rc:.2f}x |'
        lines.append(row)
    lines.append("")
    for pass_ in ("fwd", "bwd"):
        fl, cu = ratios[f"{pass_} flash"], ratios[f"{pass_} cudnn"]
        if fl:
            lines.append(f"- {pass_}: geometric mean {geomean(fl):.3f}x FA2 (min {min(fl):.2f}x, max {max(fl):.2f}x), "
                         f"{geomean(cu):.3f}x cuDNN (min {min(cu):.2f}x), over {len(fl)} rows")
    ours_dtypes = sorted({r["dtype"] for r in ours if r.get("kind") == "attn" and "dtype" in r})
    peer_dtypes = sorted({r["dtype"] for r in peers if r.get("kind") == "attn" and "dtype" in r and
                          not r.get("impl", "").startswith("flashtile")})
    if peer_dtypes != ours_dtypes:  # e.g. a flashtile fp16 file beside a peers.py run in bf16
        lines.append(f"\nThe peers ran in {', '.join(peer_dtypes)}, flashtile in {', '.join(ours_dtypes)}.")
    return lines


def cpu_table(ours, peers):
    """Forward (and, where both sides timed one, backward) TFLOP/s beside PyTorch's CPU attention; dtype names
    as either side writes them (bf16 / bfloat16)."""
    def key(r):
        return {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(r["dtype"], r["dtype"]), r["S"], r["causal"]

    torch = {key(r): r for r in peers if r.get("kind") == "cpu" and r.get("impl") == "torch-cpu"}
    fa1 = {key(r): r for r in ours if r.get("impl") == "flashtile-cpu-fa1"}
    with_bwd = any("bwd_tflops" in r for r in ours) and any("bwd_tflops" in r for r in torch.values())
    head = "| dtype | S | mask | flashtile FA2 | flashtile FA1 | torch CPU SDPA | FA2 / torch | FA2 / FA1 |"
    lines = [head + (" flashtile bwd | torch bwd | bwd / torch |" if with_bwd else ""),
             "|---" * (head.count("|") - 1 + (3 if with_bwd else 0)) + "|"]

    def cell(x, fmt):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)

    for r in ours:
        if r.get("impl") != "flashtile-cpu":
            continue
        t, f1 = torch.get(key(r)), fa1.get(key(r))
        t_fwd = t["tflops"] if t else None
        f1_fwd = f1["tflops"] if f1 else None
        line = (f'| {r["dtype"]} | {r["S"]} | {"causal" if r["causal"] else "full"} | {r["tflops"]:.3f} | '
                f'{cell(f1_fwd, ".3f")} | {cell(t_fwd, ".3f")} | {cell(t_fwd and r["tflops"] / t_fwd, ".2f")}x | '
                f'{cell(f1_fwd and r["tflops"] / f1_fwd, ".2f")}x |')
        if with_bwd:
            ours_bwd, t_bwd = r.get("bwd_tflops"), t.get("bwd_tflops") if t else None
            ratio = ours_bwd / t_bwd if ours_bwd and t_bwd else None
            line += f' {cell(ours_bwd, ".3f")} | {cell(t_bwd, ".3f")} | {cell(ratio, ".2f")}x |'
        lines.append(line)
    return lines


def main():
    wants_help = len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help")
    if len(sys.argv) != 3 or wants_help:
        print(__doc__.strip(), file=sys.stdout if wants_help else sys.stderr)
        sys.exit(0 if wants_help else 2)
    ours, peers = load(sys.argv[1]), load(sys.argv[2])
    env = [r for r in ours + peers if r.get("kind") in ("env", "gemm_bf16", "copy")]
    print("Measured in one run (on the GPU machine: one call); TFLOP/s by the headline count (4*B*H*S*S*D, halved for "
          "causal; backward 2.5x).\n")
    for r in env:
        print("- " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    print()
    kinds = {r.get("kind") for r in ours}
    print("\n".join(gpu_table(ours, peers) if "attn" in kinds else cpu_table(ours, peers)))


if __name__ == "__main__":
    main()
