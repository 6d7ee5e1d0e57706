"""Every CUDA kernel path of gtmkit launched once or twice on small inputs, in one process: what
compute-sanitizer's racecheck (shared-memory hazards, which depend on a kernel's code path and block shape,
not on how often it runs) can cover in minutes, where the GPU test suite under racecheck takes hours.

    compute-sanitizer --tool racecheck --print-limit 50 python benchmarks/tools/racecheck_kernels.py

Paths: the fused and the multi-launch step (GTM on and off, the candidate count on and off) in every partition
layout; mask; exact and inexact post-filter; prefix_nodes; beam search, and its CUDA graph with and without
PDL and fused history; the decoder masking's one-launch and three-launch paths at every depth; the succinct
trie's NAR search (host and device proposals, several beam widths, many candidates), its AR stepper and its
resident server. Each line printed names a path that ran; the last line says how many. Arguments name the parts
to run (matcher, pause, search, masks, trie, server; all by default), so that a sanitizer's time budget can be split."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


PARTS = ("matcher", "pause", "search", "masks", "trie", "server")


def main(parts=PARTS) -> int:
    import cupy as cp
    cp.cuda.set_allocator(None)  # each array its own allocation, as under the sanitized tests
    cp.cuda.set_pinned_memory_allocator(None)

    from gtmkit.matcher.matcher import Matcher
    from gtmkit.matcher.options import CudaOptions
    from support.catalogs import random_user
    from support.indexes import MODES, _build
    from support.step_cases import step_case

    ran = []

    def did(what: str) -> None:
        cp.cuda.Device().synchronize()
        ran.append(what)
        print(what, flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="gtmkit-racecheck-"))
    rng = np.random.default_rng(1)
    hopper = int(cp.cuda.Device().compute_capability[:-1]) >= 9
    steps = ["fused", "multi"] if hopper else ["multi"]
    for mode, kw in MODES if "matcher" in parts else ():
        idx, _, _ = _build(tmp, 70, mode, kw, n_ads=300, L=3, V=9)
        reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
        for path in steps:
            m = Matcher(idx, "cuda", options=CudaOptions(step=path))
            for depth in range(idx.sid_length):
                nodes, rr, lp, bs = step_case(idx, rng, 3, 5, depth)
                for gtm, count in ((True, True), (True, False), (False, False)):
                    m.step(nodes, lp, bs, rr, reqs, 4, gtm=gtm, count_candidates=count)
                m.mask(nodes, rr, reqs, True)
            did(f"step+mask {mode} {path}")
            leaves = rng.integers(idx.first_leaf, idx.num_nodes, size=(3, 6))
            for exact in (True, False):
                m.postfilter(leaves, reqs, exact)
            did(f"postfilter {mode} {path}")
            sids = np.stack([idx.leaf_sid(int(x)) for x in leaves[0]])
            m.prefix_nodes(cp.asarray(sids), cp.zeros(idx.sid_length + 1, cp.int64), start=0)
            did(f"prefix_nodes {mode} {path}")
    if "pause" in parts:
        _paused(tmp, steps, did)
    if "search" in parts:
        _search(tmp, steps, did)
    if "masks" in parts:
        _decoder_masks(tmp, steps, did)
    if "trie" in parts:
        _trie(did)
    if "server" in parts:
        _server(did)
    print(f"{len(ran)} kernel paths ran", flush=True)
    return 0


def _paused(tmp, steps, did) -> None:
    """The step, mask and post-filter with paused ads (the kernels' liveness paths)."""
    from gtmkit.matcher.matcher import Matcher
    from gtmkit.matcher.options import CudaOptions
    from support.catalogs import random_user
    from support.indexes import _build
    from support.step_cases import step_case

    rng = np.random.default_rng(2)
    idx, table, _ = _build(tmp, 72, "static", {"k": [2, 3, 2]}, n_ads=300, L=3, V=9, name="paused")
    ids = np.asarray(table.column("ad_id").to_numpy(), np.int64)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
    for path in steps:
        m = Matcher(idx, "cuda", options=CudaOptions(step=path))
        m.pause_ads(ids[::2])
        for depth in range(idx.sid_length):
            nodes, rr, lp, bs = step_case(idx, rng, 3, 5, depth)
            for gtm, count in ((True, True), (False, False)):
                m.step(nodes, lp, bs, rr, reqs, 4, gtm=gtm, count_candidates=count)
            m.mask(nodes, rr, reqs, False)
        m.postfilter(rng.integers(idx.first_leaf, idx.num_nodes, size=(3, 6)), reqs)
        m.resume_ads(ids[::4])
        did(f"paused ads {path}")


def _search(tmp, steps, did) -> None:
    import gtmkit
    from gtmkit.matcher.cuda.graph import GraphedBeamSearch
    from gtmkit.matcher.matcher import Matcher
    from gtmkit.matcher.options import CudaOptions
    from gtmkit.synth import synth_users, write_catalog
    from gtmkit.synth.logits_cuda import GpuSyntheticDecoder

    cat, _ = write_catalog(tmp / "synth.parquet", 5_000, seed=1)
    idx = gtmkit.build_index(cat, tmp / "synth-index", partition="static", k=[1, 4, 4, 2])
    users = synth_users(idx.manifest["schema"], 3, seed=2)
    reqs = [idx.encode_request(u) for u in users]
    sizes = (1, 16, 32, 32)
    for path in steps:
        m = Matcher(idx, "cuda", options=CudaOptions(step=path))
        gtmkit.beam_search(m, reqs, GpuSyntheticDecoder(users, idx.vocab_size, seed=4), sizes)
        did(f"beam_search {path}")
        for pdl in (True, False):
            g = GraphedBeamSearch(m, reqs, GpuSyntheticDecoder(users, idx.vocab_size, seed=4), sizes,
                                  options=CudaOptions(step=path, pdl=pdl))
            g.replay()
            g.replay()
            did(f"graph {path} pdl={pdl}")


def _decoder_masks(tmp, steps, did) -> None:
    import cupy as cp

    import gtmkit
    from gtmkit.integrations.layout import SidTokenLayout
    from gtmkit.integrations.masking import SidMasker
    from gtmkit.matcher.matcher import Matcher
    from gtmkit.matcher.options import CudaOptions
    from support.catalogs import random_user
    from support.indexes import _build

    idx, _, _ = _build(tmp, 71, "static", {"k": [2, 3, 2]}, n_ads=300, L=3, V=9, name="mask")
    rng = np.random.default_rng(3)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(2)]
    layout = SidTokenLayout(2, 2 + idx.vocab_size + 1, eos_token_id=2 + idx.vocab_size)
    m = Matcher(idx, "cuda", options=CudaOptions(step=steps[-1]))
    fits = m.cuda.mask_scores_fits
    leaves = rng.integers(idx.first_leaf, idx.num_nodes, size=8)
    sids = np.stack([idx.leaf_sid(int(x)) for x in leaves]) + 2
    for one_launch in (True, False):
        m.cuda.mask_scores_fits = fits if one_launch else (lambda: False)
        masker = SidMasker(m, reqs, 4, layout)
        for depth in range(idx.sid_length + 2):
            tokens = cp.asarray(np.concatenate([np.zeros((8, 1), np.int64), sids[:, :depth]], axis=1))
            masker(tokens, cp.zeros((8, layout.vocab_size), cp.float32), 1)
        did(f"decoder masking {'one launch' if one_launch else 'three launches'}")
    m.cuda.mask_scores_fits = fits
    del gtmkit


def _small_trie():
    """A 50k-key succinct trie and two queries of proposals over 6 steps."""
    from gtmkit.trie.trie import SuccinctTrie
    from gtmkit.synth.keys import synth_keys
    from gtmkit.synth.proposals import synth_proposals

    trie = SuccinctTrie.build(synth_keys(50_000, seed=3))
    return (trie, *synth_proposals(trie, 2, 6, 600, seed=5))


def _trie(did) -> None:
    import cupy as cp

    from gtmkit.trie import search_cuda as tsc
    from gtmkit.trie.search import trie_beam_search, trie_beam_stepper

    trie, tokens, logp = _small_trie()
    for bw in (4, 1000, 3000):
        trie_beam_search(trie, tokens, logp, bw, device="cuda")
        did(f"trie search bw={bw}")
    trie_beam_search(trie, tokens, logp, 50, theta_tok=-6.0, theta_sent=-14.0, alpha=0.5, device="cuda")
    tsc.trie_beam_search_cuda(trie, cp.asarray(tokens), cp.asarray(logp), 50)
    did("trie search thresholds, device proposals")
    st = trie_beam_stepper(trie, 1, 8, device="cuda")
    rng = np.random.default_rng(9)
    for _ in range(3):
        st.step(rng.integers(0, 600, (1, 8, 5)), rng.standard_normal((1, 8, 5)).astype(np.float32))
    st.result()
    did("trie AR stepper")


def _server(did) -> None:
    from gtmkit.trie.server_cuda import TrieSearchServer

    from gtmkit.synth.proposals import synth_proposals

    trie = _small_trie()[0]
    tokens, logp = synth_proposals(trie, 2, 3, 16, seed=5)
    # the resident kernel polls for work and racecheck slows every access of it: a small beam and a long timeout
    with TrieSearchServer(trie, 8, 3, 16, timeout=400.0) as srv:
        srv.search(tokens[0], logp[0])
        srv.search(tokens[1], logp[1])
    did("trie server")


if __name__ == "__main__":
    unknown = set(sys.argv[1:]) - set(PARTS)
    if unknown:
        sys.exit(f"unknown parts: {', '.join(sorted(unknown))} (parts: {', '.join(PARTS)})")
    sys.exit(main(tuple(sys.argv[1:]) or PARTS))
