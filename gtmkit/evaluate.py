"""`gtmkit eval`: CD-only against CD+GTM on the same users and logits (GRACE §6-style figures)."""

from __future__ import annotations

import time

import numpy as np
from numba import prange

from .threads import parallel_njit
from .synth.logits import SyntheticDecoder
from .matcher.beam import as_numpy, beam_search
from .matcher.cpu.step import ad_eligible, depth_of, node_passes
from .matcher.matcher import Matcher
from .progress import Progress, report


@parallel_njit(cache=True)
def _recall(t, q, rows, sid_of_row, first_leaf, eligible_out, ok_out):
    """Per request b: of the sampled ad rows that are exactly eligible, how many have every SID
    prefix (leaf up to the root's children) passing GTM. Must be all of them."""
    for b0 in prange(q.bitmask.shape[0]):
        b = np.int64(b0)  # one signature for the callees (see matcher/cpu.step.step_kernel)
        e = 0
        ok = 0
        for i in range(rows.shape[0]):
            r = rows[i]
            if not ad_eligible(t, q, b, r):
                continue
            e += 1
            node = first_leaf + sid_of_row[r]
            good = True
            while node > 0:
                if not node_passes(t, q, b, node, depth_of(t, node)):
                    good = False
                    break
                # parent: the internal node whose child range holds entry node-1
                a, z = 0, t.node_offsets.shape[0] - 1
                while z - a > 1:
                    m = (a + z) >> 1
                    if t.node_offsets[m] <= node - 1:
                        a = m
                    else:
                        z = m
                node = a
            ok += good
        eligible_out[b] = e
        ok_out[b] = ok


def prefix_recall(matcher: Matcher, batch, sample: int = 200_000, seed: int = 0) -> dict:
    """Share of (user, eligible ad) pairs whose every SID prefix passes GTM, over all ads or a sample."""
    index = matcher.index
    n = index.num_ads
    rng = np.random.default_rng(seed)
    rows = np.arange(n) if n <= sample else np.sort(rng.choice(n, size=sample, replace=False))
    sid_of_row = np.repeat(np.arange(index.num_sids, dtype=np.int64), np.diff(np.asarray(index.sid_ad_offsets)))
    e = np.zeros(batch.size, np.int64)
    ok = np.zeros(batch.size, np.int64)
    host_batch = getattr(batch, "host", batch)  # the GPU keeps the host copy of the requests
    _recall(matcher.arrays, host_batch, rows.astype(np.int64), sid_of_row, index.first_leaf, e, ok)
    pairs = int(e.sum())
    return {"pairs": pairs, "ads_sampled": int(len(rows)), "recall": float(ok.sum() / pairs) if pairs else 1.0}


def run_mode(matcher: Matcher, users, batch, beams, logits: str, seed: int, gtm: bool, peak: float) -> dict:
    V = matcher.index.vocab_size
    dec = SyntheticDecoder(users, V, logits, seed, peak=peak)
    t0 = time.perf_counter()
    res = beam_search(matcher, batch, dec, beams, gtm=gtm, postfilter=True, count_candidates=True)
    secs = time.perf_counter() - t0
    expanded = matcher.postfilter(res.leaf_nodes, batch, exact=False)
    n_sids = int((res.leaf_nodes >= 0).sum())
    n_expanded = sum(len(a) for a, _ in expanded)
    n_eligible = sum(len(a) for a, _ in res.ads)
    sids_with_eligible = sum(len(np.unique(as_numpy(rank))) for _, rank in res.ads)
    B = len(users)
    return {
        "mode": "cd+gtm" if gtm else "cd",
        "pass_rate": n_eligible / n_expanded if n_expanded else 0.0,
        "sid_precision": sids_with_eligible / n_sids if n_sids else 0.0,
        "sids_per_request": n_sids / B,
        "ads_expanded_per_request": n_expanded / B,
        "eligible_ads_per_request": n_eligible / B,
        "surviving_candidates_per_step": [float(x) for x in as_numpy(res.candidates).mean(axis=1)],
        "beams_per_step": [float(x) for x in as_numpy(res.beams).mean(axis=1)],
        "ms_per_request": 1000 * secs / B,
    }


def evaluate(index, users, beams=(1, 512, 1024, 1024), logits: str = "peaked", seed: int = 0,
             device: str = "cpu", recall_sample: int = 200_000, peak: float = None,
             progress: Progress = None) -> dict:
    """CD-only and CD+GTM on the same users and synthetic logits; recall of eligible prefixes."""
    from .synth.logits import DEFAULT_PEAK

    peak = DEFAULT_PEAK if peak is None else peak
    matcher = Matcher(index, device=device)
    batch = matcher.batch([index.encode_request(u) for u in users])
    out = {"index": str(index.path), "users": len(users), "beams": list(beams), "logits": logits,
           "peak": peak if logits == "peaked" else None, "seed": seed, "device": matcher.device}
    report(progress, 0, 3, "eval")
    # one untimed search per mode on the first user: the first calls compile the CPU kernels (numba) or load
    # the GPU ones, which the first timed mode would otherwise report as its time
    one = matcher.batch([index.encode_request(users[0])])
    for gtm in (False, True):
        run_mode(matcher, users[:1], one, beams, logits, seed, gtm, peak)
    out["cd"] = run_mode(matcher, users, batch, beams, logits, seed, False, peak)
    report(progress, 1, 3, "eval")
    out["gtm"] = run_mode(matcher, users, batch, beams, logits, seed, True, peak)
    report(progress, 2, 3, "eval")
    out["recall"] = prefix_recall(matcher, batch, recall_sample, seed)
    report(progress, 3, 3, "eval")
    s = index.stats()["bytes"]
    out["matcher_bytes"] = s["matcher_ids"] + s["matcher_tables"]
    out["partition"] = index.stats()["partition"]
    return out
