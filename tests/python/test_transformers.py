"""A real client: a small Llama-style model from Hugging Face transformers (random weights from a config, no
downloads) with its attention switched to flashtile through transformers' AttentionInterface registry
(flashtile.transformers_attention). Its logits, gradients and a 20-step training loss curve must agree with the
same model on "sdpa". Skipped where
torch or transformers is missing (they are on the GPU machine, not on the CPU CI machine)."""
import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import flashtile.transformers_attention  # noqa: E402

NAME = flashtile.transformers_attention.register()

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def tiny_llama(attn_implementation, device, dtype):
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    config._attn_implementation = attn_implementation
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype)


def pair(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    ours = tiny_llama(NAME, device, dtype)
    ref = copy.deepcopy(ours)
    ref.config._attn_implementation = "sdpa"
    for layer in ref.model.layers:
        layer.self_attn.config._attn_implementation = "sdpa"
    return ours, ref, dtype


@pytest.mark.parametrize("device", DEVICES)
def test_logits_and_gradients_match_sdpa(device):
    ours, ref, dtype = pair(device)
    tokens = torch.randint(0, 512, (2, 96), device=device)
    out, want = ours(tokens, labels=tokens), ref(tokens, labels=tokens)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out.logits.float(), want.logits.float(), atol=tol, rtol=tol)
    out.loss.backward()
    want.loss.backward()
    for (name, p), q in zip(ours.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.float(), q.grad.float(), atol=10 * tol, rtol=10 * tol, msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_twenty_training_steps_follow_sdpa(device):
    ours, ref, _ = pair(device)
    curves = []
    for model in (ours, ref):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        gen = torch.Generator(device="cpu").manual_seed(1)
        losses = []
        for _ in range(20):
            tokens = torch.randint(0, 512, (2, 64), generator=gen).to(device)
            loss = model(tokens, labels=tokens).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves.append(losses)
    for a, b in zip(*curves):
        assert abs(a - b) <= 0.01 * abs(b), (curves[0], curves[1])
