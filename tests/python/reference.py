"""A float64 numpy oracle for the Python tests: attention per SPEC.md, with gradients."""
import numpy as np


def visible(sq, sk, causal, window):
    """(sq, sk) boolean mask, bottom-right aligned: row i sees keys i + (sk - sq) - left .. i + (sk - sq) + right."""
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    i = np.arange(sq)[:, None] + (sk - sq)
    j = np.arange(sk)[None, :]
    m = np.ones((sq, sk), dtype=bool)
    if left >= 0:
        m &= j >= i - left
    if right >= 0:
        m &= j <= i + right
    return m


def attention(q, k, v, dout=None, scale=None, causal=False, window=(-1, -1), softcap=0.0):
    """Returns (out, lse) and, with dout, (dq, dk, dv); all float64. Shapes as flash-attn (BSHD)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = hq // hk
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    kk, vv = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) * scale
    if softcap > 0:
        t = np.tanh(s / softcap)
        s = softcap * t
    mask = visible(sq, sk, causal, window)
    s = np.where(mask, s, -np.inf)
    mx = np.max(s, axis=-1, keepdims=True)
    seen = np.isfinite(mx)
    e = np.where(mask, np.exp(s - np.where(seen, mx, 0.0)), 0.0)
    l = e.sum(-1, keepdims=True)
    p = np.where(seen, e / np.where(seen, l, 1.0), 0.0)
    out = np.einsum("bhij,bjhd->bihd", p, vv)
    lse = np.where(seen[..., 0], (mx + np.log(np.where(seen, l, 1.0)))[..., 0], -np.inf)
    if dout is None:
        return out, lse
    do = np.asarray(dout, dtype=np.float64)
    dp = np.einsum("bihd,bjhd->bhij", do, vv)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    if softcap > 0:
        ds = ds * (1 - t * t)
    ds *= scale
    dq = np.einsum("bhij,bjhd->bihd", ds, kk)
    dk = np.einsum("bhij,bihd->bjhd", ds, q).reshape(b, sk, hk, g, d).sum(3)
    dv = np.einsum("bhij,bihd->bjhd", p, do).reshape(b, sk, hk, g, v.shape[-1]).sum(3)
    return (out, lse), (dq, dk, dv)
