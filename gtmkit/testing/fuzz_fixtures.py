"""The untouched artifacts the fuzz cases start from (built once per run, in the parent), the fixed
workload whose answers an accepted artifact must reproduce, and kernel-vs-reference checks that read
the same (possibly edited) arrays the kernels read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from .gtm import step_reference
from ..targeting.semantics import ad_eligible_reference
from .fuzz_core import Wrong
from .fuzz_gen import random_spec, random_table, random_user
from .fuzz_manifest import digest_status, write_manifest

BEAMS = (1, 3, 5)


def build_fixtures(root: Path, seed: int) -> dict:
    """Catalog (L=3, with Bloom), its index in a fixed and a jagged layout, a SuccinctTrie; -> the
    context every case gets (paths, users, workload inputs and the untouched artifacts' answers)."""
    from .. import SuccinctTrie, build_index
    from ..indexer.verify import verify_index

    rng = np.random.default_rng([int(seed), 7])
    spec = random_spec(rng, bloom_required=True)
    spec["sid"] = {"column": "sid", "length": 3, "vocab": 6}
    table = random_table(rng, spec, n_ads=50)
    cat = root / "fixture.parquet"
    pq.write_table(table, cat)
    (root / "fixture.schema.json").write_text(json.dumps(spec))
    ctx = {"catalog": str(cat), "spec": spec, "users": [random_user(rng, spec) for _ in range(3)],
           "ad_ids": table.column("ad_id").to_pylist(), "seed": int(seed), "answers": {}, "paths": {}}
    for name, kw in (("fixed", {"partition": "static", "k": [2, 2, 1]}),
                     ("jagged", {"partition": "dynamic", "target_fill": 0.4, "k_max": 3})):
        idx = build_index(cat, root / name, **kw)
        verify_index(root / name)  # compiles the checker's kernels here, not in every child
        ctx["paths"][name] = str(root / name)
        ctx["answers"][name] = index_answers(idx, ctx)
    keys = [[int(x) for x in rng.choice([0, 1, 2, 3, 70000, 2**31 - 1], size=rng.integers(1, 5))] for _ in range(30)]
    SuccinctTrie.build(keys).save(root / "trie")
    ctx["paths"]["trie"] = str(root / "trie")
    ctx["keys"] = keys
    depth = max(len(k) for k in keys)
    ctx["proposals"] = (rng.choice([0, 1, 2, 3, 5, 70000, 2**31 - 1, -1], size=(3, depth, 4)).astype(np.int64),
                        np.log(rng.random((3, depth, 4)) + 1e-3).astype(np.float32))
    ctx["answers"]["trie"] = trie_answers(SuccinctTrie.load(root / "trie"), ctx)
    ctx["manifest_digest"] = {n: digest_status(p) for n, p in ctx["paths"].items()}
    for p in ctx["paths"].values():
        _normalise(Path(p))
    return ctx


def _normalise(path: Path) -> None:
    """Give the manifest fixed bytes for a seed (no time stamp, timings or temporary paths), so that a
    byte flip at an offset hits the same field when a failure is rerun."""
    from ..artifact.container import manifest_path

    if digest_status(path).startswith("not reproducible"):
        return
    mpath = manifest_path(path)
    original = json.loads(mpath.read_text())
    man = json.loads(json.dumps(original))
    man["created"] = "2000-01-01T00:00:00+00:00"
    if "source" in man:
        man["source"] = {"catalog": "fixture.parquet"}
    if isinstance(man.get("stats"), dict) and "build_seconds" in man["stats"]:
        man["stats"]["build_seconds"] = {k: 0.0 for k in man["stats"]["build_seconds"]}
    write_manifest(mpath.parent, man, original, True)


def fixed_logits(V_base: int, V: int):
    """Step log-probs that depend on (step, rows) only; a changed vocabulary is padded with -inf or cut."""

    def fn(t, prev, parents):
        x = np.random.default_rng(1000 + t).normal(size=(len(prev), V_base)).astype(np.float32)
        if V > V_base:
            x = np.concatenate([x, np.full((len(prev), V - V_base), -np.inf, np.float32)], axis=1)
        return x[:, :V]

    return fn


def index_answers(idx, ctx) -> dict:
    """Beam search (GTM on and off) with post-filter, ad_eligible and the root's mask, per fixture user."""
    from .. import Matcher, beam_search

    m = Matcher(idx)
    reqs = [idx.encode_request(u) for u in ctx["users"]]
    out = {}
    for gtm in (True, False):
        r = beam_search(m, reqs, fixed_logits(ctx["spec"]["sid"]["vocab"], idx.vocab_size), BEAMS, gtm=gtm)
        out[f"gtm{int(gtm)}"] = [r.sids, r.scores, r.leaf_nodes, [list(a) for a in r.ads]]
    ids = np.array(ctx["ad_ids"], np.int64)
    out["eligible"] = [idx.ad_eligible(ids, q) for q in reqs]
    out["mask"] = m.mask(np.zeros(len(reqs), np.int64), np.arange(len(reqs)), reqs)
    return out


def trie_answers(trie, ctx) -> dict:
    from .. import trie_beam_search

    tok, lp = ctx["proposals"]
    ids, scores = trie_beam_search(trie, tok, lp, 4)
    return {"search": [ids, scores], "lookup": trie.lookup_many(ctx["keys"]),
            "keys": [trie.key(i) for i in range(min(len(trie), 40))]}


def check_kernels(idx, reqs, rng) -> None:
    """Raise Wrong unless step (every internal node of each depth, GTM on and off) and the exact
    post-filter over every leaf equal the plain-Python references reading the same arrays."""
    from .. import Matcher

    m = Matcher(idx)
    B = len(reqs)
    for d in range(idx.sid_length):
        lo, hi = int(idx.level_offsets[d]), int(idx.level_offsets[d + 1])
        nodes = np.tile(np.arange(lo, min(hi, lo + 16), dtype=np.int64), B)
        rr = np.repeat(np.arange(B), len(nodes) // B)
        lp = np.round(rng.normal(size=(len(nodes), idx.vocab_size)), 1).astype(np.float32)
        bs = np.round(rng.normal(size=len(nodes)), 1).astype(np.float32)
        for gtm in (True, False):
            st = m.step(nodes, lp, bs, rr, reqs, 4, gtm=gtm, count_candidates=True)
            compare_step(st, readable(lambda: step_reference(idx, nodes, lp, bs, rr, reqs, 4, gtm)),
                         f"depth {d} gtm={gtm}")
    leaves = np.tile(np.arange(idx.first_leaf, idx.num_nodes, dtype=np.int64), (B, 1))
    got = m.postfilter(leaves, reqs)
    for b in range(B):
        same_ads(got[b], readable(lambda: postfilter_reference(idx, leaves[b], reqs[b])), f"post-filter request {b}")


def readable(ref):
    """ref() of an accepted artifact; the reference failing to read it means the artifact breaks an
    invariant the loader should have checked."""
    try:
        return ref()
    except (IndexError, ValueError, KeyError, TypeError, OverflowError) as exc:
        raise Wrong(f"accepted an artifact the reference cannot read ({type(exc).__name__}: {exc})") from None


def compare_step(st, ref, what: str) -> None:
    for b, (par, tok, kid, sc, n) in enumerate(ref):
        k = st.parent_rows.shape[1]
        want = [par + [-1] * (k - len(par)), tok + [-1] * (k - len(tok)), kid + [-1] * (k - len(kid)),
                np.array(sc + [-np.inf] * (k - len(sc)), np.float32)]
        got = [st.parent_rows[b].tolist(), st.tokens[b].tolist(), st.nodes[b].tolist(), st.scores[b]]
        for name, g, w in zip(("parent_rows", "tokens", "nodes", "scores"), got, want):
            if not np.array_equal(np.asarray(g), np.asarray(w)):
                raise Wrong(f"step {what} request {b}: {name} {list(np.asarray(g))} != reference {list(np.asarray(w))}")
        if st.num_candidates[b] not in (-1, n):
            raise Wrong(f"step {what} request {b}: {st.num_candidates[b]} candidates, reference {n}")


def postfilter_reference(idx, leaves, req) -> list:
    """(ad ids, sid ranks) of one request from Python reads of the arrays; leaves outside the leaf
    range are dead."""
    ads, ranks = [], []
    for rank, n in enumerate(leaves):
        if not idx.first_leaf <= n < idx.num_nodes:
            continue
        s = int(n) - idx.first_leaf
        for row in range(int(idx.sid_ad_offsets[s]), int(idx.sid_ad_offsets[s + 1])):
            allow = [idx.ad_allow[b][1][idx.ad_allow[b][0][row]:idx.ad_allow[b][0][row + 1]] for b in range(len(idx.bloom))]
            excl = [idx.ad_exclude[b][1][idx.ad_exclude[b][0][row]:idx.ad_exclude[b][0][row + 1]] for b in range(len(idx.bloom))]
            if ad_eligible_reference(idx.bitmask_table[idx.ad_bitmask_ids[row]], allow, excl, req):
                ads.append(int(idx.sid_ad_ids[row]))
                ranks.append(rank)
    order = sorted(range(len(ads)), key=lambda i: (ranks[i], ads[i]))
    return [[ads[i] for i in order], [ranks[i] for i in order]]


def same_ads(got, want, what: str) -> None:
    g = [np.asarray(got[0]).tolist(), np.asarray(got[1]).tolist()]
    if g != want:
        raise Wrong(f"{what}: ads {g[0][:8]} ranks {g[1][:8]} != reference {want[0][:8]} {want[1][:8]}")


def load_fixture(ctx, name: str, path=None):
    from .. import SuccinctTrie, load_index

    p = Path(path or ctx["paths"][name])
    return SuccinctTrie.load(p, verify=True) if name == "trie" else load_index(p, verify=True)
