"""Mixed work for thread tests: beam searches, steps, post-filters and trie searches over one shared Matcher,
run from several threads at once and compared with a single-threaded run."""

from __future__ import annotations

import threading

import numba
import numpy as np

from gtmkit.synth.logits import SyntheticDecoder
from gtmkit.matcher.beam import beam_search
from gtmkit.matcher.matcher import Matcher
from gtmkit.trie.search import trie_beam_search

from support.catalogs import random_user

THREADS = 4


def _same(a, b) -> bool:
    """Deep equality of nested tuples / lists / arrays (NaN-free outputs: array_equal is exact)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype \
            and np.array_equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def work_items(idx, trie, selection="auto", seed=0) -> list:
    """Calls on one Matcher (its CPU top-k selection: `selection`) and one trie, each a () -> comparable result, on
    random inputs."""
    m = Matcher(idx, cpu_selection=selection)
    rng = np.random.default_rng(seed)
    users = [random_user(rng) for _ in range(3)]
    reqs = [idx.encode_request(u) for u in users]
    items = []
    for depth in range(idx.sid_length):
        lo, hi = idx.level_offsets[depth], idx.level_offsets[depth + 1]
        nodes = rng.integers(lo, hi, size=3 * 40).astype(np.int32)
        nodes[rng.random(len(nodes)) < 0.2] = -1
        rr = np.repeat(np.arange(3), 40).astype(np.int32)
        lp = np.round(rng.normal(size=(len(nodes), idx.vocab_size)), 1).astype(np.float32)
        bs = np.round(rng.normal(size=len(nodes)), 1).astype(np.float32)
        for gtm in (True, False):
            for k, count in ((5, False), (60, True)):
                items.append(lambda a=(nodes, lp, bs, rr, reqs, k, gtm, count):
                             tuple(m.step(*a[:6], gtm=a[6], count_candidates=a[7])))
            items.append(lambda a=(nodes, rr, reqs, gtm): m.mask(*a[:3], gtm=a[3]))
    leaves = rng.integers(0, idx.num_nodes, size=(3, 30))
    for exact in (True, False):
        items.append(lambda exact=exact: m.postfilter(leaves, reqs, exact=exact))
    for gtm in (True, False):
        def search(gtm=gtm):
            r = beam_search(m, reqs, SyntheticDecoder(users, idx.vocab_size, seed=3), (1, 8, 16), gtm=gtm)
            return r.sids, r.scores, r.leaf_nodes, r.ads, r.candidates, r.beams
        items.append(search)
    tok = rng.integers(-1, 9, size=(4, 5, 6))
    logp = np.log(rng.random(tok.shape) + 1e-6).astype(np.float32)
    items.append(lambda: trie_beam_search(trie, tok, logp, 6))
    return m, items


def run_threaded(items, rounds=3, seed=0) -> list:
    """Each of THREADS threads runs every item `rounds` times in its own random order (thread 0 with one
    numba thread); returns the list of mismatches and errors."""
    want = [f() for f in items]
    bad = []
    start = threading.Barrier(THREADS)

    def worker(w):
        try:
            if w == 0:
                numba.set_num_threads(1)  # thread-local: this thread's kernels use one core
            order = np.random.default_rng(seed + w).permutation(np.tile(np.arange(len(items)), rounds))
            start.wait()
            for i in order:
                if not _same(items[i](), want[i]):
                    bad.append((w, int(i)))
        except Exception as exc:  # reported by the main thread's assert
            bad.append((w, repr(exc)))

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return bad
