"""Plain-Python references for the succinct trie and its beam search (docs/design.md §6): dict and set based,
slow and obviously right; the numba (and CUDA) paths are tested against them."""

from __future__ import annotations

import math

import numpy as np


class RefTrie:
    """Every distinct prefix of the keys is a node; BFS ids = prefixes sorted by (length, tokens), which
    is level by level with children sorted by token. Key ids = keys in that same order."""

    def __init__(self, keys):
        self.keys = {tuple(int(x) for x in k) for k in keys}
        prefixes = {()} | {k[:d] for k in self.keys for d in range(1, len(k) + 1)}
        self.nodes = sorted(prefixes, key=lambda p: (len(p), p))
        self.node_id = {p: i for i, p in enumerate(self.nodes)}
        self.key_list = [p for p in self.nodes if p in self.keys]
        self.key_id = {k: i for i, k in enumerate(self.key_list)}
        self.kids: dict = {p: [] for p in self.nodes}
        for p in self.nodes[1:]:
            self.kids[p[:-1]].append(p[-1])  # nodes are visited in sorted order: labels ascend

    def lookup(self, seq) -> int:
        return self.key_id.get(tuple(seq), -1)

    def children(self, node: int) -> tuple:
        """(labels, child node ids) of node, labels ascending."""
        p = self.nodes[node]
        return list(self.kids[p]), [self.node_id[p + (x,)] for x in self.kids[p]]

    def keys_with_prefix(self, prefix, limit=None) -> list:
        prefix = tuple(prefix)
        ids = [i for i, k in enumerate(self.key_list) if k[:len(prefix)] == prefix]
        return ids if limit is None else ids[:limit]


def ref_beam_search(ref: RefTrie, proposals, beam_width: int, theta_tok=-math.inf, theta_sent=-math.inf,
                    alpha=0.0, trace: list = None) -> tuple:
    """docs/design.md §6 read literally, for one query. proposals(t, i) -> (tokens, logps) of live beam i at step
    t (NAR: the same list for every i), for t in range(steps) where steps = proposals.steps.
    Scores add in float32 (overflow to +-inf); normalised = float32(float(score) * (6 / (5 + d)) ** alpha).
    A NaN log-prob fails lp > theta_tok (dropped); +inf ranks above every finite score, ties as for any score.
    -> (key ids list, scores list), best first, at most beam_width. With trace=[], the live list of
    every step is appended to it as [(node id, score, parent beam, token), ...], best first."""
    tt, ts = np.float32(theta_tok), np.float32(theta_sent)
    live = [((), np.float32(0.0))]
    finished: dict = {}
    for t in range(proposals.steps):
        cands = []
        for i, (prefix, s) in enumerate(live):
            best: dict = {}
            for tok, lp in zip(*proposals(t, i)):
                lp = np.float32(lp)
                if lp > tt:
                    best[int(tok)] = max(best.get(int(tok), lp), lp)
            for tok, lp in best.items():
                node = prefix + (tok,)
                if node not in ref.node_id:
                    continue
                with np.errstate(over="ignore"):  # float32 sums and casts overflow to +-inf, as in the kernels
                    score = np.float32(s + lp)
                    norm = np.float32(float(score) * (6.0 / (5 + len(node))) ** alpha)
                if not score > ts:
                    continue
                if node in ref.keys:
                    k = ref.key_id[node]
                    finished[k] = max(finished.get(k, norm), norm)
                if ref.kids[node]:
                    cands.append((score, i, tok, node))
        cands.sort(key=lambda c: (-c[0], len(c[3]), c[3]))  # ties: the prefixes' order (node id asc)
        live = [(c[3], c[0]) for c in cands[:beam_width]]
        if trace is not None:
            trace.append([(ref.node_id[c[3]], float(c[0]), c[1], c[2]) for c in cands[:beam_width]])
    top = sorted(finished.items(), key=lambda kv: (-kv[1], kv[0]))[:beam_width]
    return [k for k, _ in top], [float(s) for _, s in top]


class NarProposals:
    """proposals(t, i) for ref_beam_search from one query's NAR grid tokens / logp [T, K]."""

    def __init__(self, tokens, logp):
        self.tokens, self.logp, self.steps = np.asarray(tokens), np.asarray(logp), len(tokens)

    def __call__(self, t, i):
        return self.tokens[t], self.logp[t]


class ArProposals:
    """proposals(t, i) from per-step, per-beam grids tokens / logp [T, BW, K] of one query."""

    def __init__(self, tokens, logp):
        self.tokens, self.logp, self.steps = np.asarray(tokens), np.asarray(logp), len(tokens)

    def __call__(self, t, i):
        return self.tokens[t, i], self.logp[t, i]
