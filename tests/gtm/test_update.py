"""Matcher.update_ads against brute force over the updated catalog, with no, one and two Bloom attributes and
every partition mode: the post-filter returns exactly the eligible ads, every prefix of an eligible ad passes GTM;
strings the index never met are matched exactly after the update; bad changes are refused whole."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import gtmkit
from gtmkit.errors import CatalogError, GtmkitError
from gtmkit.inputs.schema import parse_schema
from gtmkit.matcher.matcher import Matcher
from gtmkit.testing.gtm import catalog_rows

from support.catalogs import LOCATIONS, random_catalog, random_user, schema_dict, write
from support.indexes import MODES
from support.exact import serves_exactly
from support.pause_cases import changes_for


def _with_blooms(table, nb: int, seed: int):
    """The random catalog and schema with nb Bloom attributes: none, location, or location and a second one."""
    sd = schema_dict(L=3, V=5)
    if nb == 0:
        del sd["bloom"]
        return table.drop_columns(["location", "location_exclude"]), sd
    if nb == 2:
        rng = np.random.default_rng(seed)
        sd["bloom"]["region"] = {"column": "region", "bits": 128, "hashes": 3, "seed": 3}
        vals = [None if rng.random() < 0.3 else list(rng.choice(LOCATIONS, 2, replace=False))
                for _ in range(table.num_rows)]
        table = table.append_column("region", pa.array(vals, pa.list_(pa.string())))
    return table, sd


def _check(m, rows, schema, rng, extra_users=()):
    names = {a.name for a in (*schema.bitmask, *schema.bloom)}
    users = [{k: v for k, v in random_user(rng).items() if k in names} for _ in range(4)] + list(extra_users)
    for u in users:
        if "region" in [a.name for a in schema.bloom] and rng.random() < 0.7:
            u["region"] = [str(rng.choice(LOCATIONS + ["IT:RM"]))]
    serves_exactly(m, rows, schema, users)


@pytest.mark.parametrize("nb", [0, 1, 2])
@pytest.mark.parametrize("mode,kw", MODES)
def test_updates_equal_brute_force(tmp_path, nb, mode, kw):
    table, sd = _with_blooms(random_catalog(21, n_ads=90, L=3, V=5, n_sids=30), nb, 1)
    schema = parse_schema(sd)
    idx = gtmkit.build_index(write(tmp_path, table, sd), tmp_path / "idx", partition=mode, **kw)
    m = Matcher(idx)
    rows = catalog_rows(table, schema)
    rng = np.random.default_rng(5)
    for step in range(3):  # updates of updates
        changes, rows, left_out = changes_for(rows, schema, 30 + step, 8, 8, 2, L=3, V=5,
                                              extend=lambda t: _with_blooms(t, nb, 40 + step)[0])
        rep = m.update_ads(changes)
        assert sorted(rep.new_sids) == sorted(left_out) and m.version.endswith(f"+{step + 1}")
        _check(m, rows, schema, rng)


def test_new_strings_are_matched_exactly_after_an_update(tmp_path):
    table = random_catalog(22, n_ads=60, L=3, V=5, n_sids=20)
    sd = schema_dict(L=3, V=5)
    schema = parse_schema(sd)
    idx = gtmkit.build_index(write(tmp_path, table, sd), tmp_path / "idx")
    m = Matcher(idx)
    changes = table.slice(0, 3).to_pydict()
    for name in ("country", "age", "gender"):  # untargeted: a user with only a location meets them
        changes[name] = [None] * 3
    changes["country_exclude"] = [[]] * 3
    changes["location"] = [["IT:RM"], ["IT:RM", "US"], ["FR:PAR"]]
    changes["location_exclude"] = [[], ["IT:MI"], []]
    changes = pa.table(changes, schema=table.schema)
    m.update_ads(changes)
    rows = [ad for ad in catalog_rows(table, schema) if ad["ad_id"] not in set(changes.column("ad_id").to_pylist())]
    rows += catalog_rows(changes, schema)
    users = [{"location": ["IT:RM"]}, {"location": ["FR:PAR", "GB"]}, {"location": ["IT:MI", "IT:RM"]}]
    _check(m, rows, schema, np.random.default_rng(1), users)
    got = {int(a) for ads, _ in m.postfilter(np.tile(np.arange(m.index.first_leaf, m.index.num_nodes), (1, 1)),
                                             [m.index.encode_request({"location": ["IT:RM"]})]) for a in ads}
    assert set(changes.column("ad_id").to_pylist()[:2]) <= got  # both allow IT:RM (the second excludes IT:MI)


def test_bad_changes_are_refused_whole(tmp_path):
    table = random_catalog(23, n_ads=40, L=3, V=5, n_sids=15)
    sd = schema_dict(L=3, V=5)
    idx = gtmkit.build_index(write(tmp_path, table, sd), tmp_path / "idx")
    m = Matcher(idx)
    version = m.version
    dup = pa.concat_tables([table.slice(0, 2), table.slice(0, 1)])
    wrong_v = table.slice(0, 1).to_pydict()
    wrong_v["sid"] = [[0, 9, 0]]  # a token outside the vocabulary
    for bad, what in ((dup, "ad_id"), (pa.table(wrong_v, schema=table.schema), "sid"),
                      (table.drop_columns(["age"]), "age"), ("no/such/file.parquet", "no/such")):
        with pytest.raises(GtmkitError, match=what) as e:
            m.update_ads(bad)
        assert "\n" not in str(e.value) and isinstance(e.value, (CatalogError, GtmkitError))
    assert m.version == version
