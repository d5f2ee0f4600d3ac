"""Which kernels the peers launch, with their whole names (cuDNN's generated names carry the tile shape and warp
layout; Nsight Compute's table in gpu_round.sh's bwdparts stage cuts them at 60 characters) and each kernel's
GPU time, for one forward and backward through PyTorch's SDPA (flash = FlashAttention-2, cudnn = cuDNN).

    python3 bench/peer_kernels.py [--shapes D:S:mask,...] [--dtype bf16|fp16]

Shapes are grid A's (batch = 16384 / S, heads = 2048 / D). Needs a CUDA GPU and PyTorch; prints a block per
shape and backend: kernel name, calls, total microseconds over --iters forward + backward passes, per call.
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--shapes", default="64:512:full,128:512:full,128:512:causal,128:2048:full,256:512:full",
                help="D:S:mask (mask: full or causal), comma-separated")
ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
ap.add_argument("--iters", type=int, default=3, help="forward + backward passes profiled (after one warm-up)")
args = ap.parse_args()
dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}

for spec in args.shapes.split(","):
    d, s, mask = spec.split(":")
    d, s, causal = int(d), int(s), mask == "causal"
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    do = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
    for name, backend in backends.items():
        def step():
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            o.backward(do)
        try:
            step()  # warm-up: cuDNN builds its graph on the first call
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.iters):
                    step()
                torch.cuda.synchronize()
        except RuntimeError as err:  # a backend that does not take the shape says so and the rest go on
            print(f"== D={d} S={s} {mask} {args.dtype} {name}: not run ({str(err).splitlines()[0]})")
            continue
        print(f"== D={d} S={s} {mask} {args.dtype} B={b} H={h} {name}")
        gpu_us = lambda e: getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        events = [e for e in prof.key_averages() if gpu_us(e) > 0]
        for e in sorted(events, key=lambda e: -gpu_us(e)):
            print(f"  {gpu_us(e):10.1f} us  x{e.count:<3d} {gpu_us(e) / max(e.count, 1):9.1f} us/call  {e.key}")
