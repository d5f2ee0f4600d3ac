#!/usr/bin/env python3
"""Does a forward run slower sustained than in a short burst because the GPU clocks down, and which kernels does
that hit? For each implementation, one problem (bf16, full attention, q = k = v):

  1. the GPU idles 1.5 s;
  2. burst: 10 calls back to back, timed with CUDA events (what a short benchmark sees);
  3. sustained: back-to-back calls for --seconds, timed the same way (what peers.py's do_bench sees);

while nvidia-smi samples the SM clock and the board power every 50 ms. One JSON line per implementation
(kind "clock": burst and sustained TFLOP/s, the median SM clock and power over the sustained phase, and the
GPU's power limit), and a table. flashtile runs through its Python API with an explicit backend.

    FLASHTILE_LIBRARY=build-device/libflashtile.so.0.1.0 PYTHONPATH=python \\
        python3 bench/clock_probe.py --batch 4 --seqlen 4096 --head-dim 256 --out clocks.jsonl
"""
import argparse
import datetime
import json
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--seqlen", type=int, default=4096)
ap.add_argument("--head-dim", type=int, default=256)
ap.add_argument("--heads", type=int, default=0, help="0: 2048 / head dim, as grid A")
ap.add_argument("--seconds", type=float, default=2.0, help="length of the sustained phase")
ap.add_argument("--out", default="clocks.jsonl")
args = ap.parse_args()
B, S, D = args.batch, args.seqlen, args.head_dim
H = args.heads or 2048 // D
flops = 4 * B * H * S * S * D

q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)  # (batch, seqlen, heads, head_dim)
qt = q.transpose(1, 2)  # (batch, heads, seqlen, head_dim) views for PyTorch's SDPA


def sdpa(backend):
    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, qt, qt)
    return run


impls = {}
try:
    import flashtile
    out = torch.empty_like(q)
    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    for family in ("sm80", "sm90"):
        impls["flashtile-" + family] = (
            lambda family=family: flashtile.forward(q, q, q, out=out, lse=lse, backend="cuda-" + family))
except Exception as e:  # noqa: BLE001 - reported, and the peers still run
    print(f"flashtile not importable: {e}")
impls["flash"] = sdpa(SDPBackend.FLASH_ATTENTION)
impls["cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)


def timed(f, calls):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        f()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,power.limit",
                        "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
phases = []
for name, f in impls.items():
    try:
        f()
        torch.cuda.synchronize()
        time.sleep(1.5)
        burst_ms = timed(f, 10)
        calls = max(10, int(args.seconds * 1e3 / burst_ms))
        t0 = time.time()
        sustained_ms = timed(f, calls)
        phases.append((name, t0, time.time(), burst_ms, sustained_ms, calls))
    except Exception as e:  # noqa: BLE001
        print(f"{name}: {type(e).__name__}: {e}")
time.sleep(0.2)
smi.terminate()
samples = []
for line in smi.communicate()[0].splitlines():
    try:
        stamp, clock, power, limit = (x.strip() for x in line.split(","))
        t = datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((t, float(clock), float(power), float(limit)))
    except ValueError:
        continue

rows = []
print(f"\nB={B} H={H} S={S} D={D} bf16 full, {args.seconds} s sustained\n")
print("| impl | burst TFLOP/s | sustained TFLOP/s | sustained / burst | SM MHz | power W | limit W |")
print("|---|---|---|---|---|---|---|")
for name, t0, t1, burst_ms, sustained_ms, calls in phases:
    inside = [s for s in samples if t0 + 0.2 <= s[0] <= t1]  # past the first 200 ms of the phase
    clock = statistics.median(s[1] for s in inside) if inside else float("nan")
    power = statistics.median(s[2] for s in inside) if inside else float("nan")
    limit = inside[0][3] if inside else float("nan")
    row = dict(kind="clock", impl=name, dtype="bfloat16", B=B, S=S, H=H, D=D, causal=False,
               burst_ms=burst_ms, burst_tflops=flops / burst_ms / 1e9, sustained_ms=sustained_ms,
               sustained_tflops=flops / sustained_ms / 1e9, calls=calls, sm_mhz=clock, power_w=power,
               power_limit_w=limit, samples=len(inside))
    rows.append(row)
    print(f"| {name} | {row['burst_tflops']:.0f} | {row['sustained_tflops']:.0f} | "
          f"{sustained_ms and burst_ms / sustained_ms:.3f} | {clock:.0f} | {power:.0f} | {limit:.0f} |")
with open(args.out, "w") as fh:
    fh.writelines(json.dumps(r) + "\n" for r in rows)
