"""The cost of flashtile's Python layers on a small problem (B=1, S=128, H=16, D=128, bf16, causal), where the
kernel is short and per-call overhead shows. Each line is the median over 7 rounds of the wall time per call
of a loop of 500 calls, with a device sync after the loop (so calls overlap the GPU as they would in a model):
  torch-api   flashtile.flash_attn_func (custom op, autograd wrapper, checks, DLPack)
  neutral     flashtile.forward with out/lse given (DLPack and ctypes only)
  torch-flash PyTorch's SDPA flash backend, for scale
The C++ call is timed by `flashtile run -b 1 -s 128` in the same GPU round (gpu_round.sh overhead stage).
Needs torch and a CUDA GPU. Prints JSON lines."""
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


def main():
    q, k, v = (torch.randn(1, 128, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out, lse = torch.empty_like(q), torch.empty(1, 16, 128, device="cuda", dtype=torch.float32)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    cases = {
        "torch-api": lambda: flashtile.flash_attn_func(q, k, v, causal=True),
        "neutral": lambda: flashtile.forward(q, k, v, causal=True, out=out, lse=lse),
        "torch-flash": lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
    }
    for name, fn in cases.items():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            us = per_call_us(fn)
        print(json.dumps({"kind": "overhead", "impl": name, "B": 1, "S": 128, "H": 16, "D": 128, "causal": True,
                          "us_per_call": round(us, 2)}))


if __name__ == "__main__":
    main()
