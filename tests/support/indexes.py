"""Small random indexes in every partition mode, built from tests/support/catalogs.py catalogs."""

from __future__ import annotations

import gtmkit
from gtmkit.inputs.schema import parse_schema

from support.catalogs import random_catalog, schema_dict, write

MODES = [
    ("none", {}),
    ("static", {"k": [2, 3, 2]}),
    ("dynamic", {"target_fill": 0.3, "k_max": 4}),
]


def _build(tmp_path, seed, mode, kw, n_ads=60, L=3, V=6, domain=True, name="idx"):
    table = random_catalog(seed, n_ads=n_ads, L=L, V=V)
    sd = schema_dict(L=L, V=V, domain=domain)
    path = write(tmp_path, table, sd, f"cat{seed}.parquet")
    idx = gtmkit.build_index(path, tmp_path / f"{name}-{seed}-{mode}", partition=mode, **kw)
    return idx, table, parse_schema(sd)
