"""Random small valid catalogs, schemas and users for the fuzz suite, and the check of a built index
against the plain-Python references (every eligible ad found, nothing else)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .gtm import catalog_rows, eligible
from .fuzz_core import Wrong

BITMASK_VALUES = {"country": ["US", "GB", "DE", "FR"], "age": ["18-24", "25-34", "35-44"], "gender": ["f", "m"]}
BLOOM_VALUES = {"location": ["US", "US:CA", "US:CA:SF", "GB", "GB:LDN", "DE:BE", "JP:13"], "topic": ["a", "b", "c"]}


def _pick(rng, values, p_none=0.3, k_max=2):
    """A targeting list: None / [] (untargeted) or 1..k_max distinct values."""
    if rng.random() < p_none:
        return None if rng.random() < 0.5 else []
    k = int(rng.integers(1, min(k_max, len(values)) + 1))
    return [str(x) for x in rng.choice(values, size=k, replace=False)]


def random_spec(rng, bloom_required: bool = False) -> dict:
    """A valid schema dict with 0-2 bitmask and 0-2 Bloom attributes (at least one of either)."""
    L, V = int(rng.integers(1, 4)), int(rng.integers(2, 9))
    d = {"ad_id": "ad_id", "sid": {"column": "sid", "length": L, "vocab": V}, "bitmask": {}, "bloom": {}}
    for name in rng.permutation(sorted(BITMASK_VALUES))[:int(rng.integers(0, 3))]:
        a = {"column": str(name), "domain": BITMASK_VALUES[name] if rng.random() < 0.6 else None}
        if rng.random() < 0.4:
            a["exclude_column"] = f"{name}_exclude"
        d["bitmask"][str(name)] = a
    n_bloom = int(rng.integers(1 if bloom_required or not d["bitmask"] else 0, 3))
    for name in rng.permutation(sorted(BLOOM_VALUES))[:n_bloom]:
        a = {"column": str(name), "bits": int(rng.choice([64, 128])), "hashes": int(rng.integers(1, 4)),
             "seed": int(rng.integers(0, 2**32))}
        if rng.random() < 0.4:
            a["exclude_column"] = f"{name}_exclude"
        d["bloom"][str(name)] = a
    return d


def random_table(rng, spec: dict, n_ads: int = None) -> pa.Table:
    """A catalog for spec: SIDs from a small pool (SIDs shared by ads), targeting from small domains."""
    L, V = spec["sid"]["length"], spec["sid"]["vocab"]
    n = n_ads or int(rng.integers(1, 40))
    pool = rng.integers(0, V, size=(max(1, n // 2), L))
    cols = {"ad_id": pa.array(rng.choice(10 * n + 10, size=n, replace=False).astype(np.int64) + 1,
                              pa.int64()),
            "sid": pa.array([[int(x) for x in pool[i]] for i in rng.integers(0, len(pool), size=n)],
                            pa.list_(pa.int32()))}
    for group, values in (("bitmask", BITMASK_VALUES), ("bloom", BLOOM_VALUES)):
        for name, a in spec[group].items():
            cols[a["column"]] = pa.array([_pick(rng, values[name]) for _ in range(n)], pa.list_(pa.string()))
            if a.get("exclude_column"):
                cols[a["exclude_column"]] = pa.array([_pick(rng, values[name], 0.8, 1) for _ in range(n)],
                                                     pa.list_(pa.string()))
    return pa.table(cols)


def random_user(rng, spec: dict) -> dict:
    """A request: per attribute a value, a list, nothing, or a value no ad mentions."""
    u = {}
    for group, values in (("bitmask", BITMASK_VALUES), ("bloom", BLOOM_VALUES)):
        for name in spec[group]:
            r = rng.random()
            if r < 0.15:
                continue
            pool = values[name] + ["ZZ"]
            vals = [str(x) for x in rng.choice(pool, size=int(rng.integers(1, 3)), replace=False)]
            u[name] = vals[0] if r < 0.5 else vals
    return u


def check_against_catalog(idx, table, schema, users, rng, exact_sids: bool = True) -> None:
    """Raise Wrong unless the index holds exactly the catalog's SIDs (exact_sids=False: at least them, as an
    updated index may keep SIDs whose ads moved away) and, per user, the exact post-filter
    over every leaf, ad_eligible, and a beam search wide enough to keep every SID (GTM on) all return
    exactly the reference's eligible ads."""
    from .. import Matcher, beam_search

    rows = catalog_rows(table, schema)
    leaves = np.arange(idx.first_leaf, idx.num_nodes, dtype=np.int64)
    sids = sorted(idx.leaf_sid(int(n)) for n in leaves)
    want_sids = sorted({r["sid"] for r in rows})
    if sids != want_sids if exact_sids else not set(want_sids) <= set(sids):
        raise Wrong(f"index SIDs {sids[:4]}... differ from the catalog's")
    m = Matcher(idx)
    reqs = [idx.encode_request(u) for u in users]
    ids = np.array([r["ad_id"] for r in rows], np.int64)
    wide = (1,) + (max(idx.num_sids, 1),) * (idx.sid_length - 1)
    V = idx.vocab_size

    def logits(t, prev, parents):
        return rng.normal(size=(len(prev), V)).astype(np.float32)

    found = beam_search(m, reqs, logits, wide).ads if idx.sid_length > 1 else None
    post = m.postfilter(np.tile(leaves, (len(users), 1)), reqs)
    for b, u in enumerate(users):
        want = sorted(r["ad_id"] for r in rows if eligible(r, u, schema))
        if sorted(post[b][0].tolist()) != want:
            raise Wrong(f"user {u}: post-filter over every SID gives {sorted(post[b][0].tolist())}, want {want}")
        got = ids[idx.ad_eligible(ids, reqs[b])]
        if sorted(got.tolist()) != want:
            raise Wrong(f"user {u}: ad_eligible gives {sorted(got.tolist())}, want {want}")
        if found is not None and sorted(found[b][0].tolist()) != want:
            raise Wrong(f"user {u}: wide beam search + GTM finds {sorted(found[b][0].tolist())}, want {want}")
