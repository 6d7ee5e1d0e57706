"""Flat arrays the matcher kernels read: the index's trie + matcher columns, and a batch of requests.

Both are NamedTuples of C-contiguous arrays (pynndescent style), so numba and CuPy take them as is."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._arrays import read_only
from ..errors import RequestError
from ..targeting.semantics import Request, check_request


class TrieArrays(NamedTuple):
    """node_offsets int64 [n_internal+1]; child_tokens int32 [nodes-1]; level_offsets int64 [L+2];
    part_start / part_count: how to find node n's partition slots (see part_range in the kernels):
      fixed layout (jagged=False): level_base int64 [L+1], level_width int64 [L+1];
      jagged layout: part_offsets int64 [nodes+1];
    part_bitmask int32 [P] (-1 padding); part_bloom int32 [P, nb] (row within attribute b's table);
    bitmask_table uint64 [U, W]; bloom_table uint64 [sum U_b, Wb] (attribute b's rows start at
    bloom_base[b]; rows narrower than Wb are zero padded); sid_ad_offsets int64 [S+1];
    ad_bitmask int32 [N]; allow_off / excl_off int64 [nb, N+1]; allow_codes / excl_codes int32 [nb, max nnz];
    live int32 [1]: 1 once ads are paused (matcher/live.py; an array, so that the GPU kernels read it at each
    launch), then node_live int32 [nodes] (active ads below each node: CD prunes a node at 0) and ad_active uint8
    [N] (the post-filter skips a 0); [1] placeholders before."""

    node_offsets: np.ndarray
    child_tokens: np.ndarray
    level_offsets: np.ndarray
    jagged: bool
    level_base: np.ndarray
    level_width: np.ndarray
    part_offsets: np.ndarray
    part_bitmask: np.ndarray
    part_bloom: np.ndarray
    bitmask_table: np.ndarray
    bloom_table: np.ndarray
    bloom_base: np.ndarray
    sid_ad_offsets: np.ndarray
    sid_ad_ids: np.ndarray
    ad_bitmask: np.ndarray
    allow_off: np.ndarray
    allow_codes: np.ndarray
    excl_off: np.ndarray
    excl_codes: np.ndarray
    live: np.ndarray = np.zeros(1, np.int32)
    node_live: np.ndarray = np.zeros(1, np.int32)
    ad_active: np.ndarray = np.zeros(1, np.uint8)

    def read_only(self) -> "TrieArrays":
        """The same arrays as read-only views (_arrays.read_only): the kernels see one TrieArrays type however
        each array was made (a map of the artifact, a copy, an update's copy-on-write map, the paused-ad state)."""
        return TrieArrays._make(read_only(x) if isinstance(x, np.ndarray) else x for x in self)


def trie_arrays(index) -> TrieArrays:
    layout = index.partition_layout
    nb = len(index.bloom)
    jagged = layout["kind"] == "jagged"
    L = index.sid_length
    if nb:
        wb = max(t.shape[1] for t in index.bloom_tables)
        sizes = [t.shape[0] for t in index.bloom_tables]
        base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        bloom = np.zeros((sum(sizes), wb), np.uint64)
        for b, t in enumerate(index.bloom_tables):
            bloom[base[b]:base[b] + len(t), :t.shape[1]] = t
        part_bloom = np.ascontiguousarray(index.part_bloom_ids, np.int32)
    else:
        base, bloom = np.zeros(1, np.int64), np.zeros((1, 1), np.uint64)
        part_bloom = np.zeros((len(index.part_bitmask_ids), 0), np.int32)
    allow_off, allow_codes, excl_off, excl_codes = index.exact_lists()
    return TrieArrays(
        node_offsets=np.asarray(index.node_offsets, np.int64),
        child_tokens=np.asarray(index.child_tokens, np.int32),
        level_offsets=np.asarray(index.level_offsets, np.int64),
        jagged=jagged,
        level_base=np.asarray(layout.get("level_base", [0] * (L + 2))[:L + 1], np.int64),
        level_width=np.asarray(layout.get("level_width", [0] * (L + 1)), np.int64),
        part_offsets=np.asarray(index.part_offsets, np.int64) if jagged else np.zeros(1, np.int64),
        part_bitmask=np.ascontiguousarray(index.part_bitmask_ids, np.int32),
        part_bloom=part_bloom,
        bitmask_table=np.ascontiguousarray(index.bitmask_table),
        bloom_table=bloom,
        bloom_base=base,
        sid_ad_offsets=np.asarray(index.sid_ad_offsets, np.int64),
        sid_ad_ids=np.asarray(index.sid_ad_ids, np.int64),
        ad_bitmask=np.asarray(index.ad_bitmask_ids, np.int32),
        allow_off=allow_off, allow_codes=allow_codes, excl_off=excl_off, excl_codes=excl_codes,
    ).read_only()


class RequestBatch(NamedTuple):
    """B encoded requests, flat.

    bitmask uint64 [B, A, W]; sig_off int64 [B, nb+1] and sigs uint64 [n_sigs, Wb] (request b's
    signatures of attribute t are sigs[sig_off[b, t]:sig_off[b, t+1]], zero padded to Wb);
    code_off int64 [B, nb+1] and codes int64 [n_codes] likewise (dictionary codes, -1 unknown)."""

    bitmask: np.ndarray
    sig_off: np.ndarray
    sigs: np.ndarray
    code_off: np.ndarray
    codes: np.ndarray

    @property
    def size(self) -> int:
        return self.bitmask.shape[0]


class _Stacked(RequestBatch):
    """A RequestBatch that stack_requests built or checked: trusted by the kernels after an O(1) check of its
    widths against the index. It also keeps the requests it holds and the fingerprint they were encoded against, so
    an index with another fingerprint stacks them again. Only stack_requests seals one: a copy made by `_replace`,
    `_make` or the constructor is a hand-made batch, checked whole on every use."""

    def sealed(self) -> bool:
        return self.__dict__.get("_seal") is _SEAL


_SEAL = object()


def _seal(q: _Stacked, fingerprint, requests) -> _Stacked:
    for a in q:  # the kernels index by these: an edit in place could point them outside the arrays
        a.flags.writeable = False
    q.__dict__.update(_seal=_SEAL, fingerprint=fingerprint, requests=requests)
    return q


def _offsets(off, name: str, B: int, nb: int, n: int) -> None:
    """off int64 [B, nb+1]: each row non-decreasing inside [0, n]."""
    if not (isinstance(off, np.ndarray) and off.dtype == np.int64 and off.shape == (B, nb + 1)):
        raise RequestError(f"RequestBatch.{name} must be int64 [{B}, {nb + 1}], got "
                           f"{getattr(off, 'dtype', type(off).__name__)} {list(np.shape(off))}")
    bad = (off[:, 0] < 0) | (off[:, -1] > n) | (np.diff(off, axis=1) < 0).any(axis=1)
    if bad.any():
        raise RequestError(f"RequestBatch.{name} of request {int(np.flatnonzero(bad)[0])}: offsets must be "
                           f"non-decreasing in [0, {n}]")


def _check_batch(q: RequestBatch, n_bitmask: int, words: int, n_bloom: int, bloom_words: int) -> RequestBatch:
    """A caller's RequestBatch checked in O(its size): dtypes, shapes and offsets the kernels index by."""
    want = {"bitmask": (np.uint64, 3), "sig_off": (np.int64, 2), "sigs": (np.uint64, 2),
            "code_off": (np.int64, 2), "codes": (np.int64, 1)}
    for name, (dt, nd) in want.items():
        a = getattr(q, name)
        if not (isinstance(a, np.ndarray) and a.dtype == dt and a.ndim == nd and a.flags.c_contiguous):
            raise RequestError(f"RequestBatch.{name} must be a C-contiguous {np.dtype(dt).name} array of rank {nd}, "
                               f"got {getattr(a, 'dtype', type(a).__name__)} {list(np.shape(a))}")
    B = q.bitmask.shape[0]
    if B < 1 or q.bitmask.shape[1:] != (n_bitmask, words):
        raise RequestError(f"RequestBatch.bitmask must be [B >= 1, {n_bitmask}, {words}] for this index, got "
                           f"{list(q.bitmask.shape)}")
    if q.sigs.shape[1] != bloom_words:
        raise RequestError(f"RequestBatch.sigs must be [n, {bloom_words}] for this index, got {list(q.sigs.shape)}")
    _offsets(q.sig_off, "sig_off", B, n_bloom, q.sigs.shape[0])
    _offsets(q.code_off, "code_off", B, n_bloom, q.codes.shape[0])
    return _Stacked(*q)


def stack_requests(requests, n_bitmask: int, words: int, n_bloom: int, bloom_words: int,
                   bloom_widths=None, follow=None, fingerprint: str = None) -> RequestBatch:
    """Requests -> one RequestBatch, every request checked (bloom_widths: words of each Bloom matcher's
    rows, default bloom_words for all). follow(request) re-encodes a request for the index (Index.follow), whose
    fingerprint the batch records: a batch stacked for another fingerprint is stacked again from its requests. A
    RequestBatch that this did not build is checked in O(its size)."""
    if isinstance(requests, _Stacked) and requests.sealed():
        if requests.fingerprint != fingerprint and requests.requests is not None:
            requests = requests.requests
        elif requests.bitmask.shape[1:] != (n_bitmask, words) or requests.sig_off.shape[1] != n_bloom + 1 or \
                requests.sigs.shape[1] != bloom_words:
            raise RequestError("this RequestBatch was built for another index")
        else:
            return requests
    if isinstance(requests, RequestBatch):
        return _seal(_check_batch(requests, n_bitmask, words, n_bloom, bloom_words), fingerprint, None)
    widths = [bloom_words] * n_bloom if bloom_widths is None else list(bloom_widths)
    if isinstance(requests, Request):
        requests = [requests]
    if not isinstance(requests, (list, tuple)):
        try:
            requests = list(requests)
        except TypeError:
            raise RequestError(f"requests must be encoded Requests or a RequestBatch, got "
                               f"{type(requests).__name__}") from None
    if not requests:
        raise RequestError("no requests given")
    if follow is not None:
        requests = [follow(r) for r in requests]
    B = len(requests)
    bm = np.zeros((B, max(n_bitmask, 0), words), np.uint64)
    sig_off = np.zeros((B, n_bloom + 1), np.int64)
    code_off = np.zeros((B, n_bloom + 1), np.int64)
    sigs, codes = [], []
    ns = nc = 0
    for b, r in enumerate(requests):
        r = check_request(r, b, n_bitmask, words, widths)
        bm[b] = r.bitmask
        for t in range(n_bloom):
            sig_off[b, t] = ns
            code_off[b, t] = nc
            s = r.bloom_sigs[t]
            pad = np.zeros((len(s), bloom_words), np.uint64)
            pad[:, :s.shape[1]] = s
            sigs.append(pad)
            codes.append(np.asarray(r.bloom_codes[t], np.int64))
            ns += len(s)
            nc += len(r.bloom_codes[t])
        sig_off[b, n_bloom] = ns
        code_off[b, n_bloom] = nc
    sigs_arr = np.concatenate(sigs) if sigs else np.zeros((1, max(bloom_words, 1)), np.uint64)
    codes_arr = np.concatenate(codes) if codes else np.zeros(1, np.int64)
    return _seal(_Stacked(bm, sig_off, sigs_arr, code_off, codes_arr), fingerprint, tuple(requests))
