"""`SidDecoder`: a whole GRACE request for an encoder-decoder SID model: the encoder once, L decoder steps with
per-step beam sizes, CD+GTM and per-request top-k by `Matcher.step` at each step, the exact post-filter
(docs/design.md §8). On the GPU the decoder steps, the GTM steps and the reorders run as one CUDA graph per
(batch, context length, beams) shape, replayed for every later request of that shape."""

from __future__ import annotations

import time

import numpy as np
import torch

from .._args import beam_sizes_arg, bool_arg
from ..errors import GtmkitError
from ..integrations.layout import SidTokenLayout
from ..matcher.beam import Result, beam_search
from ..matcher.index_matcher import IndexMatcher
from ..matcher.matcher import Matcher
from .runtime import DecoderRuntime
from .t5 import t5_weights

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class SidDecoder:
    """SidDecoder(model, matcher, layout): decodes SIDs for `model` (a Hugging Face T5ForConditionalGeneration,
    or a model of the same structure, its weights and config as they are) under the matcher's CD+GTM.

    dtype: the decoder's weights and matrix inputs, "bfloat16", "float16" or "float32" (accumulation, norms,
    softmaxes and beam scores are fp32 whatever it is; the residual stream is bf16 with bfloat16); None: bfloat16 on the GPU, float32 on the CPU (the CPU
    runs float32 only). The decoder runs where the matcher does (a device="cuda" Matcher: the GPU); the model's
    encoder runs where the model is, which must be the same device. The decoder's weights are copied once, here:
    a model trained further needs a new SidDecoder.

    graph (search): on the GPU, True (the default) captures each (batch, context length, beam sizes, gtm,
    postfilter) shape's search as one CUDA graph on its first request and replays it for the next ones;
    False runs it eagerly. Results are the same."""

    def __init__(self, model, matcher, layout: SidTokenLayout, dtype=None):
        if not isinstance(matcher, (Matcher, IndexMatcher)):
            raise GtmkitError(f"matcher must be a gtmkit.Matcher, got {type(matcher).__name__}")
        if not isinstance(layout, SidTokenLayout):
            raise GtmkitError(f"layout must be a SidTokenLayout, got {type(layout).__name__}")
        self.matcher, self.layout, self.model = matcher, layout, model
        current = matcher.current()
        self.device = torch.device("cuda", torch.cuda.current_device()) if current.cuda is not None \
            else torch.device("cpu")
        if dtype is None:
            dtype = "bfloat16" if self.device.type == "cuda" else "float32"
        name = dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")
        if name not in DTYPES:
            raise GtmkitError(f"dtype must be 'bfloat16', 'float16' or 'float32', got {dtype!r}")
        if self.device.type == "cpu" and name != "float32":
            raise GtmkitError(f"the CPU decoder runs float32 only, got dtype={name!r}")
        self.dtype = DTYPES[name]
        self.weights = t5_weights(model, self.dtype, self.device)
        vocab = int(self.weights.lm_head.shape[0])
        if vocab != layout.vocab_size:
            raise GtmkitError(f"the model scores {vocab} tokens, the layout's vocabulary has {layout.vocab_size}")
        self._graphs = {}

    def search(self, input_ids, requests, beam_sizes=(1, 512, 1024, 1024), attention_mask=None, gtm: bool = True,
               postfilter: bool = True, graph: bool = None) -> Result:
        """Decode each request's best SIDs: input_ids [B, N] (torch, on the model's device) are the encoder's
        inputs, requests the B encoded requests (Index.encode_request), beam_sizes the per-step beam sizes
        (beam_sizes[0] is 1: one start row a request). Returns the `Result` gtmkit.beam_search returns (on the GPU:
        CuPy arrays): SIDs, scores, leaf nodes, post-filtered ads, per-step beams, the index version."""
        matcher = self.matcher.current()  # one index for the whole request
        index = matcher.index
        layout = self.layout.check(index)
        sizes = beam_sizes_arg(beam_sizes, index.sid_length)
        if sizes[0] != 1:
            raise GtmkitError(f"beam_sizes must start with 1 (one start row a request), got {tuple(beam_sizes)}")
        gtm, postfilter = bool_arg(gtm, "gtm"), bool_arg(postfilter, "postfilter")
        gpu = matcher.cuda is not None
        graph = gpu if graph is None else bool_arg(graph, "graph")
        if graph and not gpu:
            raise GtmkitError("graph=True needs a device='cuda' Matcher")
        states, mask = self._encode(input_ids, attention_mask)
        if bool(mask.bool().all()):
            mask = None  # no padded context token: attention without a mask
        q = matcher.batch(requests)
        if q.size != states.shape[0]:
            raise GtmkitError(f"{states.shape[0]} inputs and {q.size} requests")
        runtime = DecoderRuntime(self.weights, layout.offsets_for(index.sid_length), index.vocab_size)
        with torch.no_grad():
            if not graph:
                runtime.begin(states, mask, sizes)
                return beam_search(matcher, q, runtime.step, sizes, gtm=gtm, postfilter=postfilter)
            return self._graphed(matcher, q, runtime, states, mask, sizes, gtm, postfilter)

    def _encode(self, input_ids, attention_mask):
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype.is_floating_point:
            raise GtmkitError("input_ids must be a 2-d torch integer tensor [batch, context length]")
        if input_ids.shape[0] < 1 or input_ids.shape[1] < 1:
            raise GtmkitError(f"input_ids must hold at least one token a request, got shape {list(input_ids.shape)}")
        if input_ids.device != self.device:
            raise GtmkitError(f"input_ids on {input_ids.device}, the decoder on {self.device}: put the model and "
                              "its inputs where the matcher runs")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        elif not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
            raise GtmkitError(f"attention_mask must be a torch tensor shaped like input_ids {list(input_ids.shape)}")
        if not bool((attention_mask != 0).any(dim=1).all()):
            raise GtmkitError("attention_mask leaves a request without any context token")
        vocab = self.weights.embed.shape[0]
        if int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab:
            raise GtmkitError(f"input_ids must lie in [0, {vocab}) (the model's vocabulary)")
        with torch.no_grad():
            out = self.model.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return out.last_hidden_state, attention_mask.to(self.device)

    def _graphed(self, matcher, q, runtime, states, mask, sizes, gtm, postfilter) -> Result:
        from .graphed import GraphedDecoder
        B, N = int(states.shape[0]), int(states.shape[1])
        key = (B, N, tuple(sizes), gtm, postfilter, mask is None, matcher.version)
        g = self._graphs.get(key)
        t0 = time.perf_counter()
        if g is None:
            g = self._graphs[key] = GraphedDecoder(matcher, q, runtime, states, mask, sizes, gtm, postfilter)
        else:
            g.set_inputs(q, states, mask)
        result = g.replay()
        seconds = np.zeros(len(sizes))
        seconds[-1] = time.perf_counter() - t0  # one graph: the whole search's wall time at its last step
        return result._replace(seconds=seconds)
