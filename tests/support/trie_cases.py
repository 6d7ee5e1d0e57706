"""Shared succinct-trie kernel cases: hostile proposals, and the check of the CUDA search (emulated or on a GPU)
against the plain-Python reference, used by the emulation tests and the GPU tests alike."""

from __future__ import annotations

import numpy as np

from gtmkit.trie.search_cuda import TrieBeamStepperCuda, trie_beam_search_cuda

from support.tries import assert_same, random_logp, random_settings, random_tokens, random_trie


def check_reference(emu, trie, ref, nar, ar, bw, settings):
    """NAR over nar = (tokens, logp) [b, T, K] and AR over ar = [T, b, BW, K] against the plain-Python reference,
    on `emu` (EmuDevice, or search_cuda's CupyDevice for the GPU)."""
    from gtmkit.testing.trie import ArProposals, NarProposals, ref_beam_search
    (tokens, logp), b = nar, nar[0].shape[0]
    ids, scores = trie_beam_search_cuda(trie, tokens, logp, bw, *settings, device=emu)
    with np.errstate(over="ignore"):  # (the reference's float32 sums may overflow to +inf, as the kernels' do)
        for q in range(b):
            assert_same(ids[q], scores[q], *ref_beam_search(ref, NarProposals(tokens[q], logp[q]), bw, *settings), bw)
    tokens, logp = ar
    gpu = TrieBeamStepperCuda(trie, b, bw, *settings, device=emu)
    for t in range(len(tokens)):
        gpu.step(tokens[t], logp[t])
    ids, scores = (emu.to_host(x) for x in gpu.result())
    with np.errstate(over="ignore"):
        for q in range(b):
            assert_same(ids[q], scores[q], *ref_beam_search(ref, ArProposals(tokens[:, q], logp[:, q]), bw, *settings),
                        bw)


def hostile(rng, tokens, logp):
    """Proposals with NaN (dropped: it fails lp > theta_tok), +inf (above every finite score), -inf, values whose
    sums overflow float32, and tokens no key holds: negative, past every label, past int32, the int64 extremes."""
    tokens, logp = tokens.astype(np.int64), logp.copy()
    odd = [-1, -2, -2**63, 2**63 - 1, 2**31, 2**32 + 5, 10**6]
    pick = rng.random(tokens.shape) < 0.2
    tokens[pick] = rng.choice(odd, size=int(pick.sum()))
    for v, share in ((np.nan, 0.1), (np.inf, 0.05), (-np.inf, 0.1), (3.0e38, 0.05), (-3.0e38, 0.05)):
        logp[rng.random(logp.shape) < share] = v
    return tokens, logp


def hostile_case(seed):
    """-> (trie, ref, nar, ar, bw, settings): a random trie and hostile NAR [b, T, K] / AR [T, b, BW, K] proposals."""
    rng = np.random.default_rng(700 + seed)
    trie, ref = random_trie(rng, int(rng.integers(5, 60)))
    b, T, K = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
    bw = int(rng.integers(1, 8))
    settings = random_settings(rng, seed)
    nar = hostile(rng, random_tokens(rng, (b, T, K)), random_logp(rng, (b, T, K), seed % 2 == 0))
    ar = hostile(rng, random_tokens(rng, (T, b, bw, K)), random_logp(rng, (T, b, bw, K), seed % 2 == 1))
    return trie, ref, nar, ar, bw, settings
