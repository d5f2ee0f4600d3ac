"""flashtile as a Hugging Face transformers attention function.

    import flashtile.transformers_attention as fta
    fta.register()                                   # once, before the model is built
    model = AutoModelForCausalLM.from_config(config, attn_implementation=fta.NAME)

The registered name has no "flash" in it on purpose: transformers treats names containing "flash" as requests for
the flash-attn package (or a hub kernel) and tries to import one.
"""
import torch
import transformers

from .torch_api import flash_attn_func

NAME = "tiled_attention"


def _only_causal(mask, sq, sk):
    """True when the mask transformers hands over hides nothing beyond the causal pattern (bottom-right aligned).
    Padding masks need varlen attention, which flashtile does not have yet; they raise instead of being ignored."""
    visible = mask if mask.dtype == torch.bool else mask == 0
    causal = torch.ones(sq, sk, dtype=torch.bool, device=mask.device).tril(diagonal=sk - sq)
    return bool((visible[..., -sq:, -sk:] == causal).all())


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs):
    """transformers' attention-function contract: query (batch, heads, seq_q, dim), key/value (batch, heads_kv,
    seq_k, dim) in; (batch, seq_q, heads, dim) and no attention weights out."""
    if dropout:
        raise NotImplementedError("flashtile: attention dropout is not supported yet (set attention_dropout=0)")
    causal = getattr(module, "is_causal", True)
    if attention_mask is not None and not (causal and _only_causal(attention_mask, query.shape[2], key.shape[2])):
        raise NotImplementedError("flashtile: padding or custom attention masks are not supported yet; "
                                  "batch sequences without padding")
    window = getattr(module, "sliding_window", None)
    out = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), softmax_scale=scaling,
                          causal=causal, window_size=(window - 1, 0) if window else (-1, -1),
                          softcap=softcap or 0.0)
    return out, None


def register(name=NAME):
    """Adds flashtile to transformers' AttentionInterface under `name` (which must not contain "flash")."""
    if "flash" in name:
        raise ValueError(f"{name!r}: transformers routes names containing 'flash' to flash-attn; pick another")
    transformers.AttentionInterface.register(name, attention_forward)
    return name
