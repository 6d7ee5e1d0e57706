"""GPU constrained beam search over the succinct trie equals the CPU search (and so the reference)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gtmkit.matcher.matcher import cuda_available

pytestmark = pytest.mark.gpu
if not cuda_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

import cupy as cp  # noqa: E402

from gtmkit.matcher.trie_search_cpu import trie_beam_search  # noqa: E402
from gtmkit.synth_trie import synth_keys, synth_proposals  # noqa: E402
from gtmkit.indexer.succinct import SuccinctTrie  # noqa: E402

from test_succinct_search import random_logp, random_tokens, random_trie  # noqa: E402


@pytest.mark.parametrize("seed", range(40))
def test_gpu_equals_cpu_on_random_tries(seed):
    rng = np.random.default_rng(seed)
    trie, _ = random_trie(rng, int(rng.integers(1, 40)))
    b, T, K = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
    bw = int(rng.integers(1, 7))
    theta_tok = [-math.inf, -1.2][seed % 2]
    theta_sent = [-math.inf, -3.0][(seed // 2) % 2]
    alpha = [0.0, 0.7, -1.5][seed % 3]
    tokens, logp = random_tokens(rng, (b, T, K)), random_logp(rng, (b, T, K), seed % 2 == 0)
    want_ids, want_scores = trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha)
    ids, scores = trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha, device="cuda")
    assert np.array_equal(cp.asnumpy(ids), want_ids)
    np.testing.assert_allclose(cp.asnumpy(scores), want_scores, rtol=0, atol=1e-5)


def test_gpu_equals_cpu_on_synth_workload():
    keys = synth_keys(20000, seed=3, vocab=200_000)
    trie = SuccinctTrie.build(keys)
    tokens, logp = synth_proposals(trie, 4, 8, 200, seed=5)
    want_ids, want_scores = trie_beam_search(trie, tokens, logp, 200, alpha=0.5)
    ids, scores = trie_beam_search(trie, tokens, logp, 200, alpha=0.5, device="cuda")
    assert np.array_equal(cp.asnumpy(ids), want_ids)
    np.testing.assert_allclose(cp.asnumpy(scores), want_scores, rtol=0, atol=1e-5)
