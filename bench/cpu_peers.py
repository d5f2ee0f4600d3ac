"""PyTorch's CPU attention on grid C, timed as ../shared/bench/peers.py times it (one warm-up call, then the
median of 5, all cores), for machines without the GPU that peers.py needs (it imports triton and CUDA).

    python3 bench/cpu_peers.py --out results.jsonl [--threads N] [--shapes S1,S2]

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
args = ap.parse_args()
torch.set_num_threads(args.threads)

rows = [dict(kind="env", impl="torch-cpu", torch=torch.__version__, cpu=platform.processor() or platform.machine(),
             threads=args.threads, date=datetime.date.today().isoformat())]
for dtype in (torch.float32, torch.bfloat16):
    for S in (int(s) for s in args.shapes.split(",")):
        for causal in (False, True):
            q = torch.randn(1, 16, S, 128, dtype=dtype)
            f = lambda: F.scaled_dot_product_attention(q, q, q, is_causal=causal)
            f()
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t0)
            t = sorted(ts)[2] * 1e3
            rows.append(dict(kind="cpu", grid="C", impl="torch-cpu", threads=args.threads,
                             dtype=str(dtype).split(".")[-1], B=1, S=S, H=16, Hkv=16, D=128, causal=causal, ms=t,
                             tflops=4 * 16 * S * S * 128 / (2 if causal else 1) / t / 1e9))
            print(json.dumps(rows[-1]), flush=True)
with open(args.out, "w") as fh:
    fh.writelines(json.dumps(r) + "\n" for r in rows)
