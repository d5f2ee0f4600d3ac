"""The flash-attn-compatible PyTorch API. Skipped where torch (or, for the GPU cases, CUDA) is missing."""
import pytest

torch = pytest.importorskip("torch")
import flashtile  # noqa: E402

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def reference(q, k, v, causal, scale=None):
    # PyTorch's SDPA is top-left aligned for causal; with Sq == Sk the two conventions agree.
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2).double(), k.transpose(1, 2).double(),
                                                         v.transpose(1, 2).double(), is_causal=causal, scale=scale)
    return o.transpose(1, 2)


def check_forward_and_gradients(q, k, v, causal, tol, **kwargs):
    """flash_attn_func(q, k, v) and its gradients against the float64 reference."""
    out = flashtile.flash_attn_func(q, k, v, causal=causal, **kwargs)
    ref = reference(q, k, v, causal, kwargs.get("softmax_scale"))
    assert out.shape == ref.shape
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), g)
    want = torch.autograd.grad(ref, (q, k, v), g.double())
    for name, a, b in zip("qkv", got, want):
        assert a.shape == b.shape, name
        torch.testing.assert_close(a.double(), b.double(), atol=5 * tol, rtol=5 * tol, msg=lambda m: f"d{name}: {m}")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_gpu)])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_gradients(device, causal):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 128, h, 64, device=device, dtype=dtype, requires_grad=True) for h in (4, 2, 2))
    check_forward_and_gradients(q, k, v, causal, 1e-4 if dtype == torch.float32 else 2e-2)


def test_head_dim_padding_keeps_the_result():
    # What flash_attn_func does on CUDA where the kernels cannot take the head dims as they are (not a multiple
    # of 8, or v's differing from q's): zero columns appended, the scale kept, out cut back. Run here on the CPU
    # backend, which takes the padded tensors as any others, against the unpadded reference.
    from flashtile.torch_api import _pad_head_dims_for_cuda
    torch.manual_seed(5)
    for d, dv in ((20, 12), (12, 20), (100, 100), (64, 64)):
        q, k, v = (torch.randn(1, 48, h, n, dtype=torch.float64, requires_grad=True)
                   for h, n in ((4, d), (2, d), (2, dv)))
        pq, pk, pv = _pad_head_dims_for_cuda(q, k, v)
        width = -(-max(d, dv) // 8) * 8
        assert pq.shape[-1] == pk.shape[-1] == pv.shape[-1] == width
        if d == dv and d % 8 == 0:
            assert pq is q and pk is k and pv is v
        out = flashtile.flash_attn_func(pq.float(), pk.float(), pv.float(), causal=True,
                                        softmax_scale=d ** -0.5)[..., :dv]
        ref = reference(q, k, v, True)
        torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)
        g = torch.randn_like(ref)
        got, want = torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)
        for a, b in zip(got, want):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, atol=5e-4, rtol=5e-4)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_gpu)])
def test_inputs_flash_attn_takes_as_they_are(device):
    # flash-attn's users pass views its kernels' constraints would refuse: a last dimension that is not
    # contiguous, slices of a fused projection that start mid-row, head dims that are not multiples of 8 or
    # differ between q and v. flash_attn_func takes them all, as flash-attn does.
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.manual_seed(6)

    def leaf(*shape):
        return torch.randn(*shape, device=device, dtype=dtype, requires_grad=True)

    # Last dimension strided: built transposed, viewed back.
    q, k, v = (leaf(1, 64, 2, n).detach().transpose(2, 3).contiguous().transpose(2, 3).requires_grad_()
               for n in (32, 32, 32))
    assert q.stride(-1) != 1
    check_forward_and_gradients(q, k, v, True, tol)
    # One fused projection (batch, seqlen, 3 * heads * 40 + 4): q, k, v start 4, 84 and 164 elements into each row
    # (not 16-byte aligned in half precision), with a sequence stride of 364 elements (not a multiple of 8).
    fused = leaf(2, 64, 3 * 2 * 40 + 4)
    q, k, v = (fused[..., 4 + i * 80: 4 + (i + 1) * 80].unflatten(-1, (2, 40)) for i in range(3))
    check_forward_and_gradients(q, k, v, False, tol)
    # Head dims off the kernels' grid: 100 (not a multiple of 8); 192 for q and k with 128 for v (as in MLA).
    for d, dv in ((100, 100), (192, 128), (40, 72)):
        q, k, v = leaf(1, 80, 4, d), leaf(1, 80, 2, d), leaf(1, 80, 2, dv)
        check_forward_and_gradients(q, k, v, True, tol)
        check_forward_and_gradients(q, k, v, False, tol, softmax_scale=0.3)


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


@needs_gpu
def test_torch_compile_fullgraph_with_backward_on_cuda():
    def loss(q, k, v):
        return flashtile.flash_attn_func(q, k, v, causal=True).float().square().sum()

    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 64, h, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for h in (4, 2, 2))
    want = torch.autograd.grad(loss(q, k, v), (q, k, v))
    got = torch.autograd.grad(torch.compile(loss, fullgraph=True)(q, k, v), (q, k, v))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=2e-2, rtol=2e-2)


@needs_gpu
def test_non_default_stream_and_cuda_graph_replay():
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 128, 4, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    want = flashtile.flash_attn_func(q, k, v, causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the call must run on the current (side) stream, ordered after q, k, v
        got = flashtile.flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(got, want, atol=0, rtol=0)

    graph = torch.cuda.CUDAGraph()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        flashtile.flash_attn_func(q, k, v, causal=True)  # warm-up outside capture
        with torch.cuda.graph(graph):
            captured = flashtile.flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    q.copy_(torch.randn_like(q))  # replay reads the new q
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, flashtile.flash_attn_func(q, k, v, causal=True), atol=0, rtol=0)


@needs_gpu
def test_deterministic_backward_is_bitwise_stable():
    torch.manual_seed(4)
    q, k, v = (torch.randn(4, 256, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.randn_like(q)

    def grads():
        out = flashtile.flash_attn_func(q, k, v, causal=True, deterministic=True)
        return torch.autograd.grad(out, (q, k, v), g)

    first = grads()
    for _ in range(5):
        for a, b in zip(grads(), first):
            assert torch.equal(a, b)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_gpu)])
def test_bad_inputs_raise_clear_errors(device):
    q = torch.randn(1, 16, 2, 32, device=device)
    with pytest.raises(ValueError, match="q: expected \\(batch, seqlen, heads, head_dim\\)"):
        flashtile.flash_attn_func(q[0], q, q)
    with pytest.raises(TypeError, match="k: expected a torch.Tensor"):
        flashtile.flash_attn_func(q, q.numpy() if device == "cpu" else None, q)
    with pytest.raises((TypeError, flashtile.FlashtileError), match="dtype|float64"):
        flashtile.flash_attn_func(q.double(), q.double(), q.double())
    with pytest.raises(flashtile.FlashtileError, match="last dimension must be contiguous"):
        flashtile.forward(q.transpose(2, 3).contiguous().transpose(2, 3), q, q)  # flash_attn_func copies it
    with pytest.raises(flashtile.FlashtileError, match="head"):  # 2 query heads cannot share 3 K/V heads
        flashtile.flash_attn_func(q, torch.randn(1, 16, 3, 32, device=device), torch.randn(1, 16, 3, 32, device=device))
    if device == "cuda":
        with pytest.raises(ValueError, match="v: on cpu, but q is on cuda"):
            flashtile.flash_attn_func(q, q, q.cpu())
        with pytest.raises(flashtile.FlashtileError, match="float16 or bfloat16"):
            flashtile.flash_attn_func(q, q, q)  # float32 on the GPU


def test_repeated_calls_reuse_nothing_but_the_layout():
    # A call with the shapes, strides and options of an earlier one reuses that call's C struct (flashtile's
    # prepared calls) and must still read its own tensors: new data, a strided view of the same shape, other
    # options and other outputs, interleaved, each against the reference; and threads calling at once.
    torch.manual_seed(1)

    def inputs():
        return [torch.randn(1, 64, h, 32, dtype=torch.float32) for h in (4, 2, 2)]

    first, second = inputs(), inputs()
    strided = [x.transpose(1, 2).contiguous().transpose(1, 2) for x in second]  # same shape, head-major strides
    for _ in range(2):
        for (q, k, v), causal in ((first, True), (second, True), (strided, True), (second, False), (first, False)):
            torch.testing.assert_close(flashtile.flash_attn_func(q, k, v, causal=causal).double(),
                                       reference(q, k, v, causal), atol=1e-4, rtol=1e-4)
    out, lse = torch.empty_like(first[0]), torch.empty(1, 4, 64)
    got, got_lse = flashtile.forward(*first, causal=True, out=out, lse=lse)
    assert got is out and got_lse is lse
    torch.testing.assert_close(out.double(), reference(*first, True), atol=1e-4, rtol=1e-4)

    import threading
    problems = [inputs() for _ in range(4)]
    alone = [flashtile.forward(*x, causal=True, num_threads=1)[0] for x in problems]
    mismatches = []

    def run(i):  # each thread's outputs, bitwise those of the same call made alone
        for _ in range(50):
            if not torch.equal(flashtile.forward(*problems[i], causal=True, num_threads=1)[0], alone[i]):
                mismatches.append(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(problems))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not mismatches
    for (q, k, v), out in zip(problems, alone):
        torch.testing.assert_close(out.double(), reference(q, k, v, True), atol=1e-4, rtol=1e-4)
