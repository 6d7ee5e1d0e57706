"""`IndexMatcher`: the online CD+GTM operations on one loaded index, dispatched to a backend (`Matcher`, in
matcher.py, serves one and swaps it for another).

backend "cpu" = numba (cpu/step.py); "cuda" = CuPy RawKernels (imported only when chosen)."""

from __future__ import annotations

import logging
import threading
from typing import NamedTuple

import numba
import numpy as np

from .._gpu import cuda_available
from ..errors import GtmkitError, RequestError
from .cpu import step as K
from .cpu import select as select_cpu
from .cpu.prefix import prefix_nodes_kernel
from .._args import bool_arg, check_kind, check_memory, floats, ids, int_arg
from .arrays import stack_requests, trie_arrays
from .cuda.interop import device_array, device_index, device_logprobs, host_floats, host_ids, stream_of
from .options import CudaOptions, resolve


CPU_SELECTIONS = ("auto", "band", "buckets")
log = logging.getLogger("gtmkit")


class Step(NamedTuple):
    """Per-request top-k of one CD+GTM step. Arrays [num_requests, k]:
    parent_rows int32 (row of the input the candidate extends), tokens int32, nodes int32 (child node),
    all -1 where fewer than k candidates exist; scores float32 (beam_score + logprob), -inf there.
    num_candidates int64 [num_requests]: candidates that passed CD (and GTM when on) before the
    top-k; -1 when GTM was on and counting was not asked for (GTM runs lazily). version: the index version that
    answered (Index.version)."""

    parent_rows: np.ndarray
    tokens: np.ndarray
    nodes: np.ndarray
    scores: np.ndarray
    num_candidates: np.ndarray
    version: str = None


class IndexMatcher:
    """CD+GTM matcher over one Index (gtmkit.Matcher serves one of these at a time; its current() is one).

    device: "cpu" (numba), "cuda" (CuPy; needs a GPU) or "auto" (cuda when CuPy sees a GPU).

    options: a CudaOptions, how the GPU runs the step (checked on any device, used on the GPU; answers are the
    same with any of them); None: the defaults.

    cpu_selection: how the CPU step picks each request's top k: "auto" (default: the band selection for
    requests with at least 16384 candidates, buckets below), "band" or "buckets" (answers are the same).

    On the GPU the matcher keeps one set of scratch buffers, which its calls reuse: use one Matcher from one
    stream at a time (a GraphedBeamSearch owns its own buffers; build a Matcher per stream for concurrent
    work: the index tables are uploaded per Matcher).

    On the CPU one Matcher may be called from any number of threads at once, with answers equal to
    single-threaded ones: its kernels release the GIL, its only written state (the GTM pass-rate hint) is
    per thread, and gtmkit picks a re-entrant numba threading layer (tbb, else OpenMP) or, where only
    workqueue is available, serialises the parallel kernel launches (gtmkit/threads.py; docs/matcher.md,
    "Threads")."""

    def __init__(self, index, device: str = "cpu", options: CudaOptions = None, cpu_selection: str = "auto",
                 **deprecated):
        self.options = resolve(options, deprecated, "Matcher")
        if cpu_selection not in CPU_SELECTIONS:
            raise GtmkitError(f"cpu_selection must be 'auto', 'band' or 'buckets', got {cpu_selection!r}")
        self.cpu_selection = cpu_selection
        if device == "auto":
            device = "cuda" if cuda_available() else "cpu"
        if device not in ("cpu", "cuda"):
            raise GtmkitError(f"device must be 'cpu', 'cuda' or 'auto', got {device!r}")
        if device == "cuda" and not cuda_available():
            raise GtmkitError("device 'cuda' needs CuPy and a visible GPU (pip install 'gtmkit[gpu]')")
        self.index = index
        self.device = device
        log.debug("gtmkit: matcher on %s, index version %s", device, getattr(index, "version", None))
        self.arrays = trie_arrays(index)
        self.vocab_size = index.vocab_size
        self.first_leaf = index.first_leaf
        self._bloom_words = int(self.arrays.bloom_table.shape[1])
        self._bloom_widths = [int(t.shape[1]) for t in index.bloom_tables]
        self._max_degree = int(np.max(index.max_degree, initial=1))
        # GTM pass rate last seen per depth (CPU step), one array per thread (see _gtm_rate)
        self._rates = threading.local()
        # requests with this many candidates use the band selection
        self._band_from = {"auto": select_cpu.BAND_FROM, "band": 0, "buckets": 1 << 62}[cpu_selection]
        self._live_ads, self._live_lock = None, threading.Lock()  # paused ads (pause_ads)
        self.cuda = None
        if device == "cuda":
            from .cuda.backend import CudaBackend
            self.cuda = CudaBackend(self.arrays, index, self.options)
        paused = getattr(index, "paused_ad_ids", ())
        if len(paused) or getattr(index, "empty_sids", 0):  # served paused; SIDs an update left without ads pruned
            self._set_active(paused, False)

    @property
    def _gtm_rate(self) -> np.ndarray:
        """This thread's GTM pass rate per depth, written by the CPU step kernel: it sizes the first band
        of candidates kept, so it changes speed only, never an answer (tests/gtm/test_matcher_cpu.py runs
        the band selection under extreme hints); per thread so threads do not share a written array."""
        rate = getattr(self._rates, "gtm", None)
        if rate is None:
            rate = self._rates.gtm = np.full(len(self.index.level_offsets), 1.0 / 3.0)
        return rate

    @property
    def version(self) -> str:
        """The index version this matcher answers from (Index.version)."""
        return self.index.version

    def current(self) -> "IndexMatcher":
        """This matcher (a Matcher's current() is the IndexMatcher it serves now; one call sequence, such as a
        search, runs on one)."""
        return self

    @property
    def xp(self):
        """The array module of this matcher's outputs (numpy, or cupy on the GPU)."""
        if self.cuda is None:
            return np
        import cupy
        return cupy

    @property
    def device_bytes(self) -> int:
        """Bytes of index tables resident on the GPU (0 on the CPU)."""
        return self.cuda.nbytes if self.cuda is not None else 0

    # --- inputs -----------------------------------------------------------------------------
    def batch(self, requests):
        """Stack encoded requests once (beam_search does this; pass the batch to every step).
        On the GPU the batch is uploaded once too. Every request is checked against the index, and one encoded for
        another index (before a swap or update: its fingerprint differs) is encoded again from its attributes, as is
        a batch stacked for another index (docs/design.md §9). A RequestBatch that this did not build is checked
        whole on each use."""
        if self.cuda is not None:
            from .cuda.backend import DeviceBatch
            if isinstance(requests, DeviceBatch):
                host = requests.host
                if getattr(host, "sealed", None) is not None and host.sealed() and \
                        host.fingerprint == self.index.fingerprint:
                    return requests
                requests = host
        ix = self.index
        q = stack_requests(requests, len(ix.layout.names), ix.layout.words, len(ix.bloom), self._bloom_words,
                           self._bloom_widths, ix.follow, ix.fingerprint)
        return self.cuda.batch(q) if self.cuda is not None else q

    def encode_request(self, user: dict):
        """The user's request encoded against the index this matcher serves (Index.encode_request)."""
        return self.index.encode_request(user)

    def _rows(self, node_ids, row_request, n_requests):
        """Host node ids and request numbers, checked. A node id that is not an internal node (leaves,
        ids past the trie, negatives) is a dead row: no candidates, nothing in the mask."""
        node_ids = ids(node_ids, "node_ids")
        row_request = ids(row_request, "row_request")
        if row_request.shape != node_ids.shape:
            raise GtmkitError(f"row_request has {len(row_request)} rows, node_ids {len(node_ids)}")
        if len(node_ids) >= 2**31:
            raise GtmkitError(f"{len(node_ids)} rows: at most 2^31 - 1 (parent rows are int32)")
        starts = np.empty(n_requests + 1, np.int64)
        if not K.request_starts(row_request, starts):  # one numba pass: checks and offsets together
            raise GtmkitError("row_request must be non-decreasing request numbers in [0, num_requests)")
        return node_ids, row_request, starts

    def _step_args(self, k, gtm, count_candidates, max_children, rows_best_first):
        k = int_arg(k, "k")
        if max_children is not None:
            max_children = int_arg(max_children, "max_children")
        return (k, bool_arg(gtm, "gtm"), bool_arg(count_candidates, "count_candidates"), max_children,
                bool_arg(rows_best_first, "rows_best_first"))

    @staticmethod
    def _check_output(B: int, k: int, scratch_per_thread: int) -> None:
        """Refuse a k whose [B, k] outputs (16 bytes a slot) and per-thread scratch cannot fit."""
        if (B * 16 + scratch_per_thread) * k > 1 << 26:  # reading the OS's figures costs more than a small step
            check_memory(B * k * 16 + numba.get_num_threads() * scratch_per_thread * k, f"k={k} for {B} requests")

    def _check_scratch(self, B: int, k: int, starts: np.ndarray, count_all: bool) -> None:
        """Refuse a CPU step whose [B, k] outputs and selection scratch cannot fit: an allocation failing inside
        the parallel kernel is a SystemError. A request's scratch (cpu/select.py), held by one thread at a time:
        8 bytes a row, the bucket selection's 29 bytes a candidate (under BAND_FROM of them), the band's 24 bytes
        a kept candidate (at most 160 k + 1025: its `want` stays below 80 k) and its passers; counting every
        candidate keeps all of them (32 bytes each)."""
        def need(rows: int) -> int:
            C = rows * self._max_degree  # (bound: every row at the widest node)
            per = 8 * (rows + 1) + 29 * min(C, select_cpu.BAND_FROM) + (
                32 * C if count_all else 24 * min(C, 160 * k + 1025) + 16 * (k + 65))
            return B * k * 16 + min(B, numba.get_num_threads()) * per

        if need(int(starts[-1])) > 1 << 28:  # (all rows in one request: a bound in O(1) for the common small step)
            rows = int(np.max(np.diff(starts), initial=0))
            if need(rows) > 1 << 28:  # reading the OS's figures costs more than a small step
                check_memory(need(rows), f"k={k} for {B} requests of up to {rows} rows")

    # --- operations --------------------------------------------------------------------------
    def step(self, node_ids, logprobs, beam_scores, row_request, requests, k: int, gtm: bool = True,
             count_candidates: bool = False, max_children: int = None, rows_best_first: bool = False) -> Step:
        """One fused CD+GTM step with top-k per request (docs/design.md §5).

        node_ids int [R] (-1, or any id that is not an internal node = dead row), logprobs float [R, V],
        beam_scores float [R], row_request int [R] (non-decreasing: rows of a request are contiguous),
        requests: encoded requests or a RequestBatch. A candidate scores float32(beam_score + logprob);
        NaN ranks as -inf, +inf above every finite score. Ties: score desc, then parent row asc, then
        token asc.
        On the GPU, inputs may be numpy, CuPy or torch CUDA tensors (DLPack, no copy; logprobs float32,
        float16 or bfloat16), outputs are CuPy arrays, and nothing waits for the device; max_children
        (the largest out-degree among the rows' nodes, e.g. index.max_degree[depth]) sizes the
        candidate buffer, default the index's largest. rows_best_first: each request's rows come best
        beam score first, as a previous step returns them; the GPU step then reads the request's best score
        from its first row instead of scanning them (the answer is the same either way)."""
        k, gtm, count_candidates, max_children, rows_best_first = self._step_args(
            k, gtm, count_candidates, max_children, rows_best_first)
        q = self.batch(requests)
        B = q.size
        if self.cuda is not None:
            self._check_output(B, k, 0)  # (host memory: the device's is the backend's to check)
            return self._step_cuda(node_ids, logprobs, beam_scores, row_request, q, k, gtm, count_candidates,
                                   max_children, rows_best_first)
        node_ids, _, starts = self._rows(node_ids, row_request, B)
        logprobs = floats(logprobs, "logprobs", 2)
        beam_scores = floats(beam_scores, "beam_scores", 1)
        R = len(node_ids)
        if logprobs.shape != (R, self.vocab_size) or beam_scores.shape != (R,):
            raise GtmkitError(f"expected logprobs [{R}, {self.vocab_size}] and beam_scores [{R}], got "
                              f"{list(logprobs.shape)} and {list(beam_scores.shape)}")
        if R * self._max_degree >= 2**32:  # a candidate's number within its request is 32 bits (select_cpu)
            raise GtmkitError(f"{R} rows of up to {self._max_degree} children: more than 2^32 candidates")
        self._check_scratch(B, k, starts, gtm and count_candidates)
        out = Step(np.empty((B, k), np.int32), np.empty((B, k), np.int32), np.empty((B, k), np.int32),
                   np.empty((B, k), np.float32), np.empty(B, np.int64))  # the kernel writes every slot
        K.step_kernel(self.arrays, q, starts, node_ids, logprobs, beam_scores, k, gtm,
                      count_candidates, *out[:5], self._gtm_rate, self._band_from)
        return out._replace(version=self.version)

    def mask(self, node_ids, row_request, requests, gtm: bool = True) -> np.ndarray:
        """int32 [R, ceil(V/32)]: bit v % 32 of word v // 32 set iff token v is allowed for row r."""
        gtm = bool_arg(gtm, "gtm")
        q = self.batch(requests)
        if self.cuda is not None:
            check_kind(node_ids, "node_ids", "iu", "integers")
            check_kind(row_request, "row_request", "iu", "integers")
            node_ids, row_request = host_ids(node_ids, "node_ids"), host_ids(row_request, "row_request")
            with stream_of(node_ids):
                return self.cuda.mask(device_array(node_ids, "int64"), device_array(row_request, "int64"), q, gtm)
        node_ids, row_request, _ = self._rows(node_ids, row_request, q.size)
        out = np.zeros((len(node_ids), -(-self.vocab_size // 32)), np.uint32)
        K.mask_kernel(self.arrays, q, node_ids, row_request, gtm, out)
        return out.view(np.int32)

    def prefix_nodes(self, tokens, offsets=0, start: int = 0):
        """Node recovery: int64 [R], the trie node of each row's SID prefix tokens[r, start:] (-1 when the
        prefix is not in the trie: a token outside [0, V) or not a child). tokens: integers [R, S] (numpy, or
        on the GPU also CuPy / torch CUDA tensors, read where they lie); offsets: an int subtracted from every
        token, or one int per prefix position (tokens as a model's vocabulary holds them, e.g. TIGER-style
        ranges per position). A prefix longer than L leads nowhere (-1). On the GPU the output is a CuPy
        array and nothing waits for the device."""
        start = int_arg(start, "start", lo=0)
        check_kind(tokens, "tokens", "iu", "integers")
        tokens = host_ids(tokens, "tokens", ndim=2)
        shape = tuple(tokens.shape)
        if len(shape) != 2 or start > shape[1]:
            raise GtmkitError(f"tokens must be [R, S] integers with S >= start={start}, got shape {list(shape)}")
        depth = shape[1] - start
        if self.cuda is not None:
            with stream_of(tokens):
                return self.cuda.prefix_nodes(device_array(tokens, "int64"), start, depth, _dev_offsets(offsets, depth))
        offs = _offsets(offsets, depth)
        tokens = ids(tokens, "tokens", ndim=2)  # (device tensors handed to the CPU matcher)
        out = np.empty(len(tokens), np.int64)
        prefix_nodes_kernel(self.arrays.node_offsets, self.arrays.child_tokens, tokens, start, depth, offs,
                            self.vocab_size, out)
        return out

    def postfilter(self, leaf_nodes, requests, exact: bool = True) -> list:
        """Expand each request's SIDs (leaf_nodes [B, M], -1 padded) to ads and keep the exactly
        eligible ones. Returns per request (ad_ids int64, sid_rank int32): SID rank order, then ad id.
        An id that is not a leaf (outside [first_leaf, num_nodes)) is skipped like the -1 padding."""
        exact = bool_arg(exact, "exact")
        q = self.batch(requests)
        if self.cuda is not None:
            ads, rank, n = self.postfilter_padded(leaf_nodes, q, exact)
            counts = n.get()  # the one host round trip: per-request lengths
            return [(ads[b, :counts[b]], rank[b, :counts[b]]) for b in range(q.size)]
        leaves = ids(leaf_nodes, "leaf_nodes", ndim=2)
        if leaves.shape[0] != q.size:
            raise GtmkitError(f"leaf_nodes must be [num_requests={q.size}, M], got {list(leaves.shape)}")
        # Room for every ad of the SIDs, then one pass that tests and writes: a count pass before the fill would
        # see another pause state than the fill if a pause came between them (paused ads: design.md §9)
        sao = self.arrays.sid_ad_offsets
        s = leaves - self.first_leaf
        inside = (s >= 0) & (s < len(sao) - 1)
        s = np.where(inside, s, 0)
        room = np.where(inside, sao[s + 1] - sao[s], 0).sum(axis=1)
        offsets = np.zeros(q.size + 1, np.int64)
        np.cumsum(room, out=offsets[1:])
        counts = np.zeros(q.size, np.int64)
        ads = np.empty(int(offsets[-1]), np.int64)
        rank = np.empty(int(offsets[-1]), np.int32)
        K.postfilter_kernel(self.arrays, q, leaves, self.first_leaf, exact, offsets, ads, rank, counts)
        return [(ads[offsets[b]:offsets[b] + counts[b]], rank[offsets[b]:offsets[b] + counts[b]])
                for b in range(q.size)]

    def postfilter_padded(self, leaf_nodes, requests, exact: bool = True):
        """GPU post-filter without a host round trip: (ad_ids int64 [B, cap] -1 padded, sid_rank int32
        [B, cap], counts int64 [B]), cap = M * the largest number of ads of one SID."""
        if self.cuda is None:
            raise GtmkitError("postfilter_padded is the GPU form; use postfilter on the CPU")
        exact = bool_arg(exact, "exact")
        check_kind(leaf_nodes, "leaf_nodes", "iu", "integers")
        q = self.batch(requests)
        with stream_of(leaf_nodes):
            return self.cuda.postfilter_padded(device_index(leaf_nodes), q, exact)

    # --- catalog changes ---------------------------------------------------------------------
    def pause_ads(self, ad_ids) -> int:
        """Pause ads by id (docs/design.md §9): from the next call on, a paused ad never leaves the post-filter
        and a node with no active ad below it is pruned by CD as if absent (step, mask, beam search). Unknown
        ids: RequestError, nothing changed. Returns how many of the ads were active."""
        return self._set_active(ad_ids, False)

    def resume_ads(self, ad_ids) -> int:
        """Undo pause_ads for these ids; returns how many of them were paused."""
        return self._set_active(ad_ids, True)

    @property
    def num_paused(self) -> int:
        live = self._live_ads
        return live.num_paused if live is not None else 0

    def paused_ads(self) -> np.ndarray:
        """int64: the paused ads' ids, ascending."""
        live = self._live_ads
        return live.paused_ids() if live is not None else np.zeros(0, np.int64)

    def _set_active(self, ad_ids, active: bool) -> int:
        """The paused-ad state is made at the first pause (until then the kernels skip the checks); on the GPU it
        is kept and changed on the device only (cuda/live.py), and a change is done when this returns."""
        with self._live_lock:
            if self._live_ads is None:
                if self.cuda is not None:
                    from .cuda.live import DeviceLiveAds
                    self._live_ads = DeviceLiveAds(self.cuda, self.index)
                else:
                    from .live import LiveAds
                    live = LiveAds(self.index)
                    self.arrays = self.arrays._replace(live=np.ones(1, np.int32), node_live=live.counts,
                                                       ad_active=live.active).read_only()
                    self._live_ads = live
        return self._live_ads.set_active(ad_ids, active)

    @property
    def live_version(self) -> int:
        """Pauses and resumes made so far: what depends on them (a cached mask) is stale when this changes."""
        live = self._live_ads
        return live.version if live is not None else 0

    def _step_cuda(self, node_ids, logprobs, beam_scores, row_request, q, k, gtm, count_candidates, max_children,
                   rows_best_first=False):
        for x, name, kinds in ((node_ids, "node_ids", "iu"), (row_request, "row_request", "iu"),
                               (logprobs, "logprobs", "fiu"), (beam_scores, "beam_scores", "fiu")):
            check_kind(x, name, kinds, "integers" if kinds == "iu" else "floats")
        node_ids, row_request = host_ids(node_ids, "node_ids"), host_ids(row_request, "row_request")
        logprobs, beam_scores = host_floats(logprobs, "logprobs", 2), host_floats(beam_scores, "beam_scores", 1)
        with stream_of(logprobs):
            nodes = device_index(node_ids).reshape(-1)
            R = int(nodes.shape[0])
            lp, lp_dtype = device_logprobs(logprobs)
            if tuple(lp.shape) != (R, self.vocab_size):
                raise GtmkitError(f"expected logprobs [{R}, {self.vocab_size}], got {list(lp.shape)}")
            bs = device_array(beam_scores, "float32").reshape(-1)
            rr = device_array(row_request, "int64").reshape(-1)
            if bs.shape[0] != R or rr.shape[0] != R:
                raise GtmkitError(f"beam_scores and row_request need {R} rows")
            mc = int(max_children) if max_children is not None else max(self.cuda.max_degree)
            out = self.cuda.step(nodes, lp, lp_dtype, bs, rr, None, q, k, gtm, count_candidates, mc,
                                 rows_best_first=rows_best_first)
        return Step(*out, version=self.version)


def _offsets(offsets, depth: int) -> np.ndarray:
    """Per-position token offsets as int64 [max(depth, 1)]: an int repeated, or the first depth of a sequence."""
    if isinstance(offsets, (int, np.integer)) and not isinstance(offsets, (bool, np.bool_)):
        return np.full(max(depth, 1), _int64(offsets, "offsets"), np.int64)
    offs = ids(offsets, "offsets")
    if len(offs) < depth:
        raise GtmkitError(f"offsets: {len(offs)} positions for prefixes of {depth} tokens")
    return np.ascontiguousarray(offs[:max(depth, 1)]) if len(offs) else np.zeros(1, np.int64)


def _dev_offsets(offsets, depth: int):
    """Offsets on the device: a CuPy int64 array of >= depth entries as it is (no upload, so no wait for the
    stream: a pageable host-to-device copy synchronises it), an int as a device fill, anything else uploaded."""
    import cupy as cp
    if isinstance(offsets, cp.ndarray) and offsets.dtype == cp.int64 and offsets.ndim == 1:
        if offsets.shape[0] < depth:
            raise GtmkitError(f"offsets: {offsets.shape[0]} positions for prefixes of {depth} tokens")
        return offsets if offsets.shape[0] else cp.zeros(1, cp.int64)
    if isinstance(offsets, (int, np.integer)) and not isinstance(offsets, (bool, np.bool_)):
        return cp.full(max(depth, 1), _int64(offsets, "offsets"), cp.int64)
    return cp.asarray(_offsets(offsets, depth))


def _int64(x, name: str) -> int:
    if not -2**63 <= int(x) < 2**63:
        raise RequestError(f"{name} must fit int64, got {int(x)}")
    return int(x)
