"""CPU matcher benchmark: one CD+GTM step per depth and the whole 4-step search (numba), side by side in
one run with (a) a NumPy-vectorised CD step (searchsorted over packed SID prefixes, dense [R, V] mask,
argpartition top-k) and (b) a GENRE-style nested-dict trie walked per beam by a Python
`prefix_allowed_tokens_fn`, then a dense additive mask and the same numpy top-k.

    python benchmarks/step_cpu.py --workdir /tmp/gtmkit-stepcpu --out benchmarks/results

B=16 requests, beams (1, 512, 1024, 1024), V=512, L=4 on a synth catalog of 15M ads (~10M SIDs, built once
and cached in --workdir). Step inputs are recorded from one real search with peaked synthetic logits, then
every variant is timed on exactly those inputs, in interleaved rounds (median, perf_counter), so a
background load slows all variants alike. Every variant includes its per-request top-k (k = next beam
size). (a) and (b) must give the same top-k scores as ours with gtm=False (checked on every step).
Writes benchmarks/results/step_cpu_<host>.json and .md (host: cpuN, --host)."""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# A fresh numba cache for the run (compile time is never timed): numba's per-file cache can keep a cached
# caller on a changed module's old code.
os.environ.setdefault("NUMBA_CACHE_DIR", tempfile.mkdtemp(prefix="gtmkit-numba-"))

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numba  # noqa: E402

import gtmkit  # noqa: E402
from gtmkit.synth.logits import SyntheticDecoder  # noqa: E402
from gtmkit.synth import synth_users, write_catalog  # noqa: E402

from _common import HOST_HELP, CpuWatch, result_paths  # noqa: E402
from _common import machine as _machine  # noqa: E402

DEFAULT_ADS = 15_000_000
DATE = __import__("datetime").date.today().isoformat()


def machine() -> dict:
    return _machine(numpy=np.__version__, numba=numba.__version__, numba_threads=numba.get_num_threads())


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --- index ---------------------------------------------------------------------------------------

def index_options(ap) -> None:
    """The options of the benchmarks that run on this index (--workdir, --ads) and of where results go."""
    ap.add_argument("--workdir", default="/tmp/gtmkit-stepcpu", help="catalog + index cache")
    ap.add_argument("--ads", type=int, default=DEFAULT_ADS, help="synth catalog size (15M ads ~ 10M SIDs)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)


def catalog_path(work: Path, n_ads: int) -> Path:
    """The synthetic catalog of n_ads ads that ensure_index keeps in work."""
    return work / ("c.parquet" if n_ads == DEFAULT_ADS else f"c_{n_ads}.parquet")


def ensure_index(work: Path, n_ads: int):
    """Synth catalog + static-partition index in work (reused when present)."""
    work.mkdir(parents=True, exist_ok=True)
    cat = catalog_path(work, n_ads)
    out = work / cat.stem.replace("c", "idx", 1)
    if not cat.exists():
        t = time.perf_counter()
        write_catalog(cat, n_ads, seed=1)
        log(f"synth catalog {n_ads:,} ads: {time.perf_counter() - t:.1f} s")
    if out.exists():
        try:
            return gtmkit.load_index(out, verify=False)
        except Exception as exc:  # a stale or foreign directory: rebuild it
            log(f"{out}: cannot load ({exc}); rebuilding")
    t = time.perf_counter()
    idx = gtmkit.build_index(cat, out, partition="static", k=[1, 4, 4, 2], overwrite=True)
    log(f"index build: {time.perf_counter() - t:.1f} s, {idx.num_sids:,} SIDs")
    return idx


def trie_nodes(idx):
    """parent int64 [nodes] (-1 at the root) and token int64 [nodes] (-1 at the root) of every trie node."""
    no = np.asarray(idx.node_offsets, np.int64)
    parent = np.empty(idx.num_nodes, np.int64)
    parent[0] = -1
    parent[1:] = np.repeat(np.arange(len(no) - 1, dtype=np.int64), np.diff(no))
    token = np.empty(idx.num_nodes, np.int64)
    token[0] = -1
    token[1:] = np.asarray(idx.child_tokens, np.int64)
    return parent, token


def all_sids(idx, parent, token) -> np.ndarray:
    """int64 [S, L]: every SID of the index (leaf order)."""
    L = idx.sid_length
    node = np.arange(idx.first_leaf, idx.num_nodes, dtype=np.int64)
    sids = np.empty((len(node), L), np.int64)
    for d in range(L - 1, -1, -1):
        sids[:, d] = token[node]
        node = parent[node]
    assert (node == 0).all()
    return sids


def prefixes(node_ids, parent, token, depth) -> np.ndarray:
    """int64 [R, depth]: the tokens from the root to each row's node (-1 for a dead row)."""
    node = np.asarray(node_ids, np.int64).copy()
    dead = node < 0
    node[dead] = 0
    out = np.empty((len(node), depth), np.int64)
    for d in range(depth - 1, -1, -1):
        out[:, d] = token[node]
        node = parent[node]
    out[dead] = -1
    return out


# --- (a) NumPy CD --------------------------------------------------------------------------------

def pack(tokens: np.ndarray, V: int) -> np.ndarray:
    """uint64 keys of token prefixes [N, d] (big-endian base V; fixed length per level, so unambiguous)."""
    key = np.zeros(len(tokens), np.uint64)
    for d in range(tokens.shape[1]):
        key = key * np.uint64(V) + tokens[:, d].astype(np.uint64)
    return key


def level_keys(sids: np.ndarray, V: int) -> list:
    """Sorted unique packed prefixes of every length 1..L (index d = prefix length)."""
    keys = [np.zeros(1, np.uint64)]
    for d in range(1, sids.shape[1] + 1):
        keys.append(np.unique(pack(sids[:, :d], V)))
    return keys


def topk_dense(scores: np.ndarray, B: int, k: int, V: int):
    """Per-request top-k of dense scores [R, V] (rows of a request contiguous, R = B * M): argpartition,
    then sort the k by (score desc, row asc, token asc). -> (parent rows, tokens, scores) [B, k], -1 / -inf pad."""
    R = scores.shape[0]
    M = R // B
    flat = scores.reshape(B, M * V)
    n = flat.shape[1]
    kk = min(k, n)
    part = np.argpartition(flat, n - kk, axis=1)[:, n - kk:]
    top = np.take_along_axis(flat, part, 1)
    order = np.lexsort((part, -top), axis=-1)
    part = np.take_along_axis(part, order, 1)
    top = np.take_along_axis(top, order, 1)
    dead = top == -np.inf
    rows = np.where(dead, -1, part // V + (np.arange(B) * M)[:, None])
    toks = np.where(dead, -1, part % V)
    out = (np.full((B, k), -1, np.int64), np.full((B, k), -1, np.int64), np.full((B, k), -np.inf, np.float32))
    out[0][:, :kk], out[1][:, :kk], out[2][:, :kk] = rows, toks, top
    return out


def numpy_cd_step(next_keys, row_key, live, logprobs, beam_scores, B, k, V):
    """(a): membership of every (row prefix + v) in the next level's sorted keys -> dense mask -> top-k."""
    keys = row_key[:, None] * np.uint64(V) + np.arange(V, dtype=np.uint64)[None, :]
    pos = np.searchsorted(next_keys, keys)
    np.minimum(pos, len(next_keys) - 1, out=pos)
    mask = next_keys[pos] == keys
    mask &= live[:, None]
    scores = np.where(mask, beam_scores[:, None] + logprobs, np.float32(-np.inf))
    return topk_dense(scores, B, k, V)


# --- (b) GENRE nested-dict trie ----------------------------------------------------------------------

class GenreTrie:
    """GENRE's genre/trie.py `Trie`: nested dicts token -> subtrie (leaves are empty dicts)."""

    def __init__(self):
        self.trie_dict = {}
        self.len = 0

    def add(self, sequence):
        d = self.trie_dict
        for t in sequence:
            nxt = d.get(t)
            if nxt is None:
                nxt = d[t] = {}
            d = nxt
        self.len += 1

    def get(self, prefix_sequence):
        d = self.trie_dict
        for t in prefix_sequence:
            d = d.get(t)
            if d is None:
                return []
        return list(d.keys())


def build_genre(sids: np.ndarray, chunk: int = 1 << 20) -> GenreTrie:
    trie = GenreTrie()
    gc.disable()  # millions of new containers: no collections while building
    try:
        for s in range(0, len(sids), chunk):
            for seq in sids[s:s + chunk].tolist():
                trie.add(seq)
    finally:
        gc.enable()
    gc.freeze()  # keep the trie out of later collections (they would scan its ~17M dicts)
    return trie


def genre_mask(trie, hist, row_request, V, rows=None):
    """(b), per beam: allowed = prefix_allowed_tokens_fn(batch_id, prefix); mask[r, allowed] = 0 on a -inf
    mask (the HF PrefixConstrainedLogitsProcessor loop). rows: only these rows (for sampling)."""
    def prefix_allowed_tokens_fn(batch_id, sent):
        return trie.get(sent.tolist())

    R = hist.shape[0]
    mask = np.full((R, V), -np.inf, np.float32)
    for r in (range(R) if rows is None else rows):
        mask[r, prefix_allowed_tokens_fn(row_request[r], hist[r])] = 0
    return mask


def genre_dense(mask, logprobs, beam_scores, B, k, V):
    """(b), dense part: scores = beam_score + logprob + mask, numpy top-k per request."""
    return topk_dense(beam_scores[:, None] + logprobs + mask, B, k, V)


def genre_step(trie, hist, row_request, logprobs, beam_scores, B, k, V):
    return genre_dense(genre_mask(trie, hist, row_request, V), logprobs, beam_scores, B, k, V)


# --- recording and timing ---------------------------------------------------------------------------

def record_inputs(m, q, users, sizes, seed):
    """One real search (gtm on, peaked synthetic logits); keep every step's matcher inputs."""
    steps = []
    orig = m.step

    def spy(node_ids, logprobs, beam_scores, row_request, requests, k, gtm=True, count_candidates=False,
            max_children=None, rows_best_first=False):
        steps.append(dict(node_ids=np.array(node_ids, np.int32), logprobs=np.array(logprobs, np.float32),
                          beam_scores=np.array(beam_scores, np.float32), row_request=np.array(row_request, np.int32),
                          k=int(k)))
        return orig(node_ids, logprobs, beam_scores, row_request, requests, k, gtm, count_candidates, max_children)

    m.step = spy
    try:
        res = gtmkit.beam_search(m, q, SyntheticDecoder(users, m.index.vocab_size, "peaked", seed), sizes, gtm=True,
                                 postfilter=False)
    finally:
        del m.step
    return steps, res


@numba.njit(parallel=True, cache=True)
def _gather_floor(node_ids, node_offsets, child_tokens, logprobs, n_internal):
    """Sum of every existing child's log-prob per row: the one read of the log-probs any CD step needs
    (no top-k, no GTM), so its time is a floor under every variant's step on this machine."""
    out = np.zeros(node_ids.shape[0], np.float32)
    for r in numba.prange(node_ids.shape[0]):
        n = node_ids[r]
        if n < 0 or n >= n_internal:
            continue
        acc = np.float32(0.0)
        for j in range(node_offsets[n], node_offsets[n + 1]):
            acc += logprobs[r, child_tokens[j]]
        out[r] = acc
    return out


def one_thread(fn):
    """fn run with numba limited to 1 thread (then restored)."""
    def run():
        n = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            return fn()
        finally:
            numba.set_num_threads(n)
    return run


def interleaved(fns: dict, reps: int, warmup: int = 1, skip=()) -> dict:
    """Median seconds of each fn, timed round-robin (one call of each per round)."""
    for _ in range(warmup):
        for name, fn in fns.items():
            if name not in skip:
                fn()
    times = {name: [] for name in fns}
    for i in range(reps):
        for name, fn in fns.items():
            if name in skip and i >= skip[name]:
                continue
            a = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - a)
    return {name: float(np.median(t)) for name, t in times.items()}


def same_topk(ours, theirs, what):
    """Same per-request score multisets (ties at the k-th score may pick different candidates), and the
    same (row, token) sets above the k-th score."""
    for b in range(ours.scores.shape[0]):
        a, t = np.sort(ours.scores[b]), np.sort(theirs[2][b])
        if not np.array_equal(a, t):
            raise SystemExit(f"{what}: request {b}: top-k scores differ from ours (gtm=False)")
        kth = a[0]
        sel_o = {(int(r), int(v)) for r, v, s in zip(ours.parent_rows[b], ours.tokens[b], ours.scores[b]) if s > kth}
        sel_t = {(int(r), int(v)) for r, v, s in zip(theirs[0][b], theirs[1][b], theirs[2][b]) if s > kth}
        if sel_o != sel_t:
            raise SystemExit(f"{what}: request {b}: top-k candidates differ from ours (gtm=False)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    index_options(ap)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--beams", default="1,512,1024,1024")
    ap.add_argument("--reps", type=int, default=20, help="timed rounds (ours, and per-step rounds)")
    ap.add_argument("--baseline-reps", type=int, default=5, help="rounds in which (a) and (b) are timed too")
    ap.add_argument("--genre-sample", type=int, default=0,
                    help="time (b)'s per-beam loop on this many rows per step and extrapolate (0: all rows)")
    ap.add_argument("--seed", type=int, default=7, help="synthetic decoder seed")
    args = ap.parse_args()
    sizes = tuple(int(x) for x in args.beams.split(","))
    B = args.requests

    idx = ensure_index(Path(args.workdir), args.ads)
    V, L = idx.vocab_size, idx.sid_length
    users = synth_users(idx.manifest["schema"], B, seed=11)
    m = gtmkit.Matcher(idx, "cpu")
    q = m.batch([idx.encode_request(u) for u in users])
    steps, res = record_inputs(m, q, users, sizes, args.seed)
    log(f"recorded {len(steps)} steps: rows {[len(s['node_ids']) for s in steps]}")

    t = time.perf_counter()
    parent, token = trie_nodes(idx)
    sids = all_sids(idx, parent, token)
    keys = level_keys(sids, V)
    setup_a = time.perf_counter() - t
    log(f"(a) packed prefixes: {setup_a:.1f} s, {sum(k.nbytes for k in keys) / 1e6:.0f} MB")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    trie = build_genre(sids)
    setup_b = time.perf_counter() - t
    rss_b = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 2**20
    log(f"(b) GENRE trie of {trie.len:,} SIDs: {setup_b:.1f} s, peak RSS +{rss_b:.2f} GiB")
    del sids

    rows = []
    n_internal = len(m.arrays.node_offsets) - 1
    for t_, s in enumerate(steps):
        nid, lp, bs, rr, k = s["node_ids"], s["logprobs"], s["beam_scores"], s["row_request"], s["k"]
        R = len(nid)
        assert R % B == 0 and np.array_equal(rr, np.repeat(np.arange(B), R // B)), "rows per request must be equal"
        depth = t_  # the rows' nodes are at depth t_; the step picks children at depth t_ + 1
        hist = prefixes(nid, parent, token, depth)
        live = nid >= 0
        row_key = np.where(live, pack(hist, V), np.uint64(0))
        assert np.array_equal(row_key[live], keys[depth][np.searchsorted(keys[depth], row_key[live])])

        ours_cd = m.step(nid, lp, bs, rr, q, k, gtm=False, count_candidates=True)
        ours_gtm = m.step(nid, lp, bs, rr, q, k, gtm=True, count_candidates=True)
        a_out = numpy_cd_step(keys[depth + 1], row_key, live, lp, bs, B, k, V)
        same_topk(ours_cd, a_out, f"step {t_ + 1} (a)")
        b_out = genre_step(trie, hist, rr, lp, bs, B, k, V)
        same_topk(ours_cd, b_out, f"step {t_ + 1} (b)")

        sample = None
        if args.genre_sample and R > args.genre_sample:
            sample = np.linspace(0, R - 1, args.genre_sample).round().astype(np.int64)
        fns = {
            "ours_gtm": lambda: m.step(nid, lp, bs, rr, q, k, gtm=True),
            "ours_cd": lambda: m.step(nid, lp, bs, rr, q, k, gtm=False),
            "ours_gtm_1t": one_thread(lambda: m.step(nid, lp, bs, rr, q, k, gtm=True)),
            "a": lambda: numpy_cd_step(keys[depth + 1], row_key, live, lp, bs, B, k, V),
            "floor": lambda: _gather_floor(nid, m.arrays.node_offsets, m.arrays.child_tokens, lp, n_internal),
        }
        if sample is None:
            fns["b"] = lambda: genre_step(trie, hist, rr, lp, bs, B, k, V)
        else:  # (b) = per-beam loop over the sample, scaled to R rows, + the dense part on the full mask
            full_mask = genre_mask(trie, hist, rr, V)
            fns["b_loop"] = lambda: genre_mask(trie, hist, rr, V, rows=sample)
            fns["b_dense"] = lambda: genre_dense(full_mask, lp, bs, B, k, V)
            fns["b_fixed"] = lambda: genre_mask(trie, hist, rr, V, rows=())
        watch = CpuWatch()
        med = interleaved(fns, args.reps, skip={x: args.baseline_reps for x in ("a", "b", "b_loop", "b_dense", "b_fixed")})
        if sample is None:
            b_s = med["b"]
        else:  # fixed part (the -inf mask) + per-beam part scaled to R rows + dense part
            b_s = med["b_fixed"] + max(med["b_loop"] - med["b_fixed"], 0.0) * R / len(sample) + med["b_dense"]
        row = {"step": t_ + 1, "depth": t_ + 1, "rows": R, "k": k,
               "candidates_per_request_cd": float(ours_cd.num_candidates.mean()),
               "candidates_per_request_gtm": float(ours_gtm.num_candidates.mean()),
               "ours_ms_gtm": 1e3 * med["ours_gtm"], "ours_ms_cd": 1e3 * med["ours_cd"],
               "ours_ms_gtm_1thread": 1e3 * med["ours_gtm_1t"],
               "a_numpy_cd_ms": 1e3 * med["a"], "b_genre_cd_ms": 1e3 * b_s,
               "floor_gather_ms": 1e3 * med["floor"],
               "b_sampled_rows": None if sample is None else int(len(sample)),
               "same_topk_as_ours_cd": True, "load": watch.stop()}
        row["a_over_ours_gtm"] = row["a_numpy_cd_ms"] / row["ours_ms_gtm"]
        row["b_over_ours_gtm"] = row["b_genre_cd_ms"] / row["ours_ms_gtm"]
        rows.append(row)
        log(json.dumps(row))

    whole = whole_search(m, q, steps, res, sizes, args.reps)
    whole["a_sum_of_steps_ms"] = sum(r["a_numpy_cd_ms"] for r in rows)
    whole["b_sum_of_steps_ms"] = sum(r["b_genre_cd_ms"] for r in rows)
    whole["ours_sum_of_steps_ms_gtm"] = sum(r["ours_ms_gtm"] for r in rows)
    log(json.dumps(whole))

    targets = {
        "ours_gtm_5x_faster_than_a_every_depth": all(r["a_over_ours_gtm"] >= 5 for r in rows),
        "ours_gtm_100x_faster_than_b_every_depth": all(r["b_over_ours_gtm"] >= 100 for r in rows),
        "whole_search_gtm_postfilter_le_100ms": whole["ours_ms_gtm_postfilter"] <= 100,
    }
    result = {"benchmark": "step_cpu", "date": DATE, "machine": machine(),
              "command": "python " + " ".join(sys.argv),
              "index": {"sids": idx.num_sids, "ads": idx.num_ads, "nodes": idx.num_nodes,
                        "partition": idx.stats()["partition"], "vocab": V, "sid_length": L},
              "requests": B, "beams": list(sizes), "reps": args.reps, "baseline_reps": args.baseline_reps,
              "setup": {"a_packed_prefix_s": setup_a, "a_packed_prefix_mb": sum(k_.nbytes for k_ in keys) / 1e6,
                        "b_genre_trie_s": setup_b, "b_genre_trie_sids": trie.len, "b_genre_trie_rss_gib": rss_b},
              "steps": rows, "whole": whole, "targets": targets}
    js, md = result_paths(args.out, "step_cpu", args.host)
    js.write_text(json.dumps(result, indent=1))
    md.write_text(markdown(result))
    print(markdown(result))


def whole_search(m, q, steps, res, sizes, reps):
    """Our whole search; the decoder replays the recorded logits, so only gtmkit is timed."""
    recorded = [s["logprobs"] for s in steps]

    def replayed(step, prev, parents):
        return recorded[step]

    again = gtmkit.beam_search(m, q, replayed, sizes, gtm=True, postfilter=True)
    if not (np.array_equal(again.sids, res.sids) and np.array_equal(again.scores, res.scores)):
        raise SystemExit("replayed search differs from the recorded one")
    variants = {"ours_ms_gtm_postfilter": (True, True), "ours_ms_gtm": (True, False), "ours_ms_cd": (False, False)}
    per_step = {name: [] for name in variants}

    def run(name, gtm, pf):
        r = gtmkit.beam_search(m, q, replayed, sizes, gtm=gtm, postfilter=pf)
        per_step[name].append(r.seconds)

    fns = {name: (lambda n=name, g=g, p=p: run(n, g, p)) for name, (g, p) in variants.items()}
    variants["ours_ms_gtm_postfilter_1thread"] = (True, True)
    per_step["ours_ms_gtm_postfilter_1thread"] = []
    fns["ours_ms_gtm_postfilter_1thread"] = one_thread(lambda: run("ours_ms_gtm_postfilter_1thread", True, True))
    watch = CpuWatch()
    med = interleaved(fns, reps)
    whole = {name: 1e3 * v for name, v in med.items()}
    whole["load"] = watch.stop()
    for name in variants:
        whole[name.replace("ms_", "step_ms_", 1)] = [1e3 * x for x in np.median(np.array(per_step[name]), axis=0)]
    whole["ads_after_postfilter_per_request"] = float(np.mean([len(a) for a, _ in again.ads]))
    return whole


def load(x):
    d = x.get("load", {})
    return "n/a" if "other_cores" not in d else f"{d['other_cores']:.2f} (+{d['steal_cores']:.2f} steal)"


def fl(x):
    return "n/a" if x is None else f"{x:.3f}"


def markdown(r):
    mc = r["machine"]
    w = r["whole"]
    lines = [f"# CPU matcher step ({r['date']})", "",
             f"Machine: {mc['cpu']}, {mc['cores']} cores, {mc['memory_gib']} GiB; Python {mc['python']}, "
             f"numpy {mc['numpy']}, numba {mc['numba']} with {mc['numba_threads']} threads.  ",
             f"Command: `{r['command']}`.  ",
             f"Index: {r['index']['sids']:,} SIDs, {r['index']['ads']:,} ads, V={r['index']['vocab']}, "
             f"L={r['index']['sid_length']}, partition {r['index']['partition']['mode']}. B={r['requests']} requests, "
             f"beams {r['beams']}; inputs recorded from one search with peaked synthetic logits (gtm on). "
             f"Median of {r['reps']} interleaved rounds ((a), (b): first {r['baseline_reps']} rounds).", "",
             "| step | rows | k | cand/req CD | cand/req GTM | ours CD+GTM ms | ours CD ms | ours CD+GTM ms, 1 thread | "
             "(a) NumPy CD ms | "
             "(b) GENRE dict CD ms | (a)/ours | (b)/ours | floor: read the children's log-probs once, ms | "
             "(b)/100 ms | other load, cores |",
             "|" + "---|" * 15]
    for s in r["steps"]:
        bnote = f" (sampled {s['b_sampled_rows']} rows)" if s["b_sampled_rows"] else ""
        lines.append(f"| {s['step']} | {s['rows']} | {s['k']} | {s['candidates_per_request_cd']:.0f} | "
                     f"{s['candidates_per_request_gtm']:.0f} | {s['ours_ms_gtm']:.3f} | {s['ours_ms_cd']:.3f} | "
                     f"{s['ours_ms_gtm_1thread']:.3f} | "
                     f"{s['a_numpy_cd_ms']:.2f} | {s['b_genre_cd_ms']:.2f}{bnote} | {s['a_over_ours_gtm']:.1f}x | "
                     f"{s['b_over_ours_gtm']:.1f}x | {fl(s.get('floor_gather_ms'))} | {s['b_genre_cd_ms'] / 100:.3f} | "
                     f"{load(s)} |")
    lines += ["", "| whole 4-step search, 16 requests | ms |", "|---|---|",
              f"| ours, CD+GTM + post-filter (`beam_search`) | {w['ours_ms_gtm_postfilter']:.2f} |",
              f"| ours, CD+GTM + post-filter, 1 numba thread | {w['ours_ms_gtm_postfilter_1thread']:.2f} |",
              f"| ours, CD+GTM, no post-filter | {w['ours_ms_gtm']:.2f} |",
              f"| ours, CD only, no post-filter | {w['ours_ms_cd']:.2f} |",
              f"| ours, sum of the 4 CD+GTM steps above | {w['ours_sum_of_steps_ms_gtm']:.2f} |",
              f"| (a) NumPy CD, sum of the 4 steps | {w['a_sum_of_steps_ms']:.1f} |",
              f"| (b) GENRE dict CD, sum of the 4 steps | {w['b_sum_of_steps_ms']:.1f} |", "",
              f"Other load while our whole search was timed: {load(w)} cores busy outside this process.", ""]
    st = r["setup"]
    t = r["targets"]
    yes = {True: "met", False: "NOT met"}
    lines += [
        "Targets: ours CD+GTM >= 5x faster than (a) at every depth: "
        f"**{yes[t['ours_gtm_5x_faster_than_a_every_depth']]}**; >= 100x faster than (b) at every depth: "
        f"**{yes[t['ours_gtm_100x_faster_than_b_every_depth']]}**; whole search (CD+GTM + post-filter) <= 100 ms: "
        f"**{yes[t['whole_search_gtm_postfilter_le_100ms']]}**.", "",
        "Floor: a parallel numba loop that only sums each existing child's log-prob (no scores kept, no top-k, "
        "no GTM), timed in the same rounds: where it exceeds (b)/100, no CD step on this machine can be 100x "
        "faster than (b) at that depth.", "",
        "Ratios and targets use ours with all numba threads. "
        "Notes. Every variant includes its per-request top-k (k = next beam size). Ours is one fused numba "
        "step (`Matcher.step`, CSR children, lazy GTM in score order; bucket windows for requests under "
        "16,384 candidates, a one-pass band with a rising threshold above). "
        "(a) SIDs packed as uint64 prefixes, one sorted unique array per depth (built once, "
        f"{st['a_packed_prefix_s']:.1f} s, {st['a_packed_prefix_mb']:.0f} MB); per step: key = prefix * V + v for all "
        "[R, V], `np.searchsorted` membership -> dense mask, scores = beam + logprob (masked -inf), "
        "`np.argpartition` over each request's [M*V] scores, then the k sorted. "
        f"(b) GENRE `Trie` (nested dicts) of all {st['b_genre_trie_sids']:,} SIDs (built once, {st['b_genre_trie_s']:.0f} s, "
        f"+{st['b_genre_trie_rss_gib']:.1f} GiB RSS); per beam `prefix_allowed_tokens_fn(batch_id, sent)` = "
        "`trie.get(sent.tolist())`, `mask[r, allowed] = 0` on a -inf [R, V] mask (the HF "
        "PrefixConstrainedLogitsProcessor loop), then the same numpy top-k as (a). (a) and (b) are CD only; on "
        "every step they return the same top-k score multiset (and the same candidates above the k-th score) as "
        "ours with gtm=False. The whole search replays the recorded logits (decoder time excluded) and matches "
        "the recorded search; (a) and (b) whole = sum of their 4 steps on the recorded inputs. "
        "Other load: cores busy outside this process (from /proc/stat) while that row was timed; the machine "
        "is shared, and our 2-thread kernel loses more to one busy core than the 1-thread baselines do."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
