"""Hugging Face transformers: `GTMLogitsProcessor` for `model.generate(num_beams=..., logits_processor=[...])`
and `gtmkit_beam_search` for `model.generate(custom_generate=gtmkit_beam_search, ...)` with GRACE's per-step
beam sizes (docs/design.md §8). Needs the extra `hf` (transformers>=5, torch)."""

from __future__ import annotations

import numpy as np

from ..errors import GtmkitError

try:
    import torch
    from transformers import LogitsProcessor
    from transformers.generation.utils import ALL_CACHE_NAMES
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"gtmkit.integrations.transformers needs transformers>=5 and torch: pip install 'gtmkit[hf]' "
                      f"({e})") from None

from .._args import beam_sizes_arg, bool_arg, check_search_memory, int_arg
from ..matcher.beam import Result
from ..matcher.index_matcher import IndexMatcher
from ..matcher.matcher import Matcher
from .layout import SidTokenLayout
from .masking import SidMasker

__all__ = ["SidTokenLayout", "GTMLogitsProcessor", "gtmkit_beam_search"]


class GTMLogitsProcessor(LogitsProcessor):
    """CD+GTM as a `LogitsProcessor`, for seq2seq and decoder-only models alike.

    Rows i*num_beams ... (i+1)*num_beams-1 of each call serve request i. Every call recovers each row's trie
    node from its generated SID tokens input_ids[:, prompt_len:] (generate() reorders beams between calls and
    passes no parent rows) and writes -inf in place for every token that is not an allowed SID child of it
    (other vocabulary included); after L SID tokens only the layout's EOS, if it has one. A row whose prefix is
    not in the trie (generate() filled it once the valid children ran out; its score is -inf or generate()'s
    -1e9 placeholder) has every token masked. CPU tensors run on a CPU Matcher (numba), CUDA tensors on a
    device='cuda' Matcher (CuPy kernels on torch's current stream, no host synchronisation).

    prompt_len: the length of the sequences generate() starts from (1 for an encoder-decoder's decoder start
    token, the prompt's length for a decoder-only model); None takes the length at the first call of each
    generation (a call whose sequences are not one token longer than the previous call's starts a new one)."""

    def __init__(self, matcher, requests, num_beams: int, layout: SidTokenLayout, prompt_len: int = None,
                 gtm: bool = True):
        if not isinstance(layout, SidTokenLayout):
            raise GtmkitError(f"layout must be a SidTokenLayout, got {type(layout).__name__}")
        self.masker = SidMasker(matcher, requests, num_beams, layout, bool_arg(gtm, "gtm"))
        self.layout = self.masker.layout
        self.num_beams = self.masker.rows_per_request
        self.prompt_len = None if prompt_len is None else int_arg(prompt_len, "prompt_len", lo=0)
        self._start = self._last = None

    def _prompt_len(self, length: int) -> int:
        new = self._last is None or length != self._last + 1  # the first call of a generation
        self._last = length
        if self.prompt_len is not None:
            if new and length > self.prompt_len:  # its tokens past prompt_len are no SID prefix: all would be masked
                raise GtmkitError(f"prompt_len={self.prompt_len} leaves no room for a SID: generation starts from "
                                  f"{length} tokens (pass prompt_len={length}, the length generate() starts from, "
                                  "or None)")
            return self.prompt_len
        if new:
            self._start = length
        return self._start

    def __call__(self, input_ids, scores):
        self.masker.check(input_ids, scores)  # before the length is read off input_ids
        return self.masker(input_ids, scores, self._prompt_len(int(input_ids.shape[1])))


def gtmkit_beam_search(model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None,
                       synced_gpus=False, streamer=None, requests=None, matcher=None, beam_sizes=None, layout=None,
                       gtm=True, postfilter=True, **model_kwargs) -> Result:
    """Beam search with per-step beam sizes inside generate():

        model.generate(inputs, custom_generate=gtmkit_beam_search, requests=[...], matcher=matcher,
                       beam_sizes=(1, 512, 1024, 1024), layout=SidTokenLayout(...))

    Runs L steps: the model's forward with its KV cache on every live row, log-softmax over the whole
    vocabulary, the fused `matcher.step` on the SID range of the step (CD+GTM and per-request top-k in one),
    then the cache and the per-row inputs reordered by the chosen parent rows (index_select on the batch
    dimension, which also grows it 1 -> beam_sizes[1] -> ... rows a request; an encoder's outputs are expanded
    once per row count). Returns a gtmkit `Result` (SIDs, scores, leaf nodes, post-filtered ads), as
    `gtmkit.beam_search` does. generate()'s logits processors and stopping criteria do not apply (the
    constraint is the matcher's and the search stops after L tokens); EOS is never generated."""
    if matcher is None or requests is None or layout is None:
        raise GtmkitError("gtmkit_beam_search needs matcher=, requests= and layout= (and beam_sizes=)")
    if not isinstance(matcher, (Matcher, IndexMatcher)):
        raise GtmkitError(f"matcher must be a gtmkit.Matcher, got {type(matcher).__name__}")
    matcher = matcher.current()  # one index for the whole generation (its node ids)
    index = matcher.index
    L = index.sid_length
    if not isinstance(layout, SidTokenLayout):
        raise GtmkitError(f"layout must be a SidTokenLayout, got {type(layout).__name__}")
    layout = layout.check(index)
    sizes = beam_sizes_arg(beam_sizes, L)
    gtm, postfilter = bool_arg(gtm, "gtm"), bool_arg(postfilter, "postfilter")
    q = matcher.batch(requests)
    B = int(input_ids.shape[0])
    if q.size != B:
        raise GtmkitError(f"{B} inputs and {q.size} requests")
    gpu = matcher.cuda is not None
    if not gpu:  # (log-probs over the model's whole vocabulary)
        check_search_memory(B, sizes, layout.vocab_size)
    if input_ids.device.type != ("cuda" if gpu else "cpu"):
        raise GtmkitError(f"inputs on {input_ids.device} and a device={matcher.device!r} Matcher: put both on the GPU "
                          "or both on the CPU")
    from ..matcher.cuda.interop import stream_of
    with torch.no_grad(), (stream_of(input_ids) if gpu else _null()):
        return _search(model, input_ids, generation_config, model_kwargs, matcher, q, sizes, layout, gtm, postfilter)


def _search(model, input_ids, generation_config, model_kwargs, matcher, q, sizes, layout, gtm, postfilter):
    import time
    index = matcher.index
    L, V, B = index.sid_length, index.vocab_size, q.size
    xp = matcher.xp
    dev = input_ids.device
    offsets = layout.offsets_for(L)
    encdec = bool(model.config.is_encoder_decoder)
    rows = _Rows(model, model_kwargs, encdec, B)
    nodes = xp.zeros(B, xp.int32)
    scores = xp.zeros(B, xp.float32)
    history = xp.zeros((B, 0), xp.int32)
    candidates = xp.full((L, B), -1, xp.int64)
    beams = xp.zeros((L, B), xp.int64)
    seconds = np.zeros(L)
    outputs = model._prefill(input_ids, generation_config, model_kwargs)
    for t in range(L):
        t0 = time.perf_counter()
        if t:
            inputs = model.prepare_inputs_for_generation(input_ids, next_sequence_length=1, **model_kwargs)
            outputs = model(**inputs, return_dict=True)
        model_kwargs = model._update_model_kwargs_for_generation(outputs, model_kwargs, is_encoder_decoder=encdec)
        if outputs.logits.shape[-1] != layout.vocab_size:
            raise GtmkitError(f"the model scores {outputs.logits.shape[-1]} tokens, the layout's vocabulary has "
                              f"{layout.vocab_size}")
        logp = torch.log_softmax(outputs.logits[:, -1, :].float(), dim=-1)[:, offsets[t]:offsets[t] + V].contiguous()
        del outputs
        k = sizes[t + 1] if t + 1 < L else sizes[-1]
        R = int(nodes.shape[0])
        st = matcher.step(nodes, logp if matcher.cuda is not None else logp.numpy(), scores,
                          xp.repeat(xp.arange(B, dtype=xp.int32), R // B), q, k, gtm=gtm,
                          max_children=int(index.max_degree[t]), rows_best_first=True)
        parents = st.parent_rows.reshape(-1)
        new_hist = xp.empty((B * k, t + 1), xp.int32)
        new_hist[:, :t] = xp.where(parents[:, None] >= 0, history[xp.maximum(parents, 0)], -1)
        new_hist[:, t] = st.tokens.reshape(-1)
        history, nodes, scores = new_hist, st.nodes.reshape(-1), st.scores.reshape(-1)
        beams[t] = (st.nodes >= 0).sum(axis=1)
        if t + 1 < L:  # the next forward's inputs: every row continues its parent with its token
            idx = _torch(xp.maximum(parents, 0), dev).long()
            tok = _torch(xp.maximum(st.tokens.reshape(-1), 0), dev).long() + int(offsets[t])
            input_ids = torch.cat([input_ids.index_select(0, idx), tok[:, None]], dim=1)
            model_kwargs = rows.reorder(model_kwargs, idx, k)
        seconds[t] = time.perf_counter() - t0
    M = sizes[-1]
    leaves = nodes.reshape(B, M)
    ads = matcher.postfilter(leaves, q) if postfilter else None
    return Result(history.reshape(B, M, L), scores.reshape(B, M), leaves, ads, candidates, beams, seconds,
                  matcher.version)


class _Rows:
    """Reorders the per-row state generate() keeps in model_kwargs: the cache through the model's or the cache's
    own reorder, per-row masks and ids by index_select, an encoder's outputs by expanding the originals (one
    row a request) once per row count."""

    PER_ROW = ("attention_mask", "decoder_attention_mask", "position_ids", "decoder_position_ids", "token_type_ids")

    def __init__(self, model, model_kwargs, encdec: bool, B: int):
        self.model, self.B, self.rows = model, B, B
        self.encoder = model_kwargs.get("encoder_outputs") if encdec else None
        self.encoder_mask = model_kwargs.get("attention_mask") if encdec else None
        self._expanded = {}

    def reorder(self, model_kwargs, idx, per_request: int):
        key = next((k for k in ALL_CACHE_NAMES if model_kwargs.get(k) is not None), None)
        if key is not None:
            if hasattr(self.model, "_reorder_cache"):
                model_kwargs[key] = self.model._reorder_cache(model_kwargs[key], idx)
            elif hasattr(model_kwargs[key], "reorder_cache"):
                model_kwargs[key].reorder_cache(idx)
            else:
                raise GtmkitError(f"{type(self.model).__name__}: its cache cannot be reordered")
        old_rows, self.rows = self.rows, int(idx.shape[0])
        for name in self.PER_ROW:
            x = model_kwargs.get(name)
            if name == "attention_mask" and self.encoder is not None:
                continue  # the encoder's mask: expanded below with its outputs
            dim = 0 if getattr(x, "dim", lambda: 0)() <= 2 else 1  # [rows, len], or [3, rows, len] (multimodal ids)
            if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[dim] == old_rows:
                model_kwargs[name] = x.index_select(dim, idx)
        if self.encoder is not None:
            enc, mask = self._expand(per_request)
            model_kwargs["encoder_outputs"] = enc
            if mask is not None:
                model_kwargs["attention_mask"] = mask
        return model_kwargs

    def _expand(self, per_request: int):
        got = self._expanded.get(per_request)
        if got is None:
            enc = self.encoder.__class__(**{k: (v.repeat_interleave(per_request, dim=0) if isinstance(v, torch.Tensor)
                                                else v) for k, v in self.encoder.items()})
            mask = self.encoder_mask
            mask = mask.repeat_interleave(per_request, dim=0) if isinstance(mask, torch.Tensor) else mask
            got = self._expanded[per_request] = (enc, mask)
        return got


def _torch(x, device):
    """A CuPy or numpy array as a torch tensor on `device` (DLPack on the GPU, no copy)."""
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x)).to(device)
    return torch.from_dlpack(x)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
