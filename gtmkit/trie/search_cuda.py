"""Constrained beam search over a SuccinctTrie on the GPU: NAR `trie_beam_search_cuda` and AR
`TrieBeamStepperCuda`, with the semantics and tie rules of trie/search_cpu.py (exactly equal results).

A NAR call with host proposals stages them and the float64 length factors in a pinned buffer and replays
a CUDA graph, captured once per (shape, trie, thresholds), of one `search_kernel` launch: a cluster of CL
blocks per query (kernels/trie_search.cu says why) first filters, sorts by token and dedupes the query's
proposal rows straight from the pinned buffer, then runs all steps and writes the results into pinned
memory; the call waits and returns NumPy copies. Rows longer than the kernel can sort in shared memory go
through `prep_kernel` (one block per row) first, and rows longer than PREP_CAP are prepared on the host
(numba, as on the CPU). CuPy proposals are staged on the device and give CuPy results with no host
synchronisation; the AR stepper prepares its per-beam rows with `prep_kernel` and runs one step a launch.
Buffers are allocated once per shape and reused.

`device` below is a CupyDevice; tests/cuda/test_trie_gpu_emu.py passes a CPU emulation with the same methods,
which is how the kernels are checked without a GPU. `cluster` (CL, default 8): the thread blocks (SMs) that
search one query, 1 to 8; GPUs before sm_90 have no thread block clusters and always take 1; other values
than the default compile a kernel of their own. A given device object has its own and ignores it."""

from __future__ import annotations

import math
from typing import NamedTuple
from pathlib import Path

import numpy as np
from numba import njit

from ..errors import GtmkitError
from ..inputs.keys import MAX_TOKEN
from .._args import int_arg
from . import gpu_tables as aux
from .search_cpu import LiveBeams, _beam_width, _float, _prepare_rows, _trie_arrays, length_factors, stepper_settings

KERNEL_FILE = Path(__file__).with_name("kernels") / "trie_search.cu"
NT, SORT_CAP, PREP_CAP, BEAM_CAP, TOK_CAP, SEL_CAP, CL = 1024, 2048, 4096, 1024, 4096, 4096, 8  # as compiled in kernels/trie_search.cu (CL: blocks a query)
FAC_CAP = 64  # kernels/trie_search.cu: length factors a launch keeps in shared memory
TRIE_FIELDS = ("louds", "louds_rank", "louds_select0", "label_low", "label_high", "high_bits", "terminal",
               "terminal_rank")  # the kernel's TP_* table, then the lookup tables of gpu_tables
TAIL_ARRAY_NAMES = ("label_tail", "label_tail_rank", "tail_dict", "tail_low", "tail_wide", "tail_wide_rank",
                    "tail_high")  # TP_LABEL_TAIL .. TP_TAIL_HIGH, then tail_nodes, the two code widths, TP_LOW_BITS ..
KEPT_SHAPES = 4  # NAR buffer sets kept per device (least recently used dropped)
MAX_CLUSTER = 8  # the portable thread block cluster size


def check_cluster(cluster, what: str) -> int:
    """The `cluster` argument of the trie searches, checked (1 to 8)."""
    if int_arg(cluster, f"{what}: cluster") > MAX_CLUSTER:
        raise GtmkitError(f"{what}: cluster must be 1 to {MAX_CLUSTER}, got {cluster!r}")
    return int(cluster)


class CupyDevice:
    """The current CUDA device as the search uses it, with `cluster` blocks a query (1 before sm_90)."""

    nt, sort_cap, prep_cap, beam_cap, tok_cap, sel_cap = NT, SORT_CAP, PREP_CAP, BEAM_CAP, TOK_CAP, SEL_CAP
    null = np.uint64(0)  # a null pointer argument

    def __init__(self, cluster: int = CL):
        import cupy
        import cupyx
        from .._gpu import load_module
        self.cp, self._cupyx = cupy, cupyx
        self.cl = cluster if int(cupy.cuda.Device().compute_capability[:-1]) >= 9 else 1
        # (the trie's uploaded tables are per device, whatever the cluster size)
        self.key = ("cuda", cupy.cuda.Device().id)
        self._load, self._defines = load_module, () if self.cl == CL else (f"CL={self.cl}",)
        self._kernels = {}  # (name, layout) -> kernel: one module a label layout
        self.kernel("search_kernel")
        self.buffers = {}
        self._smem_opt_in = {}  # kernel name -> the kernel object whose dynamic shared memory limit was raised
        self.graph_error = None  # why replay() could not capture a graph, if it could not

    def empty(self, shape, dtype):
        return self.cp.empty(shape, dtype)

    def asarray(self, a):
        return self.cp.asarray(a)

    def ptr(self, a) -> int:
        return int(a.data.ptr)

    def pinned(self, nbytes: int) -> np.ndarray:
        return self._cupyx.empty_pinned((nbytes,), np.uint8)

    def is_device_array(self, a) -> bool:
        return isinstance(a, self.cp.ndarray)

    def to_host(self, a):
        return a.get() if isinstance(a, self.cp.ndarray) else a

    def copy_in(self, dst, host: np.ndarray, nbytes: int) -> None:
        """Asynchronous copy of host[:nbytes] (pinned) to dst on the current stream. Through the runtime:
        CuPy's own copy refuses a capturing stream, which CUDA allows from pinned memory."""
        rt = self.cp.cuda.runtime
        rt.memcpyAsync(int(dst.data.ptr), int(host.ctypes.data), int(nbytes), 1,  # cudaMemcpyHostToDevice
                       self.cp.cuda.get_current_stream().ptr)

    def host_ptr(self, a: np.ndarray):
        """A kernel argument pointing at pinned host memory a, which kernels read and write in place
        (unified addressing: the device uses the host's pointer)."""
        return np.uint64(a.ctypes.data)

    def mark(self, done=None):
        """An event after the work queued so far on the current stream (`done`, recorded again, or a new one)."""
        done = done if done is not None else self.cp.cuda.Event(disable_timing=True)
        done.record(self.cp.cuda.get_current_stream())
        return done

    def upload(self, dst, host: np.ndarray, nbytes: int, done=None):
        """copy_in -> an event to wait on before reusing host."""
        self.copy_in(dst, host, nbytes)
        return self.mark(done)

    def replay(self, graphs: dict, key, submit) -> None:
        """submit()'s copies and launches, as a CUDA graph captured at the first call with this key and
        replayed on the current stream after: submitting a NAR search's copy and two launches one by one costs
        host time, while the GPU waits, longer than most of the search itself."""
        cp = self.cp
        graph = graphs.get(key)
        if graph is None:  # first use: run it eagerly (loads the kernels, which a capture must not do) and
            submit()       # capture it for the next calls
            cap = cp.cuda.Stream(non_blocking=True)
            try:
                with cap:
                    cap.begin_capture()
                    try:
                        submit()
                    finally:
                        graph = cap.end_capture()
            except Exception as exc:  # a runtime that cannot capture: stay eager (slower, same results)
                self.graph_error = f"{type(exc).__name__}: {exc}"
                graph = False
            graphs[key] = graph
            return
        if graph is False:
            submit()
            return
        graph.launch(cp.cuda.get_current_stream())

    def order(self, buf) -> None:
        """Work on buf's device buffers queued on another stream finishes before the current stream uses them."""
        stream = self.cp.cuda.get_current_stream()
        if buf.stream is not None and buf.stream.ptr != stream.ptr:
            done = self.cp.cuda.Event(disable_timing=True)
            done.record(buf.stream)
            stream.wait_event(done)
        buf.stream = stream

    def kernel(self, name: str, layout: tuple = ()):
        """The kernel `name` compiled for a trie label layout (trie_layout)."""
        key = (name, layout)
        if key not in self._kernels:
            self._kernels[key] = self._load(KERNEL_FILE, self._defines + layout).get_function(name)
        return self._kernels[key]

    def launch(self, name: str, grid: int, args: tuple, smem: int = 0, layout: tuple = ()) -> None:
        """grid blocks of nt threads (search_kernel: in clusters of cl, compiled in) with smem bytes of
        dynamic shared memory (above 48 KiB a kernel must opt in, once per kernel object); layout: the trie's
        label layout (trie_layout), compiled in."""
        kernel = self.kernel(name, layout)
        if smem > 48 * 1024 and self._smem_opt_in.get((name, layout)) is not kernel:
            kernel.max_dynamic_shared_size_bytes = smem
            self._smem_opt_in[(name, layout)] = kernel
        kernel((grid,), (self.nt,), args, shared_mem=smem)


_devices = {}


def cuda_device(cluster: int = CL) -> CupyDevice:
    """The current device's CupyDevice for `cluster` blocks a query (checked: check_cluster), one per device and
    cluster size."""
    import cupy
    key = (cupy.cuda.Device().id, int(cluster))
    if key not in _devices:
        _devices[key] = CupyDevice(key[1])
    return _devices[key]


def _addressable(x: np.ndarray) -> np.ndarray:
    """x, or one zero of its dtype where x is empty: an empty array still needs an address."""
    return x if x.size else np.zeros(1, x.dtype)


class TrieParams(NamedTuple):
    """A trie as the kernels take it on one device."""

    table: object   # int64 device array: the kernels' TP_* pointer table
    layout: tuple   # the label layout's defines the kernels are compiled with (trie_layout)


def trie_layout(a) -> tuple:
    """The defines of a trie's label layout (kernels/trie_nav.cuh): none for format 2's, so its kernels are
    format 2's."""
    return tuple(d for d, on in (("TRIE_TAILS=1", a.tail_nodes), ("TRIE_LOW8=1", a.low_bits == 8),
                                 ("TRIE_CONST=1", len(a.level_label))) if on)


def _trie_params(dev, trie, what: str) -> TrieParams:
    """The trie's arrays on the device and their pointer table, uploaded once per trie and device."""
    cache = trie.__dict__.setdefault("_cuda_trie", {})
    if dev.key not in cache:
        a = _trie_arrays(trie, what)
        if trie.num_nodes >= 2**32 - 1:  # node and key ids sit in 32 bits of the kernel's composites
            raise GtmkitError(f"{what}: {trie.num_nodes} nodes are too many for the GPU search (< 2^32 - 1)")
        arrays = {name: dev.asarray(np.ascontiguousarray(_addressable(getattr(a, name)))) for name in TRIE_FIELDS
                  if name not in ("high_bits", "louds")}
        arrays["louds"] = dev.asarray(aux.louds_padded(a.louds))
        nbits = 2 * trie.num_nodes + 1
        max_wide = aux.max_wide_groups(trie.nbytes, aux.ZERO_SHIFT)
        zpos, zwide = aux.zero_samples(a.louds, nbits, aux.ZERO_SHIFT, max_wide)
        arrays["zpos"], arrays["zwide"] = dev.asarray(zpos), dev.asarray(zwide if zwide.size else np.zeros(1, np.int64))
        bits, before, root_nbits = aux.root_directory(a)
        arrays["root_bits"], arrays["root_rank"] = dev.asarray(bits), dev.asarray(before)
        root_first, root_end = (int(x) for x in trie.child_range(0))
        table = [int(a.high_bits) if name == "high_bits" else dev.ptr(arrays[name]) for name in TRIE_FIELDS]
        table += [dev.ptr(arrays["zpos"]), aux.ZERO_SHIFT, dev.ptr(arrays["root_bits"]), dev.ptr(arrays["root_rank"]),
                  root_nbits, root_first, root_end - root_first, dev.ptr(arrays["zwide"])]
        for name in TAIL_ARRAY_NAMES:
            arrays[name] = dev.asarray(np.ascontiguousarray(_addressable(getattr(a, name))))
            table.append(dev.ptr(arrays[name]))
        table += [int(a.tail_nodes), int(a.tail_low_bits), int(a.tail_high_bits), int(a.low_bits)]
        k = len(a.level_label)
        level_first = np.asarray(a.level_offsets[len(a.level_offsets) - 1 - k:-1], np.int64)
        arrays["level_label"] = dev.asarray(np.ascontiguousarray(_addressable(a.level_label)))
        arrays["level_first"] = dev.asarray(np.ascontiguousarray(_addressable(level_first)))
        table += [dev.ptr(arrays["level_label"]), dev.ptr(arrays["level_first"]), k, int(a.const_from)]
        cache[dev.key] = (arrays, TrieParams(dev.asarray(np.array(table, np.int64)), trie_layout(a)))
    return cache[dev.key][1]


def search_smem(dev) -> int:
    """Dynamic shared memory of search_kernel (its s_* carve-up), bytes."""
    return 8 * dev.sort_cap + 8 * FAC_CAP + 20 * dev.beam_cap + 4 * (dev.beam_cap + 1) + 4 * (256 + 33 + 8)\
        + 8 * dev.tok_cap + 8 * dev.sel_cap


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


class _Buffers:
    """Device buffers of one search shape (kernels/trie_search.cu, SP_* table), the staging buffers, and
    the live list / finished keys, which `keep` (an AR stepper's previous set) hands over."""

    def __init__(self, dev, b: int, bw: int, rows: int, k: int, nf: int, keep: "_Buffers" = None):
        try:
            self._allocate(dev, b, bw, rows, k, nf, keep)
        except MemoryError as exc:  # CuPy's OutOfMemoryError is one
            need = b * bw * (k + 1) * 8 + b * max(bw * k, 1) * 48  # the finished keys and two candidate sets
            raise GtmkitError(f"trie search of {b} queries with beam_width={bw}, k={k} would need at least "
                              f"{need / 2**30:.1f} GiB of device memory ({str(exc).splitlines()[0][:120]})") from None

    def _allocate(self, dev, b, bw, rows, k, nf, keep):
        e = dev.empty
        self.b, self.bw, self.rows, self.k, self.nf = b, bw, rows, k, nf
        if keep is None:
            self.live = LiveBeams(e((b, bw), np.int64), e((b, bw), np.float32), e((b, bw), np.int32),
                                  e((b, bw), np.int32), e((b,), np.int32))
            self.live_first, self.live_deg = e((b, bw), np.int64), e((b, bw), np.uint32)  # child ranges
            self.fin_count = e((b,), np.int32)
        else:
            self.live, self.live_first, self.live_deg = keep.live, keep.live_first, keep.live_deg
            self.fin_count = keep.fin_count
        self.fin_cap = bw * (k + 1)  # one step adds at most bw * k to at most bw kept
        if keep is not None and keep.fin_cap >= self.fin_cap:
            self.fin, self.fin_cap = keep.fin, keep.fin_cap
        else:
            self.fin = e((b, self.fin_cap), np.uint64)
            if keep is not None:
                self.fin[:, :keep.fin_cap] = keep.fin
        slots = max(bw * k, 1)
        cl = dev.cl
        big = bw > dev.beam_cap  # each block's copy of the per-beam data in global memory, not shared
        self.beam_n = e((b, cl, bw) if big else (1,), np.uint32)
        self.beam_off = e((b, cl, bw + 1) if big else (1,), np.uint32)
        self.beam_first = e((b, cl, bw) if big else (1,), np.int64)
        self.beam_deg = e((b, cl, bw) if big else (1,), np.uint32)
        self.beam_score = e((b, cl, bw) if big else (1,), np.float32)
        self.cnt = e((b, 4), np.uint64)  # cluster-wide counters, cleared by the kernel
        # a step's candidates (two sets: a NAR step reads the previous step's while it writes its own)
        self.cand, self.slot_first = e((b, 2, slots), np.uint64), e((b, 2, slots), np.int64)
        self.slot_deg, self.slot_node = e((b, 2, slots), np.uint32), e((b, slots), np.int64)
        self.match = e((b, max(bw, 1)), np.uint32)  # AR: the kept candidates' slots before the sort
        self.cand_slot = e((b, slots), np.uint32)  # each live candidate's slot
        self.kept = e((b, max(bw, 1)), np.uint64)  # AR: the kept candidates' composites before the sort
        stride = _pow2(bw) if _pow2(bw) > dev.sort_cap else 1
        self.scratch = e((b, stride), np.uint64)
        cells = max(b * rows * k, 1)
        self.ptok, self.plp = e((cells,), np.int32), e((cells,), np.float32)
        self.pcnt = e((max(b * rows, 1),), np.int32)
        # staging: nf float64 factors, then per row K token ids and K log-prob bits (or, for rows prepared on
        # the host, ptok, plp and pcnt)
        nbytes = 8 * nf + 8 * cells + 4 * max(b * rows, 1) + 8
        self.host, self.up = dev.pinned(nbytes), e((nbytes,), np.uint8)
        self.factors = self.up[:8 * nf].view(np.float64)
        self.rows_in = self.up[8 * nf:8 * nf + 8 * cells].view(np.int32)
        self.uploaded, self.stream = None, keep.stream if keep is not None else None
        self.staged_factors = None  # the factors array whose values the staging holds (_host_ready)
        self.spare = None  # an event no work waits on, recorded again by the next upload or host NAR call
        self.sp = dev.asarray(np.array(
            [dev.ptr(x) for x in (*self.live[:4], self.live_first, self.live_deg, self.live.count, self.beam_n,
                                  self.beam_off, self.cand, self.slot_node, self.slot_first, self.slot_deg, self.fin,
                                  self.fin_count, self.scratch)]
            + [bw, self.fin_cap, stride, dev.ptr(self.match), dev.ptr(self.cand_slot), dev.ptr(self.kept),
               dev.ptr(self.cnt), dev.ptr(self.beam_first), dev.ptr(self.beam_deg),
               dev.ptr(self.beam_score)], np.int64))
        self.dummy_ids, self.dummy_scores = e((1,), np.int64), e((1,), np.float32)
        # NAR results as a captured graph writes them (host proposals: in pinned memory)
        self.host_out = dev.pinned(12 * b * bw)
        self.host_ids = self.host_out[:8 * b * bw].view(np.int64).reshape(b, bw)
        self.host_scores = self.host_out[8 * b * bw:].view(np.float32).reshape(b, bw)
        self.graphs = {}

    def release(self) -> None:
        """Before the buffers are dropped: the last copy has read the pinned buffer (freed pinned memory may
        be handed out again at once)."""
        if self.uploaded is not None:
            self.uploaded.synchronize()


def _nar_buffers(dev, shape: tuple) -> _Buffers:
    bufs = dev.buffers
    if shape in bufs:
        bufs[shape] = bufs.pop(shape)  # most recently used last
    else:
        if len(bufs) >= KEPT_SHAPES:
            bufs.pop(next(iter(bufs))).release()
        bufs[shape] = _Buffers(dev, *shape)
    return bufs[shape]


def _checked(dev, tokens, logp, what: str, rows: str) -> tuple:
    """Shapes and dtypes as search_cpu._proposals checks them; CuPy arrays stay on the device when both are."""
    if not (dev.is_device_array(tokens) and dev.is_device_array(logp)):
        tokens, logp = np.asarray(dev.to_host(tokens)), np.asarray(dev.to_host(logp))
    if tokens.ndim != 3 or tokens.shape != logp.shape:
        raise GtmkitError(f"{what}: tokens and logp must both be [b, {rows}, K] arrays, got shapes "
                          f"{list(tokens.shape)} and {list(logp.shape)}")
    if tokens.dtype.kind not in "iu":
        raise GtmkitError(f"{what}: tokens must be integers, got dtype {tokens.dtype}")
    if logp.dtype.kind != "f":
        raise GtmkitError(f"{what}: logp must be floats, got dtype {logp.dtype}")
    return tokens, logp


def _check_size(bw: int, k: int, what: str) -> None:
    if bw * (k + 1) >= 2**31:
        raise GtmkitError(f"{what}: beam_width * (K + 1) = {bw * (k + 1)} must stay below 2^31 on the GPU")


def _valid_tokens(xp, tokens):
    """Mask of the token ids a key can hold, [0, 2^31-1]."""
    ok = tokens <= MAX_TOKEN
    return ok & (tokens >= 0) if tokens.dtype.kind == "i" else ok


def _stage(dev, buf: _Buffers, tokens, logp, theta_tok, factors, rows: int, use_count: bool) -> tuple:
    """Proposals [b, rows, K] and factors to the device, rows prepared -> (ptok, plp, pcnt) device arrays."""
    b, k, nf = buf.b, buf.k, buf.nf
    n = b * rows * k
    host = _host_ready(dev, buf, factors)
    if k > dev.prep_cap:  # too long to sort in shared memory: prepared here, exactly as the CPU search does
        tok = np.asarray(dev.to_host(tokens))
        lp = np.ascontiguousarray(dev.to_host(logp), np.float32)
        tok64 = np.full(tok.shape, -1, np.int64)
        np.copyto(tok64, tok, casting="unsafe", where=_valid_tokens(np, tok))
        used = (dev.to_host(buf.live.count) if use_count else np.full(b, rows)).astype(np.int64)
        o = 8 * nf
        ptok = host[o:o + 4 * n].view(np.int32).reshape(b, rows, k)
        plp = host[o + 4 * n:o + 8 * n].view(np.float32).reshape(b, rows, k)
        pcnt = host[o + 8 * n:o + 8 * n + 4 * b * rows].view(np.int32).reshape(b, rows)
        _prepare_rows(tok64, lp, np.float32(theta_tok), used, ptok, plp, pcnt)
        buf.uploaded = dev.upload(buf.up, host, o + 8 * n + 4 * b * rows, buf.spare)
        up = buf.up
        return (up[o:o + 4 * n].view(np.int32), up[o + 4 * n:o + 8 * n].view(np.float32),
                up[o + 8 * n:o + 8 * n + 4 * b * rows].view(np.int32))
    if dev.is_device_array(tokens):
        xp = dev.cp
        staged = buf.rows_in[:2 * n].reshape(b, rows, 2, k)
        staged[:, :, 0, :] = xp.where(_valid_tokens(xp, tokens), tokens.astype(np.int32), np.int32(-1))
        staged[:, :, 1, :] = xp.ascontiguousarray(logp, np.float32).view(np.int32)
        buf.uploaded = dev.upload(buf.up, host, 8 * nf, buf.spare)
    else:
        buf.uploaded = dev.upload(buf.up, host, _fill_host(buf, tokens, logp, rows), buf.spare)
    _prep(dev, buf, rows, theta_tok, use_count)
    return buf.ptok, buf.plp, buf.pcnt


def _host_ready(dev, buf: _Buffers, factors) -> np.ndarray:
    """The pinned staging buffer, free to overwrite (the previous copy has read it), with the factors in.
    A host NAR call leaves it free (uploaded None) and its factors in place (the same cached array again):
    waiting on a finished event and rewriting them would show in a query's host time."""
    dev.order(buf)
    if buf.uploaded is not None:
        buf.uploaded.synchronize()
        buf.spare, buf.uploaded = buf.uploaded, None  # (the event object is recorded again next upload)
    if buf.staged_factors is not factors:
        buf.host[:8 * buf.nf].view(np.float64)[:len(factors)] = factors
        buf.staged_factors = factors  # (held, so no other array can take its identity)
    return buf.host


def _fill_host(buf: _Buffers, tokens: np.ndarray, logp: np.ndarray, rows: int) -> int:
    """Host proposals [b, rows, K] into the pinned staging buffer, after the factors -> bytes to copy."""
    b, k, nf = buf.b, buf.k, buf.nf
    n = b * rows * k
    staged = buf.host[8 * nf:8 * nf + 8 * n].view(np.int32)
    _stage_rows(tokens.reshape(b * rows, k), logp.reshape(b * rows, k), staged, staged.view(np.float32))
    return 8 * nf + 8 * n


@njit(cache=True, nogil=True)
def _stage_rows(tokens, logp, out_i, out_f):
    """Row r of the flat staging buffer: the tokens as int32 (-1 where no key can hold the id), then the log-probs
    as float32 (out_i, out_f: int32 and float32 views of that buffer). One pass over contiguous 1-D slices, faster
    than NumPy's masked copy and cast or a 2-D strided loop."""
    k = tokens.shape[1]
    for r in range(tokens.shape[0]):
        row_t, row_l = tokens[r], logp[r]
        out_t, out_l = out_i[2 * k * r:2 * k * r + k], out_f[2 * k * r + k:2 * k * (r + 1)]
        for i in range(k):
            x = row_t[i]
            out_t[i] = np.int32(x) if (x >= 0) & (x <= MAX_TOKEN) else np.int32(-1)
        for i in range(k):
            out_l[i] = row_l[i]


def _prep(dev, buf: _Buffers, rows: int, theta_tok, use_count: bool, rows_in=None, factors=None) -> None:
    """prep_kernel over rows_in (default: the uploaded copy); factors = (pinned host float64 view, count) are
    copied to the device's factors on the way (the NAR graph reads its staging in place)."""
    if buf.b * rows:
        fac_in, nf = factors if factors is not None else (buf.factors, 0)
        dev.launch("prep_kernel", buf.b * rows, (
            rows_in if rows_in is not None else buf.rows_in, np.int32(rows), np.int32(buf.k), np.float32(theta_tok),
            buf.live.count, np.int32(use_count), buf.ptok, buf.plp, buf.pcnt, fac_in, buf.factors, np.int32(nf)))


def _search(dev, buf: _Buffers, tp, prepared: tuple, rows: int, nar: bool, t0: int, t1: int, last: int,
            init: bool, fbase: int, theta_sent, out: tuple = None, factors=None, rows_in=None, theta_tok=0.0) -> None:
    """search_kernel over steps t0 .. t1-1; with `out` (ids, scores) also the final top-BW into it; with
    rows_in (NAR) the kernel prepares the proposal rows itself (prep_kernel's work) into `prepared`."""
    ids, scores = out if out is not None else (buf.dummy_ids, buf.dummy_scores)
    dev.launch("search_kernel", buf.b * dev.cl, (
        tp.table, buf.sp, *prepared, np.int32(rows), np.int32(buf.k), np.int32(nar), np.int32(t0), np.int32(t1),
        np.int32(last), np.int32(init), np.int32(out is not None), np.float32(theta_sent),
        factors if factors is not None else buf.factors, np.int32(fbase), ids, scores,
        rows_in if rows_in is not None else dev.null, np.float32(theta_tok)), smem=search_smem(dev), layout=tp.layout)


def trie_beam_search_cuda(trie, tokens, logp, beam_width, theta_tok=-math.inf, theta_sent=-math.inf,
                          alpha=0.0, device=None, cluster: int = CL) -> tuple:
    """NAR search (search.trie_beam_search) on the GPU -> (key_ids int64 [b, BW] -1 padded,
    scores float32 [b, BW] -inf padded). Host (NumPy) proposals give NumPy results: the replayed graph writes
    them into pinned memory and the call waits for it. CuPy proposals give CuPy results, without waiting."""
    what = "trie_beam_search"
    cluster = check_cluster(cluster, what)
    dev = device if device is not None else cuda_device(cluster)
    bw = _beam_width(beam_width)
    tt = np.float32(_float(theta_tok, "theta_tok"))
    ts = np.float32(_float(theta_sent, "theta_sent"))
    a = _float(alpha, "alpha")
    tokens, logp = _checked(dev, tokens, logp, what, "T")
    b, steps, k = tokens.shape
    _check_size(bw, k, what)
    tp = _trie_params(dev, trie, what)
    if b == 0:
        return dev.empty((0, bw), np.int64), dev.empty((0, bw), np.float32)
    buf = _nar_buffers(dev, (b, bw, steps, k, steps + 1))
    factors = length_factors(a, steps)
    if dev.is_device_array(tokens) or k > dev.prep_cap:
        prepared = _stage(dev, buf, tokens, logp, tt, factors, steps, False)
        ids, scores = dev.empty((b, bw), np.int64), dev.empty((b, bw), np.float32)
        _search(dev, buf, tp, prepared, steps, True, 0, steps, steps - 1, True, 0, ts, (ids, scores))
        return ids, scores
    # host proposals, the usual case: staged here, then prep + search replayed as one graph; the kernels read
    # the staged proposals and write the results in pinned memory (copies would be a large share of a query)
    _host_ready(dev, buf, factors)
    nbytes = _fill_host(buf, tokens, logp, steps)
    nf = buf.nf

    # rows short enough for the search kernel to prepare, factors few enough for it to read once
    fused = k <= min(dev.nt, dev.sort_cap // 2) and steps <= FAC_CAP

    def submit():
        rows_in = dev.host_ptr(buf.host[8 * nf:nbytes].view(np.int32))
        fac = dev.host_ptr(buf.host[:8 * nf].view(np.float64))
        out = (dev.host_ptr(buf.host_ids), dev.host_ptr(buf.host_scores))
        prepared = (buf.ptok, buf.plp, buf.pcnt)
        if fused:  # one launch: the cluster prepares the rows, then searches (no prep launch to wait for)
            _search(dev, buf, tp, prepared, steps, True, 0, steps, steps - 1, True, 0, ts, out, fac, rows_in, tt)
        else:
            _prep(dev, buf, steps, tt, False, rows_in, (fac, nf))
            _search(dev, buf, tp, prepared, steps, True, 0, steps, steps - 1, True, 0, ts, out)

    dev.replay(buf.graphs, (dev.ptr(tp.table), float(tt), float(ts)), submit)
    buf.spare = dev.mark(buf.spare)
    buf.spare.synchronize()  # the graph has read the staging too: free for the next call without a wait
    return buf.host_ids.copy(), buf.host_scores.copy()


class TrieBeamStepperCuda:
    """search_cpu.TrieBeamStepper on the GPU: the same calls and results, as device arrays (live.nodes
    is int64 here). Proposals [b, R, K] may be CuPy arrays (a model's top-K on the device). `step` does not
    synchronise with the host unless R < beam_width (it then checks R against the live counts); `done`
    does."""

    def __init__(self, trie, batch: int, beam_width: int, theta_tok: float = -math.inf,
                 theta_sent: float = -math.inf, alpha: float = 0.0, max_steps: int = None, device=None,
                 cluster: int = CL):
        cluster = check_cluster(cluster, "TrieBeamStepper")
        self._dev = device if device is not None else cuda_device(cluster)
        self._tp = _trie_params(self._dev, trie, "TrieBeamStepper")
        stepper_settings(self, batch, beam_width, theta_tok, theta_sent, alpha, max_steps)
        _check_size(self.beam_width, 1, "TrieBeamStepper")
        self._buf = _Buffers(self._dev, self.batch, self.beam_width, self.beam_width, 1, 1)
        self._run(0, init=True)  # the root

    def _run(self, rows: int, prepared: tuple = None, init: bool = False, steps: int = 0, out=None) -> None:
        buf = self._buf
        prepared = prepared if prepared is not None else (buf.ptok, buf.plp, buf.pcnt)
        last = self.max_steps - 1 if self.max_steps is not None else -1
        _search(self._dev, buf, self._tp, prepared, max(rows, 1), False, self.steps, self.steps + steps, last, init,
                self.steps + 1, self.theta_sent, out)

    @property
    def live(self) -> LiveBeams:
        """The current live beams (device arrays owned by the stepper: copy what you keep across steps)."""
        return self._buf.live

    @property
    def done(self) -> bool:
        return bool(int(self._buf.live.count.max()) == 0) or self.steps == self.max_steps

    def step(self, tokens, logp) -> LiveBeams:
        """Advance every query by one token; tokens / logp [b, R, K], row i = proposals of live beam i."""
        if self.max_steps is not None and self.steps >= self.max_steps:
            raise GtmkitError(f"TrieBeamStepper: all {self.max_steps} steps taken")
        what = "TrieBeamStepper.step"
        tokens, logp = _checked(self._dev, tokens, logp, what, "BW")
        b, r, k = tokens.shape
        if b != self.batch or r > self.beam_width or (r < self.beam_width and r < int(self._buf.live.count.max())):
            most = int(self._buf.live.count.max())
            raise GtmkitError(f"{what}: proposals are [{b}, {r}, K], need [{self.batch}, R, K] "
                              f"with {most} <= R <= {self.beam_width}")
        _check_size(self.beam_width, k, what)
        if k != self._buf.k:
            old = self._buf
            self._buf = _Buffers(self._dev, b, self.beam_width, self.beam_width, k, 1, keep=old)
            old.release()
        factor = length_factors(self.alpha, self.steps + 1)[-1:]
        prepared = _stage(self._dev, self._buf, tokens, logp, self.theta_tok, factor, r, True)
        self._run(r, prepared, steps=1)
        self.steps += 1
        return self._buf.live

    def result(self) -> tuple:
        """(key_ids int64 [b, BW] -1 padded, scores float32 [b, BW] -inf padded), best first, so far."""
        ids = self._dev.empty((self.batch, self.beam_width), np.int64)
        scores = self._dev.empty((self.batch, self.beam_width), np.float32)
        self._run(0, out=(ids, scores))
        return ids, scores
