"""Artifacts are a function of the catalog's content: the same rows in any order, split into any number of Parquet
files (row groups, dictionary pages or none), give byte-identical members, in the single-process and the sharded
build. Only what is not content may differ: the manifest's creation time, its source path and its build record."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings, strategies as st

import gtmkit
from gtmkit.artifact import index_format as fmt

from support.catalogs import LOCATIONS, random_catalog, schema_dict

MODES = [("none", {}), ("static", {"k": [2, 3, 2]}), ("dynamic", {"target_fill": 0.3, "k_max": 4})]
# strings whose UTF-8 byte order and first appearance differ: upper and lower case, accents, other scripts
# and characters beyond the Basic Multilingual Plane (four UTF-8 bytes)
STRINGS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=4)


def _checksums(index) -> dict:
    return {name: f["sha256"] for name, f in index.manifest["files"].items()}


def _content(index) -> dict:
    """The manifest without what is not the catalog's content (created, source, build, the build's seconds)."""
    m = {k: v for k, v in index.manifest.items()
         if k not in ("created", "source", "build", "manifest_sha256", "gtmkit_version")}
    m["stats"] = {k: v for k, v in m["stats"].items() if k not in ("build_seconds", "shards")}
    return m


def _with_strings(table: pa.Table, seed: int, extra: list) -> pa.Table:
    """The Bloom columns redrawn from LOCATIONS plus `extra`, repeats within a list allowed."""
    rng = np.random.default_rng(seed)
    pool = LOCATIONS + extra
    n = table.num_rows

    def lists(p_empty, max_k):
        return [None if rng.random() < p_empty / 2 else [] if rng.random() < p_empty
                else [pool[i] for i in rng.integers(0, len(pool), int(rng.integers(1, max_k + 1)))]
                for _ in range(n)]
    table = table.set_column(table.schema.get_field_index("location"), "location",
                             pa.array(lists(0.4, 4), pa.list_(pa.string())))
    return table.set_column(table.schema.get_field_index("location_exclude"), "location_exclude",
                            pa.array(lists(0.8, 2), pa.list_(pa.string())))


def _write_split(root, table: pa.Table, seed: int, n_files: int) -> None:
    """The rows shuffled, cut into n_files files (an empty one among them at times), each with its own row groups
    and with or without dictionary pages."""
    rng = np.random.default_rng(seed)
    root.mkdir()
    order = rng.permutation(table.num_rows)
    cuts = np.sort(rng.integers(0, table.num_rows + 1, n_files - 1))
    for i, part in enumerate(np.split(order, cuts)):
        pq.write_table(table.take(pa.array(part, pa.int64())), root / f"part-{i:03d}.parquet",
                       row_group_size=int(rng.integers(1, 40)), use_dictionary=bool(rng.random() < 0.7))


def _catalog(tmp, seed: int, n_ads: int, domain: bool, extra: list):
    table = _with_strings(random_catalog(seed, n_ads=n_ads, V=6), seed, extra)
    path = tmp / "catalog.parquet"
    pq.write_table(table, path)
    (tmp / "catalog.schema.json").write_text(json.dumps(schema_dict(V=6, domain=domain)))
    return table, path


def _split(tmp, table, name: str, seed: int, n_files: int, domain: bool):
    root = tmp / name
    _write_split(root, table, seed, n_files)
    (tmp / f"{name}.schema.json").write_text(json.dumps(schema_dict(V=6, domain=domain)))
    return root


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n_ads=st.integers(1, 90), domain=st.booleans(),
       extra=st.lists(STRINGS, max_size=6), splits=st.lists(st.integers(1, 6), min_size=1, max_size=2),
       mode=st.sampled_from(MODES))
def test_any_order_and_split_of_the_rows_gives_the_same_artifact(tmp_path_factory, seed, n_ads, domain, extra,
                                                                 splits, mode):
    tmp = tmp_path_factory.mktemp("content")
    table, path = _catalog(tmp, seed, n_ads, domain, extra)
    partition, kw = mode
    one = gtmkit.build_index(path, tmp / "one", partition=partition, **kw)
    assert one.manifest["format_version"] == fmt.FORMAT_VERSION == 3
    for k, n_files in enumerate(splits):
        cat = _split(tmp, table, f"split{k}", seed + 1 + k, n_files, domain)
        got = gtmkit.build_index(cat, tmp / f"idx{k}", partition=partition, **kw)
        assert _checksums(got) == _checksums(one), n_files
        assert _content(got) == _content(one)
        assert got.fingerprint == one.fingerprint
    strings = pq.read_table(one.artifact.dir / "bloom_dict_b0.parquet").column("value").to_pylist()
    assert strings == sorted(strings, key=lambda s: s.encode("utf-8"))  # UTF-8 byte order


def test_sharded_builds_of_shuffled_splits_equal_the_single_file_build(tmp_path):
    """One bounded case for the sharded build (in this process): three shuffles cut into 1, 4 and 6 files, 2 and
    5 shards, every layout, against the single-process build of the catalog as one file."""
    table, path = _catalog(tmp_path, 11, 200, False, ["é", "Z", "a", "\U0001F600", "ÿ", "Ā"])
    cats = [_split(tmp_path, table, f"split{n}", 20 + n, n, False) for n in (1, 4, 6)]
    for partition, kw in MODES:
        one = gtmkit.build_index(path, tmp_path / f"one-{partition}", partition=partition, **kw)
        for cat in cats:
            for shards in (2, 5):
                got = gtmkit.build_index(cat, tmp_path / f"{cat.name}-{partition}-{shards}", partition=partition,
                                         shards=shards, **kw)
                assert _checksums(got) == _checksums(one), (cat.name, partition, shards)
                assert _content(got) == _content(one)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n_keys=st.integers(1, 200), n_files=st.integers(1, 6),
       shards=st.sampled_from([1, 3]))
def test_trie_of_shuffled_key_files_equals_the_trie_of_the_keys(tmp_path_factory, seed, n_keys, n_files, shards):
    """The succinct trie numbers its keys in sorted order already: key files in any order and split give it too."""
    tmp = tmp_path_factory.mktemp("trie")
    rng = np.random.default_rng(seed)
    keys = [list(map(int, rng.integers(0, 9, int(rng.integers(1, 5))))) for _ in range(n_keys)]
    want = gtmkit.SuccinctTrie.build(keys)
    want.save(tmp / "want")
    _write_split(tmp / "keys", pa.table({"key": pa.array(keys, pa.list_(pa.int64()))}), seed, n_files)
    got = gtmkit.SuccinctTrie.build_dataset(tmp / "keys", tmp / "got", shards=shards)
    wanted = gtmkit.SuccinctTrie.load(tmp / "want")
    assert _checksums(got._artifact) == _checksums(wanted._artifact)
