"""CUDA backend of the Matcher: the index uploaded once, CuPy RawKernels from kernels/*.cu.

Imported only when device="cuda" is chosen. Every operation runs on the current CuPy stream (the
caller's torch stream when inputs are torch tensors) with no host synchronisation inside a step:
buffers are sized from the row count and the index's maximum out-degree, never from a count read back.

Two implementations of the step, with identical results: on Hopper and newer (compute capability 9+)
one launch of kernels/gtm_fused.cu (a thread block cluster per request); elsewhere the multi-kernel
pipeline of kernels/gtm_step.cu. CudaOptions(step="multi") takes the latter on any GPU (the GPU tests run both).

Inputs the kernels cannot check without a host round trip are made harmless inside them: a node id that is not
an internal node, or a row whose row_request is outside [0, B), is a dead row; a leaf id that is not a leaf is
padding, like -1; a row's children past max_children are not candidates. Scores are total: NaN ranks as -inf,
+inf above every finite score (kernels/gtm_common.cuh, candidate_key).

Threads: one backend may be called from several host threads at once. Scratch buffers belong to the CUDA stream
a call enqueues its work on (the caller's current stream), so two calls share buffers only when the stream
orders their kernels one after the other; a lock guards the buffer table itself, and a stream's lock is held while
one call enqueues its kernels, so that two threads on one stream cannot interleave their launches over shared
buffers (host-side only: the kernels of one stream run one after the other anyway). (One set per stream, not per
thread: a thread that moves between streams would otherwise let two of its own calls race on the device.)"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path

import cupy as cp
import numpy as np

from ...errors import GtmkitError
from ..arrays import RequestBatch, TrieArrays
from ..options import CudaOptions
from ..._gpu import load_module
from .sparse_req import sparse_images
from .params import (FUSED_CLUSTER, FUSED_SMEM, FUSED_THREADS, fused_scratch_slots, request_params,
                     trie_params)

log = logging.getLogger("gtmkit")
KERNEL_DIR = Path(__file__).with_name("kernels")
KERNEL_FILE = KERNEL_DIR / "gtm_step.cu"
FUSED_FILE = KERNEL_DIR / "gtm_fused.cu"
POST_FILE = KERNEL_DIR / "postfilter.cu"
PREFIX_FILE = KERNEL_DIR / "prefix.cu"
POST_SIDS, POST_THREADS = 32, 128  # SIDs and threads a post-filter block (postfilter.cu: SPB1, NT1)
MAX_K = 2048
NB = 4096      # score bins (kernels/gtm_step.cu)
ST = 8         # per-request state words
ROUNDS = 4     # lazy-GTM rounds; the last one opens every remaining bin
STEP_KERNELS = ("count", "base", "expand", "hist", "plan", "round", "replan", "finish", "count_pass", "gather", "mask",
                "mask_scores")
MASK_SCORES_WARPS = 8  # rows a block of mask_scores_kernel
MASK_SCORES_SMEM = 48 * 1024  # its shared bitmasks, a warp's V/32 words each; wider vocabularies take the 3 launches
PER_THREAD_STREAM = 2  # cudaStreamPerThread: each host thread's own stream behind one handle
KEPT_STREAMS = 64      # streams whose scratch buffers are kept (the least recently used one's are freed)
STREAM_LOCKS = 64      # striped: streams whose keys collide only take turns at enqueueing


def _stream_key(stream):
    ptr = int(stream.ptr)
    return (ptr, threading.get_ident()) if ptr == PER_THREAD_STREAM else ptr


def step_outputs(B: int, k: int) -> tuple:
    """Fresh output buffers of a step (parent rows, tokens, nodes [B, k] int32; scores [B, k] float32; counts [B])."""
    return (cp.empty((B, k), cp.int32), cp.empty((B, k), cp.int32), cp.empty((B, k), cp.int32),
            cp.empty((B, k), cp.float32), cp.empty(B, cp.int64))


def _ptr(a) -> int:
    return int(a.data.ptr)


class DeviceBatch:
    """A RequestBatch on the device plus its pointer table (QP in the kernels)."""

    def __init__(self, q: RequestBatch):
        self.host = q
        self.size = q.size
        self.bitmask = cp.asarray(q.bitmask)
        self.sig_off, self.sigs = cp.asarray(q.sig_off), cp.asarray(q.sigs)
        self.code_off, self.codes = cp.asarray(q.code_off), cp.asarray(q.codes)
        self.sparse = cp.asarray(sparse_images(q).view(np.uint64))  # the fused step's SPT images
        self.params = cp.asarray(request_params(q, lambda name: _ptr(getattr(self, name))))
        # a copy from pageable host memory may still be in flight when cp.asarray returns; a kernel on another
        # stream (a non-blocking one, as GraphedBeamSearch's) does not wait for it and could read the pointer
        # table before it lands
        cp.cuda.get_current_stream().synchronize()


class CudaBackend:
    """options: the Matcher's CudaOptions (step, cluster, threads are read here; pdl and gtm_windows by
    GraphedBeamSearch)."""

    def __init__(self, t: TrieArrays, index, options: CudaOptions = None):
        options = CudaOptions() if options is None else options
        self.options, self.fused_cluster, self.fused_threads = options, options.cluster, options.threads
        cc = cp.cuda.Device().compute_capability
        if options.step == "fused" and int(cc[:-1]) < 9:
            raise GtmkitError(f"CudaOptions(step='fused') needs thread block clusters (compute capability 9.0 or "
                              f"newer); this GPU is {cc[:-1]}.{cc[-1]}: use step='auto' or 'multi'")
        self.fused = options.step == "fused" or (options.step == "auto" and int(cc[:-1]) >= 9)
        log.debug("gtmkit: CD+GTM step on compute capability %s.%s: %s", cc[:-1], cc[-1],
                  f"fused, {self.fused_cluster} blocks of {self.fused_threads} threads a request" if self.fused
                  else "multi-kernel")
        # set by a GraphedBeamSearch launching with PDL, around its own launches only (cuda/pdl.py)
        self.pdl = False
        self.mod = load_module(KERNEL_FILE)  # the multi-kernel step, and the mask on either path
        for name in STEP_KERNELS:
            setattr(self, "k_" + name, self.mod.get_function(name + "_kernel"))
        self.sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        self.k_post = load_module(POST_FILE).get_function("post_kernel")
        self.k_prefix = None  # node recovery, compiled at its first use (decoder integrations only)
        if self.fused:
            self.load_fused()
        d = {name: cp.asarray(np.ascontiguousarray(getattr(t, name))) for name in t._fields if name != "jagged"}
        self.d = d
        self.vocab = index.vocab_size
        self.first_leaf = index.first_leaf
        self.max_degree = [int(x) for x in index.max_degree]
        self.max_ads_per_sid = int(np.diff(np.asarray(index.sid_ad_offsets)).max())
        self.params = cp.asarray(trie_params(t, lambda name: _ptr(d[name])))
        self.ad_params = cp.asarray(np.array([
            _ptr(d["sid_ad_offsets"]), _ptr(d["sid_ad_ids"]), _ptr(d["ad_bitmask"]), _ptr(d["allow_off"]),
            _ptr(d["allow_codes"]), t.allow_codes.shape[1], _ptr(d["excl_off"]), _ptr(d["excl_codes"]),
            t.excl_codes.shape[1], index.num_ads, index.num_sids, _ptr(d["ad_active"])], np.int64))
        self.nbytes = int(sum(a.nbytes for a in d.values()))
        self._buffers = {}  # stream key -> {(name, shape, dtype): buffer}
        self._buffers_lock = threading.Lock()
        self._streams = {}
        self._enqueue_locks = [threading.RLock() for _ in range(STREAM_LOCKS)]
        # a CuPy int64 [B, FUSED_PROF_W] array: the fused step's phase timestamps, with load_fused(profile=True)
        self.profile = None
        cp.cuda.get_current_stream().synchronize()  # the tables landed before any stream's kernel reads them

    def load_fused(self, profile: bool = False) -> None:
        """The fused step at this backend's cluster and block size; profile=True: the build that records its phase
        timestamps into self.profile when that is set (-DPROFILE=1: profiling tools only)."""
        defines = (() if self.fused_cluster == FUSED_CLUSTER else (f"CL={self.fused_cluster}",)) + \
            (() if self.fused_threads == FUSED_THREADS else (f"NT={self.fused_threads}",)) + \
            (("PROFILE=1",) if profile else ())
        self.k_fused = load_module(FUSED_FILE, defines).get_function("fused_step_kernel")
        self.k_fused.max_dynamic_shared_size_bytes = FUSED_SMEM

    def batch(self, q: RequestBatch) -> DeviceBatch:
        return q if isinstance(q, DeviceBatch) else DeviceBatch(q)

    def _buf(self, name, shape, dtype, scratch=None, zero: bool = False):
        # One scratch buffer per (stream, name, shape): a fixed beam schedule reuses them step after step, so
        # after a warm-up run nothing is allocated (what CUDA graph capture requires). A captured
        # search passes its own `scratch` dict so its replays never share buffers with other work.
        key = (name, shape, np.dtype(dtype).str)
        with self._buffers_lock:
            store = self._stream_buffers() if scratch is None else scratch
            b = store.get(key)
            if b is None:
                b = store[key] = (cp.zeros if zero else cp.empty)(shape, dtype)
            return b

    def _enqueue_lock(self, scratch):
        """The lock to hold while one call enqueues its kernels over the current stream's buffers (a captured
        search's own `scratch` needs none)."""
        if scratch is not None:
            return contextlib.nullcontext()
        return self._enqueue_locks[hash(_stream_key(cp.cuda.get_current_stream())) % STREAM_LOCKS]

    def _stream_buffers(self) -> dict:
        """The scratch buffers of the current stream (kernels on one stream run in order, whichever thread
        enqueued them)."""
        stream = cp.cuda.get_current_stream()
        key = _stream_key(stream)
        store = self._buffers.pop(key, None)
        if store is None:
            store = {}
            if len(self._buffers) >= KEPT_STREAMS:  # freed into CuPy's pool, which reuses memory in stream order
                old = next(iter(self._buffers))
                del self._buffers[old], self._streams[old]
            self._streams[key] = stream  # held: a stream's handle is not reused while its buffers are keyed by it
        self._buffers[key] = store  # most recently used last
        return store

    # --- step -----------------------------------------------------------------------------
    def step(self, node_ids, logprobs, lp_dtype: int, beam_scores, row_req, req_rows, q: DeviceBatch, k: int,
             gtm: bool, count_all: bool, max_children: int, out=None, scratch=None, history=None,
             rows_best_first: bool = False, first_window: int = 0):
        """-> (parent, token, node, score, count); `out` (same tuple, preallocated) makes the step
        allocation-free, as graph capture needs. `history` = (hist_in int32 [R, t], t, hist_out int32
        [B * k, t + 1]): the fused step also writes each output row's token history (its parent's row of
        hist_in, then its token; -1s for padding rows); only when self.fused. first_window (fused step, with
        GTM): candidates the first GTM round tests (0: the kernel's FIRST_WIN x k); speed only, any value gives
        the same answer."""
        with self._enqueue_lock(scratch):
            return self._step(node_ids, logprobs, lp_dtype, beam_scores, row_req, req_rows, q, k, gtm, count_all,
                              max_children, out, scratch, history, rows_best_first, first_window)

    def _step(self, node_ids, logprobs, lp_dtype, beam_scores, row_req, req_rows, q, k, gtm, count_all, max_children,
              out, scratch, history, rows_best_first, first_window):
        if not 1 <= k <= MAX_K:
            raise GtmkitError(f"k must be in [1, {MAX_K}] on the GPU, got {k}")
        if int(max_children) < 1:
            raise GtmkitError(f"max_children must be >= 1, got {max_children}")
        max_children = min(int(max_children), max(max(self.max_degree), 1))  # no node has more: same answer
        R = int(node_ids.shape[0])
        B = q.size
        cap = max(R * int(max_children), 1)
        if out is None:
            out = step_outputs(B, k)
        if self.fused:
            return self._step_fused(node_ids, logprobs, lp_dtype, beam_scores, row_req, req_rows, q, k, gtm,
                                    count_all, int(max_children), cap, out, scratch, history, rows_best_first,
                                    first_window)
        if history is not None:
            raise GtmkitError("the multi-kernel GPU step does not write token histories")
        if node_ids.dtype != cp.int64:
            node_ids = node_ids.astype(cp.int64)
        if req_rows is None:
            req_rows = cp.searchsorted(row_req, cp.arange(B + 1, dtype=cp.int64)).astype(cp.int64)
        row_off = self._buf("row_off", (max(R, 1),), cp.int64, scratch)
        count = self._buf("count", (B,), cp.int64, scratch)
        base = self._buf("base", (B + 1,), cp.int64, scratch)
        cand = self._buf("cand", (cap,), cp.uint64, scratch)
        child = self._buf("child", (cap,), cp.int32, scratch)
        sel = self._buf("sel", (cap,), cp.uint64, scratch)
        best = self._buf("best", (B,), cp.uint32, scratch)
        comp = self._buf("comp", (B, k), cp.uint64, scratch)
        n_out = self._buf("n_out", (B,), cp.int32, scratch)
        ghist = self._buf("ghist", (B, NB), cp.uint32, scratch)
        st = self._buf("state", (B, ST), cp.int64, scratch)
        parent, token, node, score, out_count = out
        best.fill(0)
        ghist.fill(0)
        D = np.int32(min(int(max_children), 2**31 - 1))
        self.k_count((B,), (1024,), (self.params, node_ids, row_req, req_rows, np.int32(B), D, row_off, count))
        self.k_base((1,), (1,), (count, np.int32(B), base))
        if R:
            self.k_expand(((R * 32 + 255) // 256,), (256,),
                          (self.params, node_ids, logprobs, np.int32(lp_dtype), np.int32(self.vocab), beam_scores,
                           row_req, req_rows, row_off, np.int64(R), np.int32(B), D, base, cand, child, best))
        # Lazy CD+GTM top-k over the whole GPU: G blocks per request for every pass over candidates.
        g_hist = max(1, (2 * self.sms) // B)
        g_round = max(1, (8 * self.sms) // B)
        self.k_hist((B, g_hist), (1024,), (cand, count, base, best, ghist))
        self.k_plan((B,), (1024,), (ghist, count, np.int32(k), st))
        for r in range(ROUNDS):
            self.k_round((B, g_round), (256,), (self.params, q.params, cand, child, base, best, np.int32(gtm), st, sel))
            if r < ROUNDS - 1:
                self.k_replan(((B + 127) // 128,), (128,), (ghist, np.int32(B), np.int32(k),
                                                             np.int32(r == ROUNDS - 2), st))
        self.k_finish((B,), (1024,), (st, sel, base, np.int32(k), comp, n_out))
        if count_all or not gtm:  # without GTM a pass of its own too: paused ads make dead children (whether
            out_count.fill(0)      # any are is read on the device, so a captured graph follows later pauses)
            self.k_count_pass((B, g_round), (256,), (self.params, q.params, child, count, base, np.int32(gtm),
                                                     out_count))
        else:
            out_count.fill(-1)
        self.k_gather(((B * k + 255) // 256,), (256,), (self.params, node_ids, req_rows, row_off, comp, n_out,
                                                       np.int32(B), np.int32(k), parent, token, node, score))
        return out

    def _step_fused(self, node_ids, logprobs, lp_dtype, beam_scores, row_req, req_rows, q, k, gtm, count_all, D, cap,
                    out, scratch, history=None, rows_best_first=False, first_window=0):
        """The step as one cluster launch (kernels/gtm_fused.cu); node_ids int32 or int64; req_rows (int64 [B + 1],
        each request's first row) may be None (the kernel then finds them in row_req). rows_best_first: each
        request's rows come best score first (a ranked step output), so the kernel reads its best live score
        from the first row (any value is exact; a wrong flag only makes the step less lazy)."""
        R, B = int(node_ids.shape[0]), q.size
        if R * D >= 2**32:
            raise GtmkitError(f"{R} rows x {D} children per row exceed the GPU step's 32-bit candidate numbering")
        if node_ids.dtype not in (cp.int32, cp.int64):
            node_ids = node_ids.astype(cp.int64)
        cap = fused_scratch_slots(R, B, D, self.fused_cluster)
        cand = self._buf("cand", (cap,), cp.uint64, scratch)
        child = self._buf("child", (cap,), cp.int32, scratch)
        passed = self._buf("passed", (cap,), cp.uint64, scratch)
        grouped = self._buf("grouped", (cap,), cp.uint64, scratch)
        topsel = self._buf("topsel", (B, k), cp.uint64, scratch)
        parent, token, node, score, out_count = out
        h_in, h_t, h_out = history if history is not None else (None, 0, np.uint64(0))
        self._launch(self.k_fused, (B * self.fused_cluster,), (self.fused_threads,),
                     (self.params, q.params, node_ids, np.int32(node_ids.dtype == cp.int64), logprobs,
                      np.int32(lp_dtype), np.int32(self.vocab), beam_scores, row_req, np.int64(R), np.int32(D),
                      np.int32(k), np.int32(gtm), np.int32(count_all), cand, child, passed, grouped, topsel,
                      parent, token, node, score, out_count,
                      self.profile if self.profile is not None else np.uint64(0),
                      req_rows if req_rows is not None else np.uint64(0),
                      h_in if h_in is not None else np.uint64(0), np.int32(h_t), h_out,
                      np.int32(bool(rows_best_first)), np.int32(min(max(int(first_window), 0), 2**31 - 1))),
                     FUSED_SMEM)
        return out

    def _launch(self, func, grid, block, args, shared_mem: int = 0) -> None:
        """A launch of a kernel that waits at GRID_DEP_WAIT (kernels/gtm_common.cuh): with PDL when self.pdl."""
        if self.pdl:
            from .pdl import launch
            launch(func, grid, block, args, shared_mem)
        else:
            func(grid, block, args, shared_mem=shared_mem)

    def mask(self, node_ids, row_req, q: DeviceBatch, gtm: bool):
        node_ids, row_req = node_ids.reshape(-1), row_req.reshape(-1)
        R = int(node_ids.shape[0])
        if row_req.shape[0] != R:
            raise GtmkitError(f"row_request has {row_req.shape[0]} rows, node_ids {R}")
        words = -(-self.vocab // 32)
        out = cp.zeros((R, words), cp.uint32)
        if R:
            self.k_mask(((R * 32 + 255) // 256,), (256,), (self.params, q.params, node_ids, row_req, np.int64(R),
                                                          np.int32(q.size), np.int32(words), np.int32(gtm), out))
        return out.view(cp.int32)

    def prefix_nodes(self, tokens, start: int, depth: int, offsets):
        """int64 [R]: the node each row's prefix tokens[:, start:start+depth] - offsets leads to, -1 if none.
        tokens int64 [R, S] contiguous, offsets int64 [>= depth] on the device."""
        if self.k_prefix is None:
            self.k_prefix = load_module(PREFIX_FILE).get_function("prefix_nodes_kernel")
        R = int(tokens.shape[0])
        out = cp.empty(R, cp.int64)
        if R:
            d = self.d
            self.k_prefix(((R + 255) // 256,), (256,), (
                d["node_offsets"], d["child_tokens"], np.int64(d["node_offsets"].shape[0] - 1), tokens,
                np.int64(tokens.shape[1]), np.int64(start), np.int32(depth), offsets, np.int64(self.vocab),
                np.int64(R), out))
        return out

    def mask_scores_fits(self) -> bool:
        """Whether mask_scores_kernel's shared bitmasks fit this index's vocabulary."""
        return MASK_SCORES_WARPS * 4 * (-(-self.vocab // 32)) <= MASK_SCORES_SMEM

    def mask_scores(self, tokens, tok_stride: int, start: int, depth: int, offsets, q: DeviceBatch, rows_per_req: int,
                    gtm: bool, scores, row_stride: int, elem_bytes: int, neg_inf: int, R: int, C: int, offset: int,
                    eos: int, eos_only: bool):
        """One launch: each row's node from its prefix, its CD(+GTM) children, -inf written into every column of
        scores it may not take (docs/design.md §8). tokens and scores: device arrays or raw device pointers."""
        if not R or not C:
            return
        words = -(-self.vocab // 32)
        self.k_mask_scores(((R + MASK_SCORES_WARPS - 1) // MASK_SCORES_WARPS,), (32 * MASK_SCORES_WARPS,), (
            self.params, q.params, tokens, np.int64(tok_stride), np.int64(start), np.int32(depth), offsets,
            np.int64(rows_per_req), np.int32(q.size), np.int32(gtm), scores, np.int64(row_stride), np.int32(elem_bytes),
            np.uint64(neg_inf), np.int64(R), np.int64(C), np.int64(offset), np.int64(self.vocab), np.int64(eos),
            np.int32(eos_only), np.int32(words)), shared_mem=MASK_SCORES_WARPS * 4 * words)

    def postfilter_padded(self, leaves, q: DeviceBatch, exact: bool, out=None, scratch=None):
        """(ads int64 [B, cap], sid_rank int32 [B, cap], counts int64 [B]) with cap = M * max ads per SID;
        entries past counts[b] are unspecified. leaves: int32 or int64 [B, M], contiguous."""
        with self._enqueue_lock(scratch):
            return self._postfilter(leaves, q, exact, out, scratch)

    def _postfilter(self, leaves, q, exact, out, scratch):
        if leaves.dtype not in (cp.int32, cp.int64):
            leaves = leaves.astype(cp.int64)
        leaves64 = np.int32(leaves.dtype == cp.int64)
        if leaves.ndim != 2 or leaves.shape[0] != q.size:
            raise GtmkitError(f"leaf_nodes must be [num_requests={q.size}, M], got {list(leaves.shape)}")
        B, M = leaves.shape
        cap = max(M * self.max_ads_per_sid, 1)
        if out is None:
            out = (cp.empty((B, cap), cp.int64), cp.empty((B, cap), cp.int32), cp.empty(B, cp.int64))
        ads, rank, n = out
        chunks = -(-M // POST_SIDS)
        if B * chunks == 0:
            n.fill(0)
            return ads, rank, n
        # tickets and published counts: zero, and left zero by every launch's last block
        state = self._buf("post_state", (2,), cp.uint32, scratch, zero=True)
        published = self._buf("post_published", (B * chunks,), cp.uint64, scratch, zero=True)
        self._launch(self.k_post, (B * chunks,), (POST_THREADS,),
                     (self.params, q.params, self.ad_params, leaves, leaves64, np.int32(B), np.int32(M),
                      np.int64(self.first_leaf), np.int32(exact), np.int64(cap), ads, rank, n, state, published))
        return ads, rank, n
