"""Synthetic decoders for eval, demo and benchmarks: log-probs from a seeded hash of (user, prefix, token).

The same prefix always gets the same log-probs, whatever else is in the beam, so CD-only and CD+GTM
runs see the same model. "peaked" prefers the user's interest clusters (synth users' `_interests`,
first SID tokens whose targeting fits the user), so beams are not random walks."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import parallel_njit
from .._bits import GOLDEN, mix64

# Step-0 boost (in logits) of a user's interest tokens. The beam keeps all ~512 first tokens at step
# 1 and then the top 1024 of ~10k (1M SIDs) to ~70k (10M SIDs) depth-2 prefixes by summed logistic
# noise (scale 1), whose extremes are several units high, so a boost has to be large to matter: on a
# 1M-SID synth catalog the share of CD-only final SIDs inside the interest clusters is ~10% at peak
# 4, ~70% at 10 and ~85-95% at 13. 13 puts the CD-only ad-level pass rate at ~23.5% (GRACE: 23.55%)
# with the default synth targeting rates (benchmarks/results/eval_cpu2.md).
DEFAULT_PEAK = 13.0


@parallel_njit(cache=True)
def _logits(keys, boost_rows, boosts, V, scale, out):
    """out[r, v] = log_softmax(scale * logistic_noise(keys[r], v) + boosts[boost_rows[r], v])."""
    for r in prange(keys.shape[0]):
        mx = -np.inf
        for v in range(V):
            h = mix64(keys[r] ^ (np.uint64(v + 1) * GOLDEN))
            u = (np.float64(h >> np.uint64(11)) + 0.5) / 9007199254740992.0
            x = scale * np.log(u / (1.0 - u))
            if boost_rows[r] >= 0:
                x += boosts[boost_rows[r], v]
            out[r, v] = x
            mx = max(mx, x)
        s = 0.0
        for v in range(V):
            s += np.exp(out[r, v] - mx)
        lse = mx + np.log(s)
        for v in range(V):
            out[r, v] = out[r, v] - lse


@njit(cache=True, nogil=True)
def _extend(keys, parents, tokens, out):
    for r in range(parents.shape[0]):
        p = parents[r]
        out[r] = mix64(keys[p] ^ np.uint64(tokens[r] + 7)) if p >= 0 else np.uint64(0)


class SyntheticDecoder:
    """A `logits_fn` for beam_search: kind "random" (i.i.d. logistic logits per prefix and token) or
    "peaked" (step 0 adds `peak` to each user's interest tokens). One instance per search: it keeps
    the per-row prefix state that a real decoder keeps in its KV cache."""

    def __init__(self, users, vocab: int, kind: str = "peaked", seed: int = 0, peak: float = DEFAULT_PEAK,
                 scale: float = 1.0):
        if kind not in ("random", "peaked"):
            raise ValueError(f"logits kind must be 'random' or 'peaked', got {kind!r}")
        self.vocab, self.kind, self.scale = int(vocab), kind, float(scale)
        B = len(users)
        self.boosts = np.zeros((B, self.vocab), np.float32)
        if kind == "peaked":
            for b, u in enumerate(users):
                for t in u.get("_interests", []) if isinstance(u, dict) else []:
                    if 0 <= int(t) < self.vocab:
                        self.boosts[b, int(t)] = peak
        base = (int(seed) * 0x9E3779B97F4A7C15) % 2**64
        self.user_keys = np.array([mix64(np.uint64(base ^ (b + 1))) for b in range(B)], np.uint64)
        self.keys = None

    def __call__(self, step, prev_tokens, parent_rows):
        # Runs on the host: with a GPU matcher the beam state arrives as CuPy arrays and the log-probs
        # go back as numpy (the step uploads them). GpuSyntheticDecoder stays on the device.
        from ..matcher.beam import as_numpy
        prev_tokens = as_numpy(prev_tokens)
        parents = np.asarray(as_numpy(parent_rows), np.int64)
        if step == 0:
            self.keys = self.user_keys[parents]
            boost_rows = parents
        else:
            keys = np.empty(len(parents), np.uint64)
            _extend(self.keys, parents, np.asarray(prev_tokens, np.int64), keys)
            self.keys = keys
            boost_rows = np.full(len(parents), -1, np.int64)
        out = np.empty((len(parents), self.vocab), np.float32)
        _logits(self.keys, boost_rows, self.boosts, self.vocab, self.scale, out)
        return out
