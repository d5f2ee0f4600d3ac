"""PyTorch's CPU attention on grid C, timed as ../shared/bench/peers.py times it (one warm-up call, then the
median of 5, all cores), for machines without the GPU that peers.py needs (it imports triton and CUDA).

    python3 bench/cpu_peers.py --out results.jsonl [--threads N] [--shapes S1,S2] [--backward]

Writes peers.py's fields (kind "cpu", grid "C", impl "torch-cpu"), so `flashtile bench --grid C` output and
these rows tabulate together (bench/tabulate.py). Needs torch (the CPU wheel is enough).
"""
import argparse
import datetime
import json
import os
import platform
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True, help="JSON lines file to write")
ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads [all cores]")
ap.add_argument("--shapes", default="1024,4096", help="seqlens, comma-separated [grid C's 1024,4096]")
ap.add_argument("--backward", action="store_true",
                help="also time forward + backward through autograd; bwd_ms is that minus the forward")
args = ap.parse_args()
torch.set_num_threads(args.threads)

def median_ms(f):
    """One warm-up call, then the median of 5, in ms (peers.py's grid C timing)."""
    f()
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[2] * 1e3


rows = [dict(kind="env", impl="torch-cpu", torch=torch.__version__, cpu=platform.processor() or platform.machine(),
             threads=args.threads, date=datetime.date.today().isoformat())]
for dtype in (torch.float32, torch.bfloat16):
    for S in (int(s) for s in args.shapes.split(",")):
        for causal in (False, True):
            q = torch.randn(1, 16, S, 128, dtype=dtype)
            t = median_ms(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=causal))
            flops = 4 * 16 * S * S * 128 / (2 if causal else 1)
            row = dict(kind="cpu", grid="C", impl="torch-cpu", threads=args.threads, dtype=str(dtype).split(".")[-1],
                       B=1, S=S, H=16, Hkv=16, D=128, causal=causal, ms=t, tflops=flops / t / 1e9)
            if args.backward:
                qkv = [torch.randn(1, 16, S, 128, dtype=dtype, requires_grad=True) for _ in range(3)]
                dout = torch.randn(1, 16, S, 128, dtype=dtype)

                def fwd_bwd():
                    out = F.scaled_dot_product_attention(*qkv, is_causal=causal)
                    torch.autograd.grad(out, qkv, dout)

                bwd = median_ms(fwd_bwd) - median_ms(lambda: F.scaled_dot_product_attention(*qkv, is_causal=causal))
                row.update(bwd_ms=bwd, bwd_tflops=2.5 * flops / bwd / 1e9)
            rows.append(row)
            print(json.dumps(rows[-1]), flush=True)
with open(args.out, "w") as fh:
    fh.writelines(json.dumps(r) + "\n" for r in rows)
