"""Small random catalogs for tests: tiny domains so that every targeting corner case shows up."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

COUNTRIES = ["US", "GB", "DE", "FR", "JP"]
AGES = ["18-24", "25-34", "35-44"]
GENDERS = ["f", "m"]
LOCATIONS = ["US", "US:CA", "US:CA:SF", "US:NY", "GB", "GB:LDN", "DE", "DE:BE", "FR", "JP:13"]


def schema_dict(L=3, V=6, bits=64, hashes=2, partition=None, domain=True):
    d = {"ad_id": "ad_id", "sid": {"column": "sid", "length": L, "vocab": V},
         "bitmask": {"country": {"column": "country", "exclude_column": "country_exclude",
                                 "domain": COUNTRIES if domain else None},
                     "age": {"domain": AGES if domain else None},
                     "gender": {"domain": GENDERS if domain else None}},
         "bloom": {"location": {"column": "location", "exclude_column": "location_exclude",
                                "bits": bits, "hashes": hashes, "seed": 7}}}
    if partition:
        d["partition"] = partition
    return d


def _subset(rng, values, p_untargeted, max_k):
    if rng.random() < p_untargeted:
        return [] if rng.random() < 0.5 else None
    k = int(rng.integers(1, max_k + 1))
    return list(rng.choice(values, size=min(k, len(values)), replace=False))


def random_catalog(seed=0, n_ads=60, L=3, V=6, n_sids=None):
    """A pyarrow table: SIDs drawn from a small pool (so SIDs hold several ads), random targeting."""
    rng = np.random.default_rng(seed)
    n_sids = n_sids or max(1, n_ads // 2)
    pool = rng.integers(0, V, size=(n_sids, L))
    sids = pool[rng.integers(0, n_sids, size=n_ads)]
    ad_ids = rng.permutation(10 * n_ads)[:n_ads].astype(np.int64) + 1000
    cols = {"ad_id": ad_ids, "sid": [list(map(int, s)) for s in sids]}
    cols["country"] = [_subset(rng, COUNTRIES, 0.3, 2) for _ in range(n_ads)]
    cols["country_exclude"] = [(_subset(rng, COUNTRIES, 0.0, 1) if rng.random() < 0.2 else []) for _ in range(n_ads)]
    cols["age"] = [_subset(rng, AGES, 0.4, 2) for _ in range(n_ads)]
    cols["gender"] = [_subset(rng, GENDERS, 0.5, 1) for _ in range(n_ads)]
    cols["location"] = [_subset(rng, LOCATIONS, 0.4, 3) for _ in range(n_ads)]
    cols["location_exclude"] = [(_subset(rng, LOCATIONS, 0.0, 1) if rng.random() < 0.2 else []) for _ in range(n_ads)]
    return pa.table({
        "ad_id": pa.array(cols["ad_id"], pa.int64()),
        "sid": pa.array(cols["sid"], pa.list_(pa.int32())),
        **{k: pa.array(v, pa.list_(pa.string())) for k, v in cols.items() if k not in ("ad_id", "sid")},
    })


def random_user(rng):
    u = {}
    if rng.random() < 0.9:
        u["country"] = str(rng.choice(COUNTRIES + ["BR"]))
    if rng.random() < 0.8:
        u["age"] = [str(x) for x in rng.choice(AGES, size=int(rng.integers(1, 3)), replace=False)]
    if rng.random() < 0.7:
        u["gender"] = str(rng.choice(GENDERS))
    if rng.random() < 0.85:
        u["location"] = [str(x) for x in rng.choice(LOCATIONS + ["XX:1"], size=int(rng.integers(1, 4)), replace=False)]
    return u


def write(tmp_path, table, schema, name="catalog.parquet"):
    import json
    path = tmp_path / name
    pq.write_table(table, path)
    (tmp_path / name.replace(".parquet", ".schema.json")).write_text(json.dumps(schema))
    return path
