"""The weights a T5-family decoder runs with, read from a Hugging Face `T5ForConditionalGeneration` as it is
(relative attention bias, RMS norms, relu or gated FFN, tied or untied head, no QK scaling) and packed for
the wide-beam step: a layer's Q, K, V projections as one matrix, a gated FFN's two input projections as one."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import GtmkitError


@dataclass
class Layer:
    ln_self: torch.Tensor     # [d] RMS norm weights (fp32)
    qkv: torch.Tensor         # [3 * inner, d]
    o_self: torch.Tensor      # [d, inner]
    ln_cross: torch.Tensor
    q_cross: torch.Tensor     # [inner, d]
    kv_cross: torch.Tensor    # [2 * inner, d]
    o_cross: torch.Tensor     # [d, inner]
    ln_ff: torch.Tensor
    wi: torch.Tensor          # [d_ff, d], or [2 * d_ff, d] gated (act half first)
    wo: torch.Tensor          # [d, d_ff]


@dataclass
class T5Weights:
    layers: list
    embed: torch.Tensor       # [model vocab, d]
    final_ln: torch.Tensor
    lm_head: torch.Tensor     # [model vocab, d]
    bias_table: torch.Tensor  # [positions, positions, heads] fp32: self-attention bias of query i over key j <= i
    heads: int
    d_kv: int
    d_ff: int
    gated: bool
    act: object               # the model's own activation module
    eps: float
    scale_out: float          # 1, or d_model ** -0.5 where the model scales its decoder output
    start_token: int
    dtype: torch.dtype


def _decoder_parts(model):
    cfg = getattr(model, "config", None)
    if cfg is None or not getattr(cfg, "is_encoder_decoder", False):
        raise GtmkitError(f"SidDecoder needs an encoder-decoder model of the T5 family, got {type(model).__name__}")
    dec = getattr(model, "decoder", None)
    blocks = getattr(dec, "block", None)
    if blocks is None or getattr(model, "lm_head", None) is None or getattr(model, "encoder", None) is None:
        raise GtmkitError(f"SidDecoder supports T5ForConditionalGeneration-style models (decoder.block, lm_head); "
                          f"{type(model).__name__} is not one: use gtmkit_beam_search through generate()")
    for i, b in enumerate(blocks):
        layers = getattr(b, "layer", ())
        if len(layers) != 3 or not hasattr(layers[0], "SelfAttention") or not hasattr(layers[1], "EncDecAttention") \
                or not hasattr(layers[2], "DenseReluDense"):
            raise GtmkitError(f"SidDecoder: decoder block {i} of {type(model).__name__} is not a T5 block "
                              "(self-attention, cross-attention, feed-forward)")
    return cfg, dec, blocks


def t5_weights(model, dtype: torch.dtype, device) -> T5Weights:
    """The decoder's weights in `dtype` on `device` (norm weights and the position bias table in fp32)."""
    cfg, dec, blocks = _decoder_parts(model)

    def w(x, to=dtype):
        return x.detach().to(device=device, dtype=to).contiguous()

    layers = []
    gated = bool(getattr(cfg, "is_gated_act", False))
    for b in blocks:
        sa, ca, ff = b.layer[0].SelfAttention, b.layer[1].EncDecAttention, b.layer[2].DenseReluDense
        wi = torch.cat([ff.wi_0.weight, ff.wi_1.weight]) if gated else ff.wi.weight
        layers.append(Layer(
            ln_self=w(b.layer[0].layer_norm.weight, torch.float32),
            qkv=w(torch.cat([sa.q.weight, sa.k.weight, sa.v.weight])), o_self=w(sa.o.weight),
            ln_cross=w(b.layer[1].layer_norm.weight, torch.float32),
            q_cross=w(ca.q.weight), kv_cross=w(torch.cat([ca.k.weight, ca.v.weight])), o_cross=w(ca.o.weight),
            ln_ff=w(b.layer[2].layer_norm.weight, torch.float32), wi=w(wi), wo=w(ff.wo.weight)))
    first = blocks[0].layer[0].SelfAttention
    if not getattr(first, "has_relative_attention_bias", False):
        raise GtmkitError("SidDecoder: the decoder's first layer has no relative attention bias (not a T5 decoder)")
    positions = 64  # the longest SID a schema allows (queries and keys: the start token and L - 1 SID tokens)
    with torch.no_grad():
        bias = first.compute_bias(positions, positions, device=first.relative_attention_bias.weight.device)
    scale = getattr(cfg, "scale_decoder_outputs", None)
    if scale is None:  # transformers before 5: the head scales its input exactly when it is tied
        scale = bool(getattr(cfg, "tie_word_embeddings", True))
    start = getattr(cfg, "decoder_start_token_id", None)
    if start is None:
        raise GtmkitError("SidDecoder: the model's config has no decoder_start_token_id")
    return T5Weights(
        layers=layers, embed=w(dec.embed_tokens.weight), final_ln=w(dec.final_layer_norm.weight, torch.float32),
        lm_head=w(model.lm_head.weight), bias_table=w(bias[0].permute(1, 2, 0), torch.float32),
        heads=int(first.n_heads), d_kv=int(first.key_value_proj_dim), d_ff=int(cfg.d_ff), gated=gated,
        act=blocks[0].layer[2].DenseReluDense.act, eps=float(blocks[0].layer[0].layer_norm.variance_epsilon),
        scale_out=float(cfg.d_model) ** -0.5 if scale else 1.0, start_token=int(start), dtype=dtype)
