"""The fixed-schedule beam search as one CUDA graph: every buffer is allocated before capture, every
step is kernel launches only, so one `replay()` runs steps, top-k, beam reordering (and the decoder,
when it is capturable too) and the post-filter with no host involvement.

    searcher = GraphedBeamSearch(matcher, requests, decoder, beam_sizes=(1, 512, 1024, 1024))
    result = searcher.replay()        # device arrays, rewritten in place by every replay

The decoder is called as decoder(step, prev_tokens, parent_rows) -> log-probs [R, V] (CuPy, float32
or float16) and must be capturable: no host synchronisation and no allocation after its first call
(gtmkit.synth.logits_cuda.GpuSyntheticDecoder is; a torch model can instead be captured with torch.cuda.graph)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

import cupy as cp
import numpy as np

from ...errors import GtmkitError
from ..options import CudaOptions, resolve
from ..._args import beam_sizes_arg
from ..._gpu import load_module
from .backend import step_outputs
from .windows import calibrate_window, pass_counts, per_step_setting

log = logging.getLogger("gtmkit")
BEAM_KERNELS = Path(__file__).with_name("kernels") / "beam.cu"


def beam_module() -> cp.RawModule:
    return load_module(BEAM_KERNELS)


class GraphResult(NamedTuple):
    """Device arrays rewritten by every replay: sids int32 [B, M, L], scores float32 [B, M],
    leaf_nodes int32 [B, M], ads int64 [B, cap] / sid_rank int32 [B, cap] / ad_counts int64 [B]
    (valid up to ad_counts[b]); version: the index version the graph was captured on."""

    sids: object
    scores: object
    leaf_nodes: object
    ads: object
    sid_rank: object
    ad_counts: object
    version: str = None


class GraphedBeamSearch:
    """Capture beam search (per-step beam sizes, CD+GTM, reordering, post-filter) once; replay it.

    options: a CudaOptions whose pdl and gtm_windows this search uses (None: the Matcher's; its step, cluster
    and threads must be the Matcher's). pdl: the fused steps
    and the post-filter kernels are launched with programmatic dependent launch (matcher/cuda/pdl.py), so each
    one's blocks are scheduled while the kernel before it still runs; None does so wherever the fused step runs
    (Hopper) and the driver can, else plainly, the reason in self.pdl_off. gtm_windows: candidates the fused
    step's first GTM round tests at each step; "auto" sizes them from the pass rates the warm-up search sees
    (calibrate_window). Only the speed depends on either. The windows used are in self.windows.
    capture: "cupy" (default) records the graph by CuPy's stream capture; "torch" by torch.cuda.graph, for a decoder
    of torch ops, whose intermediate tensors then live in the graph's own memory pool. set_requests serves later
    replays to other requests (as many)."""

    def __init__(self, matcher, requests, decoder, beam_sizes=(1, 512, 1024, 1024), gtm: bool = True,
                 postfilter: bool = True, options: CudaOptions = None, capture: str = "cupy", **deprecated):
        if getattr(matcher, "cuda", None) is None:
            raise GtmkitError("GraphedBeamSearch needs a Matcher on device 'cuda'")
        # the graph binds one index's tables and the requests encoded for it: after Matcher.swap, build a new one
        matcher = matcher.current()
        options = resolve(matcher.options if options is None else options, deprecated, "GraphedBeamSearch")
        mine = (options.step, options.cluster, options.threads)
        if mine != (matcher.options.step, matcher.options.cluster, matcher.options.threads):
            raise GtmkitError(f"GraphedBeamSearch runs the Matcher's step: its options' step, cluster and threads "
                              f"must be the Matcher's, got {mine} for the Matcher's "
                              f"{(matcher.options.step, matcher.options.cluster, matcher.options.threads)}")
        self.options = options
        self.version = matcher.version
        index = matcher.index
        L = index.sid_length
        self.sizes = beam_sizes_arg(beam_sizes, L)  # (int() would take 2.5 as 2 and raise on "a")
        if self.sizes[0] != 1:
            raise GtmkitError(f"beam_sizes must hold {L} sizes starting with 1, got {tuple(beam_sizes)}")
        self.matcher, self.decoder, self.gtm, self.postfilter = matcher, decoder, bool(gtm), bool(postfilter)
        self.q = matcher.batch(requests)
        self.pdl = (True if options.pdl is None else bool(options.pdl)) and matcher.cuda.fused
        self.pdl_off = ""  # why the default could not launch with PDL (then it launches plainly)
        if self.pdl:
            from .pdl import unavailable
            self.pdl_off = unavailable()
            if self.pdl_off and options.pdl:
                raise GtmkitError(f"GraphedBeamSearch with CudaOptions(pdl=True): {self.pdl_off}")
            self.pdl = not self.pdl_off
        log.debug("gtmkit: graphed search launches %s", "with PDL" if self.pdl else
                  f"plainly ({self.pdl_off or ('CudaOptions(pdl=False)' if matcher.cuda.fused else 'multi-kernel step')})")
        if capture not in ("cupy", "torch"):
            raise GtmkitError(f"capture must be 'cupy' or 'torch', got {capture!r}")
        self.k_reorder = beam_module().get_function("reorder_history")
        self._torch_stream = None
        if capture == "torch":  # a torch decoder: torch captures, so its allocations live in the graph's pool
            import torch
            self._torch_stream = torch.cuda.Stream()
            self.stream = cp.cuda.ExternalStream(self._torch_stream.cuda_stream)
        else:
            self.stream = cp.cuda.Stream(non_blocking=True)
        self.scratch = {}
        be = matcher.cuda
        self.windows = per_step_setting("gtm_windows", options.gtm_windows, L, 0, 0)
        # gtm_windows="auto": the warm-up sizes each step's window from that step's counts before running it
        self._calibrate_windows = isinstance(options.gtm_windows, str) and self.gtm and be.fused
        with self.stream:
            self._allocate(index, L)
            keep, be.pdl = be.pdl, self.pdl
            try:
                if self._torch_stream is None:
                    self._run()                  # eager warm-up: compiles kernels, sizes every buffer, calibrates
                    self._calibrate_windows = False
                    self.stream.synchronize()
                    self.stream.begin_capture()
                    try:
                        self._run()
                    finally:
                        self.graph = self.stream.end_capture()
                else:
                    self._capture_torch()
            finally:
                be.pdl = keep

    def _capture_torch(self) -> None:
        import torch
        ts = self._torch_stream
        ts.wait_stream(torch.cuda.current_stream())  # inputs the caller's stream wrote
        with torch.cuda.stream(ts):
            self._run()
        self._calibrate_windows = False
        ts.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=ts):
            self._run()

    def set_requests(self, requests) -> None:
        """Serve the next replays to these requests (as many as the captured ones): their arrays are uploaded and
        the captured pointer table is pointed at them (the kernels read requests through it)."""
        q = self.matcher.batch(requests)
        if q.size != self.q.size:
            raise GtmkitError(f"the graph was captured for {self.q.size} requests, got {q.size}")
        self.stream.synchronize()  # no replay still reads the requests this replaces
        with self.stream:
            self.q.params[...] = q.params
        self._requests = q  # kept alive: the table points into its arrays

    def _allocate(self, index, L):
        B, be = self.q.size, self.matcher.cuda
        self.rows, self.outs, self.hist = [], [], []
        for t in range(L):
            k = self.sizes[t + 1] if t + 1 < L else self.sizes[-1]
            self.rows.append((cp.repeat(cp.arange(B, dtype=cp.int64), self.sizes[t]),
                              cp.arange(B + 1, dtype=cp.int64) * self.sizes[t]))
            self.outs.append(step_outputs(B, k))
            self.hist.append(cp.empty((B * k, t + 1), cp.int32))
        self.start_nodes = cp.zeros(B, cp.int64)
        self.start_scores = cp.zeros(B, cp.float32)
        self.start_prev = cp.full(B, -1, cp.int32)
        self.start_parent = cp.arange(B, dtype=cp.int32)
        self.nodes64 = [cp.empty(B * (self.sizes[t + 1] if t + 1 < L else self.sizes[-1]), cp.int64)
                        for t in range(L)]
        M = self.sizes[-1]
        cap = max(M * be.max_ads_per_sid, 1)
        self.post = (cp.empty((B, cap), cp.int64), cp.empty((B, cap), cp.int32), cp.zeros(B, cp.int64))

    def _run(self):
        index, be, q = self.matcher.index, self.matcher.cuda, self.q
        nodes, scores, prev, parent = self.start_nodes, self.start_scores, self.start_prev, self.start_parent
        hist = None
        L = len(self.sizes)
        for t in range(L):
            row_req, req_rows = self.rows[t]
            k = self.sizes[t + 1] if t + 1 < L else self.sizes[-1]
            lp = self.decoder(t, prev, parent)
            lp_dtype = 1 if lp.dtype == cp.float16 else 0
            # the fused step writes the token history itself (one launch a step fewer in the graph)
            history = (hist, t, self.hist[t]) if be.fused else None
            # rows come best first: one start row a request, then each step's ranked output
            D = int(index.max_degree[t])
            if self._calibrate_windows:  # warm-up of gtm_windows="auto": the candidates, and those that pass GTM
                self.windows[t] = calibrate_window(*pass_counts(be, nodes, lp, lp_dtype, scores, row_req, req_rows, q,
                                                                k, D, scratch=self.scratch, rows_best_first=True), k)
            out = be.step(nodes, lp, lp_dtype, scores, row_req, req_rows, q, k, self.gtm, False, D,
                          out=self.outs[t], scratch=self.scratch, history=history, rows_best_first=True,
                          first_window=self.windows[t])
            p, tok, node, sc, _ = out
            R = p.size
            if history is None:
                self.k_reorder(((R + 255) // 256,), (256,), (hist if hist is not None else self.hist[t], np.int32(t),
                                                             p, tok, np.int64(R), self.hist[t]))
            hist = self.hist[t]
            if be.fused:  # the fused step reads int32 node ids as they come out of the last step
                nodes = node.reshape(-1)
            else:
                self.nodes64[t][...] = node.reshape(-1)
                nodes = self.nodes64[t]
            scores, prev, parent = sc.reshape(-1), tok.reshape(-1), p.reshape(-1)
        B, M = self.q.size, self.sizes[-1]
        if self.postfilter:  # the last step's int32 nodes as they are (no int64 copy)
            be.postfilter_padded(nodes.reshape(B, M), q, True, out=self.post, scratch=self.scratch)
        self.result = GraphResult(hist.reshape(B, M, L), scores.reshape(B, M), self.outs[-1][2], *self.post,
                                  version=self.version)

    def launch(self) -> None:
        """Enqueue one replay on self.stream without waiting (time it with events on that stream)."""
        if self._torch_stream is None:
            self.graph.launch(self.stream)
        else:
            import torch
            with torch.cuda.stream(self._torch_stream):
                self.graph.replay()

    def replay(self) -> GraphResult:
        """Launch the captured graph on its stream and wait for it."""
        self.launch()
        self.stream.synchronize()
        return self.result
