"""The cost of flashtile's Python layers per call, where the kernel is short and per-call overhead shows.

Part 1, a small problem (B=1, S=128, H=16, D=128, bf16, causal): each line is the median over 7 rounds of the wall
time per call of a loop of 500 calls, with a device sync after the loop (so calls overlap the GPU as they would in
a model):
  torch-api       flashtile.flash_attn_func without gradients (checks, the prepared C struct, the C call)
  torch-api-grad  the same with inputs that require gradients (autograd.Function): what peers.py times
  neutral         flashtile.forward with out/lse given (the framework-neutral layer and the C call)
  torch-flash     PyTorch's SDPA flash backend, for scale
  torch-cudnn     PyTorch's SDPA cuDNN backend, for scale
Part 2, grid A's shortest rows (B=32, S=512, D=128 and 256, bf16, causal): whether a forward called the way
peers.py calls it (inputs requiring gradients, triton's do_bench with its L2 flush between calls) waits for the
host: the host's time per call (`host_us`: a loop of 100 calls, no sync), the GPU's (`gpu_us`: CUDA events around
50 calls queued behind a sleep kernel, so the GPU runs them back to back) and do_bench's median (`do_bench_us`), for flashtile and PyTorch's cuDNN.
The C++ call is timed by `flashtile run -b 1 -s 128` in the same GPU round (gpu_round.sh overhead stage).
Needs torch and a CUDA GPU (part 2 also triton). Prints JSON lines."""
import json
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashtile


def per_call_us(fn, calls=500, rounds=7):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def sdpa(backend):
    def f(q, k, v, causal=False):  # BSHD like flash_attn_func
        with sdpa_kernel([backend]):
            o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                 v.transpose(1, 2), is_causal=causal)
        return o.transpose(1, 2)
    return f


def small_problem():
    q, k, v = (torch.randn(1, 128, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    out, lse = torch.empty_like(q), torch.empty(1, 16, 128, device="cuda", dtype=torch.float32)
    cases = {
        "torch-api": lambda: flashtile.flash_attn_func(q, k, v, causal=True),
        "torch-api-grad": lambda: flashtile.flash_attn_func(qg, kg, vg, causal=True),
        "neutral": lambda: flashtile.forward(q, k, v, causal=True, out=out, lse=lse),
        "torch-flash": lambda: sdpa(SDPBackend.FLASH_ATTENTION)(q, k, v, causal=True),
        "torch-cudnn": lambda: sdpa(SDPBackend.CUDNN_ATTENTION)(q, k, v, causal=True),
    }
    for name, fn in cases.items():
        print(json.dumps({"kind": "overhead", "impl": name, "B": 1, "S": 128, "H": 16, "D": 128, "causal": True,
                          "us_per_call": round(per_call_us(fn), 2)}))


def short_rows():
    from triton.testing import do_bench
    for d in (128, 256):
        b, s, h = 32, 512, 2048 // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        for name, f in (("flashtile", flashtile.flash_attn_func), ("cudnn", sdpa(SDPBackend.CUDNN_ATTENTION))):
            run = lambda: f(q, k, v, causal=True)
            run()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(100):
                run()
            host_us = (time.perf_counter() - start) / 100 * 1e6
            torch.cuda.synchronize()
            events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            torch.cuda._sleep(100_000_000)  # ~50 ms of GPU: the host queues the 50 calls meanwhile, so no gaps
            events[0].record()
            for _ in range(50):
                run()
            events[1].record()
            torch.cuda.synchronize()
            gpu_us = events[0].elapsed_time(events[1]) / 50 * 1e3
            print(json.dumps({"kind": "overhead-row", "impl": name, "B": b, "S": s, "H": h, "D": d, "causal": True,
                              "host_us": round(host_us, 1), "gpu_us": round(gpu_us, 1),
                              "do_bench_us": round(do_bench(run, warmup=50, rep=200, return_mode="median") * 1e3, 1)}))


if __name__ == "__main__":
    small_problem()
    short_rows()
