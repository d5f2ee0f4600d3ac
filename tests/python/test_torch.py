"""The flash-attn-compatible PyTorch API. Skipped where torch (or, for the GPU cases, CUDA) is missing."""
import pytest

torch = pytest.importorskip("torch")
import flashtile  # noqa: E402

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def reference(q, k, v, causal):
    # PyTorch's SDPA is top-left aligned for causal; with Sq == Sk the two conventions agree.
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2).double(), k.transpose(1, 2).double(),
                                                         v.transpose(1, 2).double(), is_causal=causal)
    return o.transpose(1, 2)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_gpu)])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_gradients(device, causal):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 128, h, 64, device=device, dtype=dtype, requires_grad=True) for h in (4, 2, 2))
    out = flashtile.flash_attn_func(q, k, v, causal=causal)
    ref = reference(q, k, v, causal)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)
    g = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    rq, rk, rv = torch.autograd.grad(ref, (q, k, v), g.double())
    for got, want in ((dq, rq), (dk, rk), (dv, rv)):
        torch.testing.assert_close(got.double(), want.double(), atol=5 * tol, rtol=5 * tol)


def test_unsupported_arguments_raise():
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(NotImplementedError, match="dropout"):
        flashtile.flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(NotImplementedError, match="alibi"):
        flashtile.flash_attn_func(q, q, q, alibi_slopes=torch.ones(2))


def test_packed_variants_and_lse():
    torch.manual_seed(1)
    qkv = torch.randn(1, 64, 3, 2, 32)
    out, lse, probs = flashtile.flash_attn_qkvpacked_func(qkv, causal=True, return_attn_probs=True)
    assert lse.shape == (1, 2, 64) and probs is None
    out2 = flashtile.flash_attn_kvpacked_func(qkv[:, :, 0], qkv[:, :, 1:], causal=True)
    torch.testing.assert_close(out, out2)


def test_torch_compile_fullgraph():
    f = torch.compile(lambda q, k, v: flashtile.flash_attn_func(q, k, v, causal=True), fullgraph=True)
    q = torch.randn(1, 32, 2, 16)
    torch.testing.assert_close(f(q, q, q), flashtile.flash_attn_func(q, q, q, causal=True))
