"""Zero-row Parquet parts (Spark and Dask write them) add nothing in any reader: the single-process and the sharded
build, `gtmkit build`, `update` with a changes folder, `verify --catalog` and the trie's key readers give what the
same folder without them gives, array for array; a folder of only empty parts is one line (no rows, no keys) or, as
update changes, an empty change set."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli
from gtmkit.errors import CatalogError, GtmkitError
from gtmkit.inputs.schema import parse_schema
from gtmkit.trie.trie import SuccinctTrie
from gtmkit.testing.gtm import catalog_rows

from support.catalogs import random_catalog, schema_dict
from support.pause_cases import changes_for

# slots of a folder of three data parts (slots 1, 3, 5) where zero-row parts go
EMPTY_AT = {"first": (0,), "middle": (2,), "last": (6,), "everywhere": (0, 2, 4, 6)}


def _sums(manifest) -> dict:
    return {name: f["sha256"] for name, f in manifest["files"].items()}


def _parts(root, table, empty_at=(), cuts=(0.4, 0.7)):
    """table as three parts in root, with zero-row parts (the table's schema, as Spark and Dask write them) in the
    slots empty_at of the four around and between them (EMPTY_AT)."""
    root.mkdir()
    n = table.num_rows
    b = [0, *(int(c * n) for c in cuts), n]
    slots = {2 * i + 1: table.slice(x, y - x) for i, (x, y) in enumerate(zip(b, b[1:]))}
    slots.update((s, table.slice(0, 0)) for s in empty_at)
    for k, s in enumerate(sorted(slots)):
        pq.write_table(slots[s], root / f"part-{k:03d}.parquet")
    return root


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("empty-parts")
    sd = schema_dict(L=3, V=6)
    (tmp / "schema.json").write_text(json.dumps(sd))
    table = random_catalog(11, n_ads=160, L=3, V=6, n_sids=60)
    plain = _parts(tmp / "plain", table)
    ref = gtmkit.build_index(plain, tmp / "ref", schema=tmp / "schema.json")
    return tmp, table, sd, plain, _sums(ref.manifest)


@pytest.mark.parametrize("where", list(EMPTY_AT))
def test_build_single_and_sharded_ignore_empty_parts(catalog, tmp_path, where):
    tmp, table, _, _, ref = catalog
    cat = _parts(tmp_path / "cat", table, EMPTY_AT[where])
    assert _sums(gtmkit.build_index(cat, tmp_path / "single", schema=tmp / "schema.json").manifest) == ref
    assert _sums(gtmkit.build_index(cat, tmp_path / "sharded", schema=tmp / "schema.json", shards=2).manifest) == ref
    r = _cli("build", cat, "-o", tmp_path / "cli", "--schema", tmp / "schema.json", "-s")
    assert r.exit_code == 0, r.output
    assert _sums(gtmkit.load_index(tmp_path / "cli").manifest) == ref


def test_verify_catalog_reads_a_folder_with_empty_parts(catalog, tmp_path):
    tmp, table, _, plain, _ = catalog
    cat = _parts(tmp_path / "cat", table, EMPTY_AT["everywhere"])
    gtmkit.build_index(plain, tmp_path / "idx", schema=tmp / "schema.json")
    r = _cli("verify", tmp_path / "idx", "--catalog", cat, "-s")
    assert r.exit_code == 0 and r.output.startswith("OK"), r.output


def test_a_catalog_of_only_empty_parts_is_one_line(catalog, tmp_path):
    tmp, table, *_ = catalog
    cat = tmp_path / "cat"
    cat.mkdir()
    for k in range(3):
        pq.write_table(table.slice(0, 0), cat / f"part-{k}.parquet")
    for kw in ({}, {"shards": 2}):
        with pytest.raises(CatalogError, match="no rows"):
            gtmkit.build_index(cat, tmp_path / "idx", schema=tmp / "schema.json", **kw)
    r = _cli("build", cat, "-o", tmp_path / "idx", "--schema", tmp / "schema.json", "-s")
    assert r.exit_code == 1 and "no rows" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("rebuild", [False, True], ids=["in-place", "rebuild-shards"])
def test_update_reads_a_changes_folder_with_empty_parts(catalog, tmp_path, rebuild):
    tmp, table, sd, plain, _ = catalog
    changes, _, _ = changes_for(catalog_rows(table, parse_schema(sd)), parse_schema(sd), 4, 6, 6, 4 if rebuild else 0,
                                L=3, V=6)
    pq.write_table(changes, tmp_path / "changes.parquet")
    folder = _parts(tmp_path / "changes", changes, EMPTY_AT["everywhere"])
    sums = []
    for name, src in (("file", tmp_path / "changes.parquet"), ("folder", folder)):
        gtmkit.build_index(plain, tmp_path / name, schema=tmp / "schema.json")
        r = _cli("update", tmp_path / name, src, "--json", *(["--rebuild-shards"] if rebuild else []))
        assert r.exit_code == 0, r.output
        rep = json.loads(r.stdout)
        assert rep["written"] and bool(rep.get("rebuilt")) == rebuild
        sums.append(_sums(gtmkit.load_index(tmp_path / name).manifest))
    assert sums[0] == sums[1]


def test_update_with_only_empty_parts_is_an_empty_change_set(catalog, tmp_path):
    tmp, table, _, plain, _ = catalog
    folder = tmp_path / "changes"
    folder.mkdir()
    for k in range(2):
        pq.write_table(table.slice(0, 0), folder / f"part-{k}.parquet")
    gtmkit.build_index(plain, tmp_path / "idx", schema=tmp / "schema.json")
    version = gtmkit.load_index(tmp_path / "idx").version
    r = _cli("update", tmp_path / "idx", folder, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["written"] is False and gtmkit.load_index(tmp_path / "idx").version == version


def _keys(n=300, seed=3):
    rng = np.random.default_rng(seed)
    return pa.table({"key": pa.array([list(map(int, rng.integers(0, 9, int(rng.integers(1, 5))))) for _ in range(n)],
                                     pa.list_(pa.int64()))})


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_trie_key_readers_ignore_empty_parts(tmp_path, where):
    keys = _keys()
    ref = SuccinctTrie.build(keys.column("key"))
    ref.save(tmp_path / "ref")
    want = _sums(SuccinctTrie.load(tmp_path / "ref")._artifact.manifest)
    folder = _parts(tmp_path / "keys", keys, EMPTY_AT[where])
    for name, extra in (("single", []), ("sharded", ["--shards", "2"])):
        r = _cli("trie", "build", folder, "-o", tmp_path / name, "-s", *extra)
        assert r.exit_code == 0, r.output
        assert _sums(SuccinctTrie.load(tmp_path / name)._artifact.manifest) == want, name


def test_only_empty_key_parts_say_no_keys_alike(tmp_path):
    folder = tmp_path / "keys"
    folder.mkdir()
    for k in range(2):
        pq.write_table(_keys().slice(0, 0), folder / f"part-{k}.parquet")
    lines = []
    for extra in ([], ["--shards", "2"]):
        r = _cli("trie", "build", folder, "-o", tmp_path / "t", "-s", *extra)
        assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1, r.output
        lines.append(r.output.strip())
    assert lines[0] == lines[1] and "no keys" in lines[0]
    with pytest.raises(GtmkitError, match="no keys"):
        SuccinctTrie.build_dataset(folder, tmp_path / "t", shards=2)
    assert not (tmp_path / "t").exists()


@pytest.mark.slow  # starts a LocalCluster of two worker processes, twice
def test_workers_builds_ignore_empty_parts(catalog, tmp_path):
    pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    tmp, table, _, _, ref = catalog
    cat = _parts(tmp_path / "cat", table, EMPTY_AT["everywhere"])
    r = _cli("build", cat, "-o", tmp_path / "idx", "--schema", tmp / "schema.json", "--workers", "2", "-s")
    assert r.exit_code == 0, r.output
    assert _sums(gtmkit.load_index(tmp_path / "idx").manifest) == ref
    keys = _keys()
    SuccinctTrie.build(keys.column("key")).save(tmp_path / "ref")
    folder = _parts(tmp_path / "keys", keys, EMPTY_AT["everywhere"])
    r = _cli("trie", "build", folder, "-o", tmp_path / "trie", "--workers", "2", "-s")
    assert r.exit_code == 0, r.output
    assert _sums(SuccinctTrie.load(tmp_path / "trie")._artifact.manifest) == \
        _sums(SuccinctTrie.load(tmp_path / "ref")._artifact.manifest)
