"""A SidDecoder search captured as one CUDA graph (torch.cuda.graph): the cross-attention projections, every
decoder step, every CD+GTM step and reorder and the post-filter; replayed with the next request's encoder states,
mask and requests copied into the buffers the graph reads."""

from __future__ import annotations

import cupy as cp
import numpy as np
import torch

from ..matcher.beam import Result
from ..matcher.cuda.graph import GraphedBeamSearch


class GraphedDecoder:
    def __init__(self, matcher, q, runtime, states, mask, sizes, gtm: bool, postfilter: bool):
        self.matcher, self.runtime, self.sizes, self.postfilter = matcher, runtime, list(sizes), postfilter
        self.states = states.detach().clone()  # the buffers the graph reads
        self.mask = None if mask is None else mask.detach().clone()
        self.search = GraphedBeamSearch(matcher, q, self._decode, sizes, gtm=gtm, postfilter=postfilter,
                                        capture="torch")

    def _decode(self, t: int, prev, parent):
        if t == 0:
            self.runtime.begin(self.states, self.mask, self.sizes)
        return cp.from_dlpack(self.runtime.step(t, prev, parent))

    def set_inputs(self, q, states, mask) -> None:
        ts = self.search._torch_stream
        ts.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(ts):
            self.states.copy_(states)
            if mask is not None:
                self.mask.copy_(mask)
        self.search.set_requests(q)

    def replay(self) -> Result:
        g = self.search.replay()
        B, L = self.search.q.size, len(self.sizes)
        beams = cp.stack([(out[2] >= 0).sum(axis=1) for out in self.search.outs]).astype(cp.int64)
        ads = None
        if self.postfilter:
            counts = cp.asnumpy(g.ad_counts)
            ads = [(g.ads[b, :counts[b]].copy(), g.sid_rank[b, :counts[b]].copy()) for b in range(B)]
        return Result(g.sids.copy(), g.scores.copy(), g.leaf_nodes.copy(), ads, cp.full((L, B), -1, cp.int64),
                      beams, np.zeros(L), g.version)
