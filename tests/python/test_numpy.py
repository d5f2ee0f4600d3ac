"""The framework-neutral layer on numpy arrays (CPU backend) against a float64 oracle."""
import numpy as np
import pytest

import flashtile
from reference import attention

CASES = [  # (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, window, softcap)
    (1, 1, 1, 1, 1, 8, False, (-1, -1), 0.0),
    (2, 17, 17, 4, 2, 32, True, (-1, -1), 0.0),
    (1, 129, 97, 3, 1, 64, False, (20, 5), 0.0),
    (2, 97, 129, 4, 4, 16, True, (-1, -1), 30.0),
    (1, 300, 40, 2, 2, 64, True, (-1, -1), 0.0),  # rows with no visible key
]


def tolerance(dtype):
    return {np.float32: 2e-5, np.float16: 2e-2}[dtype]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}_Sq{}_Sk{}_H{}-{}_D{}{}".format(*c[:6], "_causal" if c[6] else ""))
def test_forward_backward_match_oracle(case, dtype):
    b, sq, sk, hq, hk, d, causal, window, softcap = case
    rng = np.random.default_rng(sum(case[:6]))
    q = rng.standard_normal((b, sq, hq, d)).astype(dtype)
    k = rng.standard_normal((b, sk, hk, d)).astype(dtype)
    v = rng.standard_normal((b, sk, hk, d)).astype(dtype)
    dout = rng.standard_normal((b, sq, hq, d)).astype(dtype)
    (o_ref, lse_ref), (dq_ref, dk_ref, dv_ref) = attention(q, k, v, dout, causal=causal, window=window,
                                                          softcap=softcap)
    out, lse = flashtile.forward(q, k, v, causal=causal, window_size=window, softcap=softcap)
    assert out.dtype == dtype and out.shape == q.shape and lse.shape == (b, hq, sq) and lse.dtype == np.float32
    tol = tolerance(dtype)
    np.testing.assert_allclose(out, o_ref, atol=tol, rtol=tol)
    np.testing.assert_allclose(lse, lse_ref, atol=1e-3, rtol=1e-4)  # -inf rows compare equal
    dq, dk, dv = flashtile.backward(dout, q, k, v, out, lse, causal=causal, window_size=window, softcap=softcap)
    for got, want in ((dq, dq_ref), (dk, dk_ref), (dv, dv_ref)):
        assert got.dtype == dtype and np.isfinite(got).all()
        np.testing.assert_allclose(got, want, atol=5 * tol * max(1.0, np.abs(want).max()), rtol=5 * tol)


def test_strided_views_and_given_outputs():
    rng = np.random.default_rng(7)
    qkv = rng.standard_normal((2, 33, 3, 4, 32)).astype(np.float32)  # packed, so every view is strided
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    out = np.full((2, 33, 4, 32), np.nan, dtype=np.float32)
    lse = np.full((2, 4, 33), np.nan, dtype=np.float32)
    got, got_lse = flashtile.forward(q, k, v, causal=True, out=out, lse=lse)
    assert got is out and got_lse is lse
    want, want_lse = attention(q, k, v, causal=True)
    np.testing.assert_allclose(out, want, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, atol=1e-4)


def test_read_only_inputs_and_broadcast_kv():
    # Read-only arrays (here zero-stride K/V broadcast over the sequence) reach the library through DLPack 1.0's
    # versioned capsule; as outputs they are refused by name.
    rng = np.random.default_rng(8)
    q = rng.standard_normal((1, 8, 2, 16)).astype(np.float32)
    kv = np.broadcast_to(q[:, :1], q.shape)
    assert not kv.flags.writeable
    got, got_lse = flashtile.forward(q, kv, kv, causal=True)
    want, want_lse = attention(q, np.ascontiguousarray(kv), np.ascontiguousarray(kv), causal=True)
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_allclose(got_lse, want_lse, atol=1e-4)
    frozen = np.empty_like(q)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out: the array is read-only"):
        flashtile.forward(q, q, q, out=frozen)
    with pytest.raises(ValueError, match="dk: the array is read-only"):
        flashtile.backward(q, q, q, q, got, got_lse, dk=frozen)


def test_outputs_that_share_memory():
    # An output over an input or another output is refused by name and nothing is written; outputs side by side
    # in one array (dk and dv packed) are not an overlap, and inputs may alias each other (q = k = v).
    rng = np.random.default_rng(9)
    q = rng.standard_normal((1, 8, 2, 16)).astype(np.float32)
    kept = q.copy()
    with pytest.raises(flashtile.FlashtileError, match="out: shares memory with q"):
        flashtile.forward(q, kept, kept, out=q)
    np.testing.assert_array_equal(q, kept)
    out, lse = flashtile.forward(q, q, q, causal=True)
    dout = rng.standard_normal(q.shape).astype(np.float32)
    dq, dk, dv = flashtile.backward(dout, q, q, q, out, lse, causal=True)
    dkv = np.full((1, 8, 2, 2, 16), np.nan, dtype=np.float32)  # (batch, seqlen, 2, heads, head_dim)
    flashtile.backward(dout, q, q, q, out, lse, causal=True, dk=dkv[:, :, 0], dv=dkv[:, :, 1])
    np.testing.assert_array_equal(dkv[:, :, 0], dk)
    np.testing.assert_array_equal(dkv[:, :, 1], dv)
    with pytest.raises(flashtile.FlashtileError, match="dv: shares memory with dk"):
        flashtile.backward(dout, q, q, q, out, lse, causal=True, dk=dkv[:, :, 0], dv=dkv[:, :, 0])


def test_integers_out_of_range_raise():
    q = np.ones((1, 4, 2, 8), dtype=np.float32)
    for kwargs in (dict(window_size=(2**64 + 3, -1)), dict(window_size=(-1, -2**63 - 1)), dict(num_threads=2**31)):
        with pytest.raises(ValueError, match="does not fit"):  # ctypes would have wrapped them
            flashtile.forward(q, q, q, **kwargs)


def test_bad_input_raises_and_writes_nothing():
    q = np.ones((1, 8, 3, 16), dtype=np.float32)
    k = np.ones((1, 8, 2, 16), dtype=np.float32)  # 3 query heads are not a multiple of 2
    out = np.full((1, 8, 3, 16), np.nan, dtype=np.float32)
    with pytest.raises(flashtile.FlashtileError, match="heads_q") as err:
        flashtile.forward(q, k, k, out=out)
    assert err.value.status == "invalid argument"
    assert np.isnan(out).all()
    with pytest.raises(ValueError, match="backend"):
        flashtile.forward(q, q, q, backend="gpu-magic")
    with pytest.raises(TypeError, match="dtype"):
        flashtile.forward(q.astype(np.float64), q.astype(np.float64), q.astype(np.float64))


def test_argument_errors_name_the_argument():
    # Each refusal names the argument and what it accepts (audit s51, section 2).
    q = np.ones((1, 4, 2, 8), dtype=np.float32)
    with pytest.raises(ValueError, match=r"window_size: expected a pair \(left, right\) of ints.*got \(1, 2, 3\)"):
        flashtile.forward(q, q, q, window_size=(1, 2, 3))
    for window in ((1.5, 0), ("1", 0), 5):
        with pytest.raises(TypeError, match="window_size: expected a pair"):
            flashtile.forward(q, q, q, window_size=window)
    with pytest.raises(TypeError, match=r"softcap: expected a number \(0: off\), got None"):
        flashtile.forward(q, q, q, softcap=None)
    with pytest.raises(TypeError, match="softmax_scale: expected a number, or None"):
        flashtile.backward(q, q, q, q, q, np.zeros((1, 2, 4), np.float32), softmax_scale="auto")
    with pytest.raises(TypeError, match=r"q: expected an array with __dlpack__ \(numpy, CuPy, torch\), got list"):
        flashtile.forward(q.tolist(), q, q)
    with pytest.raises(TypeError, match="v: expected an array with __dlpack__"):
        flashtile.forward(q, q, q.tolist())
    with pytest.raises(TypeError, match="k: expected an array with __dlpack__"):
        flashtile.backward(q, q, q.tolist(), q, q, np.zeros((1, 2, 4), np.float32))
    # Dtypes by name, not by DLPack code; lse's one dtype is float32.
    for dtype in ("float64", "int32", "bool"):
        with pytest.raises(TypeError, match=rf"q: dtype {dtype} is not supported \(float16, bfloat16, float32"):
            flashtile.forward(q.astype(dtype), q, q)
    out, lse = flashtile.forward(q, q, q)
    with pytest.raises(TypeError, match=r"lse: dtype float64 is not supported \(lse must be float32\)"):
        flashtile.backward(q, q, q, q, out, lse.astype(np.float64))


def test_window_bounds_none_and_any_negative_are_unbounded():
    # flash-attn 4 writes an unbounded side as None; SPEC.md makes any negative bound unbounded.
    rng = np.random.default_rng(10)
    q, k, v, dout = (rng.standard_normal((1, 9, 2, 16)).astype(np.float32) for _ in range(4))
    want = flashtile.forward(q, k, v, window_size=(-1, 0))
    want_grads = flashtile.backward(dout, q, k, v, *want, window_size=(-1, 0))
    for window in ((None, 0), (-7, 0), [None, np.int64(0)]):
        got = flashtile.forward(q, k, v, window_size=window)
        for a, b in zip(got + flashtile.backward(dout, q, k, v, *got, window_size=window), want + want_grads):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(flashtile.forward(q, k, v, window_size=(None, None))[0],
                                  flashtile.forward(q, k, v)[0])


def test_empty_and_version():
    q = np.zeros((0, 4, 2, 8), dtype=np.float32)
    out, lse = flashtile.forward(q, q, q)
    assert out.shape == (0, 4, 2, 8) and lse.shape == (0, 2, 4)
    assert flashtile.__version__.count(".") == 2
