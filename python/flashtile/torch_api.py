"""flash-attn 2.x's Python API over flashtile, for PyTorch: same names, arguments, defaults, shapes and returns.

The two operations are registered with torch.library (flashtile::fwd, flashtile::bwd) with fake (meta)
implementations, so torch.compile(fullgraph=True) traces through them, and autograd is attached to the forward
op. Eager calls skip the op dispatcher (a torch.autograd.Function, or the plain call without gradients). Calls
run on the current CUDA stream of the tensors' device.
"""
import math

import torch

from . import _number, _window
from . import backward as _backward
from . import forward as _forward

# The library sets the tensors' device itself (a device guard in C++), allocates outputs with torch on q's device
# and runs on that device's current stream, so no Python-side device guard is needed (tensors on cuda:1 work).


def _readable(t):
    """t, or a compact copy of it where the CUDA kernels could not read it in place: they load rows 16 bytes at a
    time, so a CUDA tensor's data pointer must be 16-byte aligned and its strides multiples of 8 elements (a view
    that starts mid-row, or a sequence stride that is not a multiple of 8, gets copied). The C library refuses
    such tensors; flash-attn's users pass them without thinking (slices of a fused projection)."""
    if t.is_cuda and (t.data_ptr() % 16 or any(s % 8 and n > 1 for n, s in zip(t.shape[:-1], t.stride()[:-1]))):
        return t.clone(memory_format=torch.contiguous_format)
    return t


def _run_forward(q, k, v, softmax_scale, causal, window_left, window_right, softcap):
    return _forward(_readable(q), _readable(k), _readable(v), softmax_scale=softmax_scale, causal=causal,
                    window_size=(window_left, window_right), softcap=softcap)


def _run_backward(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap, deterministic):
    dout = _readable(dout if dout.stride(-1) == 1 else dout.contiguous())  # autograd's dO may be any view
    return _backward(dout, _readable(q), _readable(k), _readable(v), out, lse, softmax_scale=softmax_scale,
                     causal=causal, window_size=(window_left, window_right), softcap=softcap,
                     deterministic=deterministic)


# Under torch.compile the calls go through two custom ops with fake implementations, so fullgraph tracing needs
# no graph break.
@torch.library.custom_op("flashtile::fwd", mutates_args=())
def _fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool, window_left: int,
         window_right: int, softcap: float, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    # `deterministic` is for the backward; the op takes it so that autograd's context can keep it.
    return _run_forward(q, k, v, softmax_scale, causal, window_left, window_right, softcap)


@_fwd.register_fake
def _fwd_fake(q, k, v, softmax_scale, causal, window_left, window_right, softcap, deterministic):
    b, s, h, _ = q.shape
    return q.new_empty((b, s, h, v.shape[-1])), q.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op("flashtile::bwd", mutates_args=())
def _bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
         lse: torch.Tensor, softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
         deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _run_backward(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap,
                         deterministic)


@_bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap, deterministic):
    # Compact, as the real op's are (flashtile.backward allocates them), whatever q, k and v's strides: a fake
    # whose strides differ from the real outputs' would let the compiler read the gradients in the wrong order.
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, *ctx.args = inputs  # args: softmax_scale, causal, window_left, window_right, softcap, deterministic
    ctx.save_for_backward(q, k, v, *output)


def _fwd_backward(ctx, dout, dlse):
    dq, dk, dv = _bwd(dout, *ctx.saved_tensors, *ctx.args)
    return dq, dk, dv, None, None, None, None, None, None


_fwd.register_autograd(_fwd_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """Eager mode's path: the same forward and backward without the custom-op dispatcher, whose per-call cost
    (tens of microseconds) is most of a small call's time."""

    @staticmethod
    def forward(ctx, q, k, v, softmax_scale, causal, window_left, window_right, softcap, deterministic):
        out, lse = _run_forward(q, k, v, softmax_scale, causal, window_left, window_right, softcap)
        ctx.args = (softmax_scale, causal, window_left, window_right, softcap, deterministic)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        dq, dk, dv = _run_backward(dout, *ctx.saved_tensors, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None


def _attention(q, k, v, *args):
    """(out, lse) through the path that fits: the custom op when compiling, autograd.Function when a gradient is
    wanted, the plain call otherwise. args: softmax_scale, causal, window_left, window_right, softcap,
    deterministic."""
    if torch.compiler.is_compiling():
        return _fwd(q, k, v, *args)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _EagerAttention.apply(q, k, v, *args)
    return _run_forward(q, k, v, *args[:-1])


def _check_and_run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs):
    if dropout_p != 0.0:
        raise NotImplementedError("flashtile: dropout_p > 0 is not supported yet (attention dropout)")
    if alibi_slopes is not None:
        raise NotImplementedError("flashtile: alibi_slopes is not supported yet")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}: expected (batch, seqlen, heads, head_dim), got shape {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device}, but q is on {q.device}")
    if softmax_scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    else:
        scale = _number("softmax_scale", softmax_scale, "a number, or None for 1/sqrt(head_dim)")
    left, right = _window(window_size)
    # As flash-attn does: a last dimension that is not contiguous is made so (SPEC.md's layout needs stride 1).
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    head_dim_v = v.shape[-1]
    if q.is_cuda:
        q, k, v = _pad_head_dims_for_cuda(q, k, v)
    out, lse = _attention(q, k, v, scale, bool(causal), left, right, _number("softcap", softcap, "a number (0: off)"),
                          bool(deterministic))
    if out.shape[-1] != head_dim_v:
        out = out[..., :head_dim_v]
    return (out, lse, None) if return_attn_probs else out


_CUDA_MAX_HEAD_DIM = 256


def _pad_head_dims_for_cuda(q, k, v):
    """q, k, v with zero columns appended where the CUDA kernels need it: they take one head dim for q, k and v,
    a multiple of 8 up to 256. Zero columns in q and k add nothing to the scores, and zero columns in v give zero
    columns of out, which the caller cuts off; the scale stays that of the real head dim. flash-attn pads the same
    way for head dims that are not multiples of 8. Autograd sees the padding, so the gradients come back cut to
    the inputs' shapes. Head dims above 256 are left for the library to refuse."""
    d, dv = q.shape[-1], v.shape[-1]
    padded = -(-max(d, dv) // 8) * 8
    if (d == dv and d % 8 == 0) or padded > _CUDA_MAX_HEAD_DIM or k.shape[-1] != d:
        return q, k, v
    pad = torch.nn.functional.pad
    return pad(q, (0, padded - d)), pad(k, (0, padded - d)), pad(v, (0, padded - dv))


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (batch, seqlen_q, heads, head_dim), k/v (batch, seqlen_k, heads_kv, head_dim): out like q. With
    return_attn_probs, returns (out, softmax_lse, None) as flash-attn does when dropout is off."""
    return _check_and_run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                          deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv (batch, seqlen, 3, heads, head_dim)."""
    return _check_and_run(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size,
                          softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (batch, seqlen_q, heads, head_dim), kv (batch, seqlen_k, 2, heads_kv, head_dim)."""
    return _check_and_run(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size, softcap,
                          alibi_slopes, deterministic, return_attn_probs)
