"""Tiny transformers models with random weights (built from configs: nothing is downloaded) and their
one-step forms for gtmkit.integrations.torch.ModuleLogits, so that generate() and gtmkit.beam_search run the
same network."""

from __future__ import annotations

import inspect

import torch
from transformers import (DynamicCache, EncoderDecoderCache, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, T5Config, T5ForConditionalGeneration)

SPECIALS = 3  # pad / start 0, EOS 1, unk 2: SID tokens start after them


def t5(vocab: int, seed: int = 0):
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=vocab, d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2, d_kv=16,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return T5ForConditionalGeneration(cfg).eval()


def gpt2(vocab: int, seed: int = 0):
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=0,
                     eos_token_id=1, pad_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def llama(vocab: int, seed: int = 0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64, bos_token_id=0,
                      eos_token_id=1, pad_token_id=0)
    return LlamaForCausalLM(cfg).eval()


MODELS = {"t5": t5, "gpt2": gpt2, "llama": llama}


def _cache_kw(model) -> str:
    """The forward's cache argument: `cache` in newer transformers, `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class OneStep(torch.nn.Module):
    """module(tokens, state) -> (logits [R, vocab], state) over a transformers model with its KV cache:
    state = (encoder states or prompt ids, cache); tokens None at step 0."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.kw = _cache_kw(model)

    def forward(self, tokens, state):
        first, cache = state
        m = self.model
        if m.config.is_encoder_decoder:
            if tokens is None:
                tokens = torch.zeros(first.shape[0], dtype=torch.long, device=first.device)
            out = m(encoder_outputs=(first,), decoder_input_ids=tokens[:, None], use_cache=True, **{self.kw: cache})
        else:
            ids = first if tokens is None else tokens[:, None]
            out = m(input_ids=ids, use_cache=True, **{self.kw: cache})
        cache = getattr(out, "cache", None)
        return out.logits[:, -1], (first, out.past_key_values if cache is None else cache)


def start_state(model, inputs):
    """The state of one row a request: an encoder's output or the prompt, and an empty cache."""
    if model.config.is_encoder_decoder:
        enc = model.get_encoder()(input_ids=inputs).last_hidden_state
        return enc, EncoderDecoderCache(DynamicCache(), DynamicCache())
    return inputs, DynamicCache()


def synthetic_world(folder, n_ads: int, seed: int, n_users: int):
    """(index, requests): a synthetic catalog's index in `folder` and requests of users from its world."""
    import gtmkit
    from gtmkit.synth import synth_users, write_catalog

    catalog, _ = write_catalog(folder / "catalog.parquet", n_ads, seed=seed)
    index = gtmkit.build_index(catalog, folder / "index")
    users = synth_users(index.manifest["schema"], n_users, seed=seed + 1)
    return index, [index.encode_request(u) for u in users]
