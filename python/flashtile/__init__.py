"""flashtile: exact attention without the S x S matrix, on CPU and CUDA.

Framework-neutral layer (any DLPack array: numpy on the CPU, torch, CuPy):
    out, lse = flashtile.forward(q, k, v, causal=True)
    dq, dk, dv = flashtile.backward(dout, q, k, v, out, lse, causal=True)
Shapes are flash-attn's: q (batch, seqlen_q, heads, head_dim), k/v (batch, seqlen_k, heads_kv, head_dim),
lse (batch, heads, seqlen_q) float32. The PyTorch API mirroring flash-attn 2.x (flash_attn_func and the packed
variants, with autograd and torch.compile support) is imported from flashtile.torch_api when torch is present.
"""
import importlib.util
import math

from . import _abi
from ._abi import FlashtileError
from ._tensors import View, empty_like_library

__version__ = _abi.lib.ft_version().decode()
__all__ = ["forward", "backward", "FlashtileError", "__version__"]


def _options(opts, softmax_scale, causal, window_size, softcap):
    opts.softmax_scale = math.nan if softmax_scale is None else float(softmax_scale)
    opts.causal = int(bool(causal))
    opts.window_left, opts.window_right = (int(w) for w in window_size)
    opts.softcap = float(softcap)


def _backend(name):
    if name not in _abi.BACKENDS:
        raise ValueError(f"backend: {name!r} is not one of {', '.join(_abi.BACKENDS)}")
    return _abi.BACKENDS[name]


def forward(q, k, v, *, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, out=None, lse=None,
            backend="auto", num_threads=0, stream=None):
    """Attention forward. Returns (out, lse); out has q's dtype and (batch, seqlen_q, heads, head_dim_v).

    softmax_scale defaults to 1/sqrt(head_dim); causal and window_size are bottom-right aligned (flash-attn >= 2.1);
    softcap > 0 applies softcap * tanh(S / softcap). out/lse may be given to write into. stream is a CUDA stream
    handle (int) for CUDA arrays; torch tensors use torch's current stream when it is None.
    """
    shape_q, shape_v = tuple(q.shape), tuple(v.shape)
    if len(shape_q) != 4 or len(shape_v) != 4:
        raise ValueError(f"q, v: expected 4 dims (batch, seqlen, heads, head_dim), got {shape_q} and {shape_v}")
    if out is None:
        out = empty_like_library(q, shape_q[:3] + shape_v[3:], "same")
    if lse is None:
        lse = empty_like_library(q, (shape_q[0], shape_q[2], shape_q[1]), "float32")
    views = [View(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"), (out, "out"), (lse, "lse"))]
    p = _abi.FwdParams()
    _abi.lib.ft_fwd_params_init(p)
    p.q, p.k, p.v, p.out, p.lse = (x.tensor for x in views)
    _options(p.options, softmax_scale, causal, window_size, softcap)
    p.backend, p.num_threads = _backend(backend), int(num_threads)
    p.stream = _stream(q, stream)
    _abi.call(_abi.lib.ft_forward, p)
    return out, lse


def backward(dout, q, k, v, out, lse, *, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
             deterministic=False, dq=None, dk=None, dv=None, backend="auto", num_threads=0, stream=None):
    """Attention backward from the forward's out and lse (which may come from elsewhere, SPEC.md). Returns
    (dq, dk, dv) shaped like q, k, v; for GQA, dk and dv are summed over each group's query heads."""
    dq = empty_like_library(q, tuple(q.shape), "same") if dq is None else dq
    dk = empty_like_library(q, tuple(k.shape), "same") if dk is None else dk
    dv = empty_like_library(q, tuple(v.shape), "same") if dv is None else dv
    named = ((q, "q"), (k, "k"), (v, "v"), (out, "out"), (lse, "lse"), (dout, "dout"), (dq, "dq"), (dk, "dk"),
             (dv, "dv"))
    views = [View(x, n) for x, n in named]
    p = _abi.BwdParams()
    _abi.lib.ft_bwd_params_init(p)
    p.q, p.k, p.v, p.out, p.lse, p.dout, p.dq, p.dk, p.dv = (x.tensor for x in views)
    _options(p.options, softmax_scale, causal, window_size, softcap)
    p.deterministic, p.backend, p.num_threads = int(bool(deterministic)), _backend(backend), int(num_threads)
    p.stream = _stream(q, stream)
    _abi.call(_abi.lib.ft_backward, p)
    return dq, dk, dv


def _stream(ref, stream):
    if stream is not None:
        return int(stream)
    if type(ref).__module__.startswith("torch") and ref.is_cuda:
        import torch
        return torch.cuda.current_stream(ref.device).cuda_stream
    return None


if importlib.util.find_spec("torch") is not None:  # the flash-attn API needs torch; the rest works without it
    from .torch_api import flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func  # noqa: F401
    __all__ += ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func"]
