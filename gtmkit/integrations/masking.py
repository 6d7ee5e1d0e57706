"""`SidMasker`: CD+GTM applied to a model's scores over its whole vocabulary, for decoders that mask rather
than call `Matcher.step` (docs/design.md §8). Rows are recovered from their generated prefixes, so the masker
holds no per-row state: the caller may reorder rows between calls."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import prange

from ..errors import GtmkitError
from .._args import check_kind, int_arg
from ..matcher.index_matcher import IndexMatcher
from ..matcher.matcher import Matcher
from ..threads import parallel_njit

KERNEL = Path(__file__).with_name("kernels") / "sid_mask.cu"
# -inf's bit pattern by element width (float16 / bfloat16 share a width: their patterns differ)
NEG_INF = {"float32": 0xFF800000, "float16": 0xFC00, "bfloat16": 0xFF80, "float64": 0xFFF0000000000000}


@parallel_njit(cache=True)
def block_scores_kernel(bits, neg_inf, words, words_div, nodes, offset, vocab, eos, eos_only):
    """bits: the scores' elements as unsigned ints of their width [R, C]; element (r, c) becomes -inf unless
    c = offset + v for a token v whose bit is set in words[r // words_div] (eos_only 0), or c == eos and
    nodes[r] >= 0 (eos_only 1). The CUDA form is kernels/sid_mask.cu."""
    R, C = bits.shape
    pattern = bits.dtype.type(neg_inf)
    for r in prange(R):
        for c in range(C):
            if eos_only:
                ok = c == eos and nodes[r] >= 0
            else:
                v = c - offset
                ok = 0 <= v < vocab and (words[r // words_div, v >> 5] >> np.uint32(v & 31)) & np.uint32(1) != 0
            if not ok:
                bits[r, c] = pattern


class SidMasker:
    """Masks scores [R, model vocab] in place: row r serves request r // rows_per_request; its generated SID
    tokens are tokens[r, prompt_len:] (model tokens, as `layout` places them). At depth d < L the allowed
    columns are the SID children of the row's node that pass CD (+GTM when gtm); at d == L only the layout's
    EOS (none without one); a row whose prefix is not in the trie gets every column masked."""

    def __init__(self, matcher, requests, rows_per_request: int, layout, gtm: bool = True):
        if not isinstance(matcher, (Matcher, IndexMatcher)):
            raise GtmkitError(f"matcher must be a gtmkit.Matcher, got {type(matcher).__name__}")
        matcher = matcher.current()  # one index for the whole generation (its node ids)
        self.matcher = matcher
        self.layout = layout.check(matcher.index)
        self.batch = matcher.batch(requests)
        if isinstance(rows_per_request, bool) or not isinstance(rows_per_request, (int, np.integer)) \
                or rows_per_request < 1:
            raise GtmkitError(f"num_beams must be a positive integer, got {rows_per_request!r}")
        self.rows_per_request = int(rows_per_request)
        self.gtm = bool(gtm)
        self.offsets = self.layout.offsets_for(matcher.index.sid_length)
        if matcher.cuda is not None:  # uploaded once: a per-call upload would wait for the stream
            import cupy
            # one spare position: a prefix longer than L reads offsets[L] before its walk fails at the leaf
            self._dev_offsets = cupy.asarray(np.append(self.offsets, 0))
        self._streams = {}
        self._row_request = {}
        self._kernel = None
        self._root = None

    def row_request(self, R: int):
        rr = self._row_request.get(R)
        if rr is None:
            rr = np.arange(R, dtype=np.int64) // self.rows_per_request
            if self.matcher.cuda is not None:
                import cupy
                rr = cupy.asarray(rr)
            self._row_request[R] = rr
        return rr

    def check(self, tokens, scores) -> None:
        """Refuses tokens and scores this masker cannot read (and write) where its Matcher works."""
        device = "cpu" if self.matcher.cuda is None else "cuda"
        _placed(tokens, "input_ids", device, writes=False)
        _placed(scores, "scores", device, writes=True)
        for x, name, what in ((tokens, "input_ids", "length"), (scores, "scores", "vocab")):
            if len(x.shape) != 2:
                raise GtmkitError(f"{name} must be [rows, {what}], got shape {list(x.shape)}")
        check_kind(tokens, "input_ids", "iu", "integers")

    def __call__(self, tokens, scores, prompt_len: int):
        self.check(tokens, scores)
        prompt_len = int_arg(prompt_len, "prompt_len", lo=0)
        R = int(tokens.shape[0])
        want = self.batch.size * self.rows_per_request
        if R != want or int(scores.shape[0]) != R:
            raise GtmkitError(f"{R} rows of tokens and {int(scores.shape[0])} of scores; expected {self.batch.size} "
                              f"requests x {self.rows_per_request} beams = {want}")
        if int(scores.shape[1]) != self.layout.vocab_size:
            raise GtmkitError(f"scores have {int(scores.shape[1])} columns, the layout's model vocabulary "
                              f"{self.layout.vocab_size}")
        depth = int(tokens.shape[1]) - int(prompt_len)
        if depth < 0:
            raise GtmkitError(f"prompt_len {prompt_len} is longer than the sequences ({int(tokens.shape[1])} tokens)")
        m = self.matcher
        if m.cuda is None:
            self._mask(m, tokens, scores, R, depth, prompt_len)
        else:
            with self._stream(scores):  # every launch on the caller's torch stream (CuPy's current one otherwise)
                if depth and m.cuda.mask_scores_fits():
                    self._mask_fused(m, tokens, scores, R, depth, prompt_len)
                else:
                    self._mask(m, tokens, scores, R, depth, prompt_len)
        return scores

    def _stream(self, x):
        """The CuPy handle of the torch stream x's work goes to (kept: one per stream), else CuPy's current one."""
        import contextlib
        if not type(x).__module__.startswith("torch"):
            return contextlib.nullcontext()
        import torch
        ts = torch.cuda.current_stream(x.device)
        st = self._streams.get(ts.cuda_stream)
        if st is None:
            from ..matcher.cuda.interop import stream_of
            st = self._streams[ts.cuda_stream] = stream_of(x)
        return st

    def _rule(self, depth: int, L: int) -> tuple:
        """(eos_only, the EOS column or -1, the SID range's first column) of rows `depth` tokens into a SID."""
        eos_only = depth >= L
        eos = self.layout.eos_token_id if (depth == L and self.layout.eos_token_id is not None) else -1
        return eos_only, eos, 0 if eos_only else int(self.offsets[depth])

    def _mask_fused(self, m, tokens, scores, R, depth, prompt_len):
        """Rows past the root: one launch (node recovery, CD+GTM children, -inf written), torch tensors by pointer."""
        L = m.index.sid_length
        toks, tok_stride = _device_ints(tokens)
        bits, row_stride, width, neg_inf = _device_scores(scores)
        eos_only, eos, offset = self._rule(depth, L)
        m.cuda.mask_scores(toks, tok_stride, prompt_len, min(depth, L + 1), self._dev_offsets, self.batch,
                           self.rows_per_request, self.gtm, bits, row_stride, width, neg_inf, R,
                           int(scores.shape[1]), offset, eos, eos_only)

    def _mask(self, m, tokens, scores, R, depth, prompt_len):
        L = m.index.sid_length
        if depth == 0:  # every row at the root (nodes are read only by the EOS rule)
            nodes = m.xp.zeros(R, m.xp.int64)
        elif depth <= L:
            offs = self._dev_offsets if m.cuda is not None else self.offsets[:depth]
            nodes = m.prefix_nodes(tokens, offs, start=prompt_len)
        else:  # past the SID and its EOS: nothing is allowed
            nodes = m.xp.full(R, -1, m.xp.int64)
        eos_only, eos, offset = self._rule(depth, L)
        div = 1
        if eos_only:
            words = None
        elif depth == 0:  # every row of a request is at the root: one mask a request (beam search's M copies)
            words = self._root_words(m)
            div = self.rows_per_request
        else:
            words = m.mask(nodes, self.row_request(R), self.batch, self.gtm)
        (self._block_cuda if m.cuda is not None else self._block_cpu)(scores, words, div, nodes, offset, eos,
                                                                      eos_only)

    def _root_words(self, m):
        """The root's allowed-token words of every request: they depend on the requests alone, so the first
        call computes them and later ones reuse them (a generate() call starts each search there)."""
        if self._root is None or self._root_version != m.live_version:  # a pause or resume changes it
            B = self.batch.size
            self._root_version = m.live_version
            self._root = m.mask(m.xp.zeros(B, m.xp.int64), m.xp.arange(B, dtype=m.xp.int64), self.batch, self.gtm)
        return self._root

    def _block_cpu(self, scores, words, div, nodes, offset, eos, eos_only):
        bits, neg_inf = _host_bits(scores)
        if words is None:
            words = np.zeros((1, 1), np.int32)
        block_scores_kernel(bits, neg_inf, words.view(np.uint32), div, nodes, offset, self.layout.sid_vocab, eos,
                            eos_only)

    def _block_cuda(self, scores, words, div, nodes, offset, eos, eos_only):
        import cupy as cp

        from .._gpu import load_module
        if self._kernel is None:
            self._kernel = load_module(KERNEL).get_function("block_scores_kernel")
        bits, neg_inf = _device_bits(scores)
        R, C = bits.shape
        if R * C == 0:
            return
        words = cp.zeros((1, 1), cp.uint32) if words is None else words.view(cp.uint32)
        self._kernel(((C + 255) // 256, min(R, 65535)), (256,), (
            bits, np.int64(bits.strides[0] // bits.itemsize), np.int32(bits.itemsize), np.uint64(neg_inf),
            np.int64(R), np.int64(C), words, np.int32(words.shape[1]), np.int64(div), nodes, np.int64(offset),
            np.int64(self.layout.sid_vocab), np.int64(eos), np.int32(eos_only)))


def _placed(x, name: str, device: str, writes: bool) -> None:
    """Refuses x unless a device=`device` Matcher reads it where it lies (writes: and writes it in place, so
    never a copy: numpy on the CPU, CuPy or CUDA tensors on the GPU)."""
    if type(x).__module__.startswith("torch"):
        if x.device.type != device:
            raise GtmkitError(f"{name} are on {x.device}; a device={device!r} Matcher works on {device} tensors")
        return
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise GtmkitError(f"{name} must be a torch tensor or an array, got {type(x).__name__}")
    host = isinstance(x, np.ndarray) and type(x).__module__.startswith("numpy")
    if writes and host != (device == "cpu"):
        where = "numpy arrays and CPU tensors" if device == "cpu" else "CUDA tensors and CuPy arrays"
        raise GtmkitError(f"{name} are a {type(x).__name__}; a device={device!r} Matcher masks {where} in place")


def _dtype_name(x) -> str:
    return str(x.dtype).replace("torch.", "")


def _checked(scores, device: str) -> tuple:
    """(dtype name, whether a torch tensor) of scores whose dtype the masking writes and, for a torch tensor,
    that lies on `device` ("cpu" for the CPU matcher, "cuda" for the GPU one)."""
    name = _dtype_name(scores)
    if name not in NEG_INF:
        raise GtmkitError(f"scores must be float32, float16, bfloat16 or float64, got {name}")
    is_torch = type(scores).__module__.startswith("torch")
    if is_torch and scores.device.type != device:
        raise GtmkitError(f"scores are on {scores.device}; a device={device!r} Matcher masks {device} tensors")
    return name, is_torch


def _int_view(x, name: str, ints):
    """x's memory as signed ints of its width (ints: the torch or numpy module)."""
    return x.view({"float32": ints.int32, "float64": ints.int64}.get(name, ints.int16))


def _host_bits(scores):
    """(the scores' memory as unsigned ints of their width [R, C], -inf's pattern); numpy arrays and CPU torch
    tensors, written in place."""
    name, is_torch = _checked(scores, "cpu")
    if is_torch:
        import torch
        bits = _int_view(scores, name, torch).numpy()
    else:
        bits = _int_view(np.asarray(scores), name, np)
    if bits.ndim != 2:
        raise GtmkitError(f"scores must be [rows, vocab], got shape {list(bits.shape)}")
    return bits.view(np.dtype(f"u{bits.itemsize}")), NEG_INF[name]


def _device_ints(tokens):
    """(int64 tokens on the device, row stride): a torch tensor by its pointer (contiguous int64; else a copy),
    anything else as a contiguous CuPy int64 array."""
    if type(tokens).__module__.startswith("torch"):
        import torch
        if tokens.device.type != "cuda":
            raise GtmkitError(f"input_ids are on {tokens.device}: a device='cuda' Matcher reads CUDA tensors")
        t = tokens if tokens.dtype == torch.int64 and tokens.is_contiguous() else tokens.to(torch.int64).contiguous()
        return np.uint64(t.data_ptr()), int(t.shape[1])
    import cupy as cp
    t = cp.ascontiguousarray(cp.asarray(tokens), dtype=cp.int64)
    return t, int(t.shape[1])


def _device_scores(scores):
    """(the scores' memory: a torch tensor's pointer or a CuPy array, row stride in elements, element bytes,
    -inf's bits) for writing -inf in place; rows must be contiguous."""
    name, is_torch = _checked(scores, "cuda")
    if is_torch:
        if scores.dim() != 2 or (scores.shape[1] > 1 and scores.stride(1) != 1):
            raise GtmkitError(f"scores must be [rows, vocab] with contiguous rows, got shape {list(scores.shape)}")
        return np.uint64(scores.data_ptr()), int(scores.stride(0)), int(scores.element_size()), NEG_INF[name]
    bits, neg_inf = _device_bits(scores)
    return bits, int(bits.strides[0] // bits.itemsize), int(bits.itemsize), neg_inf


def _device_bits(scores):
    """As _host_bits for CUDA torch tensors and CuPy arrays (a DLPack view of the same memory)."""
    import cupy as cp
    name, is_torch = _checked(scores, "cuda")
    if is_torch:
        import torch
        bits = cp.from_dlpack(_int_view(scores.detach(), name, torch))
    else:
        bits = cp.asarray(scores)
    if bits.ndim != 2 or (bits.shape[1] > 1 and bits.strides[1] != bits.itemsize):
        raise GtmkitError(f"scores must be [rows, vocab] with contiguous rows, got shape {list(bits.shape)}")
    return bits, NEG_INF[name]
