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
import operator

from . import _abi
from ._abi import FlashtileError
from ._tensors import View, check_array, empty_like_library, is_torch, torch_layout

__version__ = _abi.lib.ft_version().decode()
__all__ = ["forward", "backward", "FlashtileError", "__version__"]


def _integer(name, value, bits):
    """value as a Python int that fits a C int of `bits` bits; ctypes would wrap it silently. Floats are refused
    rather than truncated, as flash-attn's int arguments refuse them."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {value!r}") from None
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise ValueError(f"{name}: {value} does not fit in {bits} bits")
    return value


def _number(name, value, accepted):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected {accepted}, got {value!r}") from None


_WINDOW = "a pair (left, right) of ints, a negative bound or None meaning unbounded on that side"


def _window(window_size):
    """window_size as two ints, -1 for an unbounded side. flash-attn 2.x takes a pair of ints, -1 unbounded (any
    negative bound is, SPEC.md); flash-attn 4 writes an unbounded side as None, its default being (None, None)."""
    try:
        left, right = (-1 if w is None else operator.index(w) for w in window_size)
    except TypeError:  # not a sequence, or a side neither an int nor None
        raise TypeError(f"window_size: expected {_WINDOW}, got {window_size!r}") from None
    except ValueError:  # not two sides
        raise ValueError(f"window_size: expected {_WINDOW}, got {window_size!r}") from None
    return _integer("window_size", left, 64), _integer("window_size", right, 64)


def _options(softmax_scale, causal, window_size, softcap):
    """ft_options' fields, in order (softmax_scale NaN: the library's default, 1/sqrt(head_dim)). softcap is a
    number, 0 for off, as in flash-attn 2.x and 4, whose signatures take no None for it."""
    scale = math.nan if softmax_scale is None else _number("softmax_scale", softmax_scale,
                                                          "a number, or None for 1/sqrt(head_dim)")
    return (scale, int(bool(causal)), *_window(window_size), _number("softcap", softcap, "a number (0: off)"))


def _backend(name):
    if name not in _abi.BACKENDS:
        raise ValueError(f"backend: {name!r} is not one of {', '.join(_abi.BACKENDS)}")
    return _abi.BACKENDS[name]


def forward(q, k, v, *, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, out=None, lse=None,
            backend="auto", num_threads=0, stream=None):
    """Attention forward. Returns (out, lse); out has q's dtype and (batch, seqlen_q, heads, head_dim_v).

    softmax_scale defaults to 1/sqrt(head_dim); causal and window_size are bottom-right aligned (flash-attn >= 2.1);
    window_size is (left, right), inclusive, a negative or None bound unbounded on that side; softcap > 0 applies
    softcap * tanh(S / softcap). out/lse may be given to write into. q, k, v: any array with __dlpack__ (numpy,
    CuPy, torch), float16, bfloat16 or (on the CPU) float32. stream is a CUDA stream handle (int) for CUDA arrays;
    torch tensors use torch's current stream when it is None.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_array(name, x)
    shape_q, shape_v = tuple(q.shape), tuple(v.shape)
    if len(shape_q) != 4 or len(shape_v) != 4:
        raise ValueError(f"q, v: expected 4 dims (batch, seqlen, heads, head_dim), got {shape_q} and {shape_v}")
    given = (out is not None, lse is not None)
    if out is None:
        out = empty_like_library(q, shape_q[:3] + shape_v[3:], "same")
    if lse is None:
        lse = empty_like_library(q, (shape_q[0], shape_q[2], shape_q[1]), "float32")
    arrays = (q, k, v, out, lse)
    options = _options(softmax_scale, causal, window_size, softcap) + (backend,
                                                                       _integer("num_threads", num_threads, 32))

    def build():
        views = [View(x, n, output=i >= 3) for i, (x, n) in enumerate(zip(arrays, _FWD_TENSORS))]  # out, lse
        p = _abi.FwdParams()
        _abi.lib.ft_fwd_params_init(p)
        p.q, p.k, p.v, p.out, p.lse = (x.tensor for x in views)
        p.options = _abi.Options(*options[:5])
        p.backend, p.num_threads = _backend(backend), options[-1]
        p.views = views  # what the pointers depend on (DLPack capsules), alive until the call returns
        return p

    p = _prepared(_FWD_CALLS, arrays, given, options, build, _stream(q, stream))
    _abi.call(_abi.lib.ft_forward, p)
    return out, lse


def backward(dout, q, k, v, out, lse, *, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
             deterministic=False, dq=None, dk=None, dv=None, backend="auto", num_threads=0, stream=None):
    """Attention backward from the forward's out and lse (which may come from elsewhere, SPEC.md). Returns
    (dq, dk, dv) shaped like q, k, v; for GQA, dk and dv are summed over each group's query heads."""
    for name, x in (("q", q), ("k", k), ("v", v)):  # read for the gradients' shapes; the rest View checks
        check_array(name, x)
    given = (dq is not None, dk is not None, dv is not None)
    dq = empty_like_library(q, tuple(q.shape), "same") if dq is None else dq
    dk = empty_like_library(q, tuple(k.shape), "same") if dk is None else dk
    dv = empty_like_library(q, tuple(v.shape), "same") if dv is None else dv
    arrays = (q, k, v, out, lse, dout, dq, dk, dv)
    options = _options(softmax_scale, causal, window_size, softcap) + (bool(deterministic), backend,
                                                                       _integer("num_threads", num_threads, 32))

    def build():
        views = [View(x, n, output=i >= 6) for i, (x, n) in enumerate(zip(arrays, _BWD_TENSORS))]  # dq, dk, dv
        p = _abi.BwdParams()
        _abi.lib.ft_bwd_params_init(p)
        p.q, p.k, p.v, p.out, p.lse, p.dout, p.dq, p.dk, p.dv = (x.tensor for x in views)
        p.options = _abi.Options(*options[:5])
        p.deterministic, p.backend, p.num_threads = int(bool(deterministic)), _backend(backend), options[-1]
        p.views = views  # what the pointers depend on (DLPack capsules), alive until the call returns
        return p

    p = _prepared(_BWD_CALLS, arrays, given, options, build, _stream(q, stream))
    _abi.call(_abi.lib.ft_backward, p)
    return dq, dk, dv


_FWD_TENSORS = ("q", "k", "v", "out", "lse")
_BWD_TENSORS = ("q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv")
_FWD_CALLS = _abi.PreparedCalls(_abi.FwdParams, _FWD_TENSORS)
_BWD_CALLS = _abi.PreparedCalls(_abi.BwdParams, _BWD_TENSORS)


def _prepared(calls, arrays, given, options, build, stream):
    """The call's parameter struct: from `calls` by shape for torch tensors (the inputs' dtypes, devices, shapes
    and strides, those of the outputs the caller gave, which `given` flags, and the options make the key; outputs
    allocated here follow from the inputs), built afresh for other arrays (a DLPack view must stay alive)."""
    if not all(map(is_torch, arrays)):
        p = build()
        p.stream = stream
        return p
    n_in = len(arrays) - len(given)
    key = (tuple(torch_layout(t) for t in arrays[:n_in]),
           tuple(torch_layout(t) if g else None for t, g in zip(arrays[n_in:], given)), given, options)
    return calls.params(key, build, arrays, stream)


def _stream(ref, stream):
    if stream is not None:
        return int(stream)
    if is_torch(ref) and ref.is_cuda:
        import torch
        return torch.cuda.current_stream(ref.get_device()).cuda_stream
    return None


if importlib.util.find_spec("torch") is not None:  # the flash-attn API needs torch; the rest works without it
    from .torch_api import flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func  # noqa: F401
    __all__ += ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func"]
