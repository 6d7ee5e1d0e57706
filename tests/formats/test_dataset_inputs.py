"""Catalogs and trie keys as datasets: a Parquet file, a directory of Parquet files (hive partitions too, with the
files Spark and Dask leave beside the data) and a glob give the same artifact when they hold the same rows in the
same order; a problem names the file it is in and the row there; inputs that name no data are refused in one
line."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gtmkit
from gtmkit.errors import CatalogError, GtmkitError, SchemaError

from support.catalogs import random_catalog, schema_dict

N = 90


def _checksums(index) -> dict:
    return {name: f["sha256"] for name, f in index.manifest["files"].items()}


def _split(table: pa.Table, cuts) -> list:
    bounds = [0, *sorted(set(cuts)), table.num_rows]
    return [table.slice(a, b - a) for a, b in zip(bounds, bounds[1:]) if b > a]


def _write_parts(root, parts, hive: bool):
    """Parts in path order: part-000.parquet ... or shard=000/part.parquet ... plus _SUCCESS and .crc files."""
    root.mkdir(parents=True)
    for i, t in enumerate(parts):
        if hive:
            (root / f"shard={i:03d}").mkdir()
            pq.write_table(t, root / f"shard={i:03d}" / "part.parquet")
        else:
            pq.write_table(t, root / f"part-{i:03d}.parquet")
    (root / "_SUCCESS").write_text("")
    (root / ".part-000.parquet.crc").write_bytes(b"\x00\x01")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, N - 1), max_size=4), hive=st.booleans(),
       mode=st.sampled_from([("none", {}), ("static", {"k": [2, 3, 2]}), ("dynamic", {"target_fill": 0.3, "k_max": 4})]))
def test_file_folder_and_glob_build_the_same_index(tmp_path_factory, cuts, hive, mode):
    tmp = tmp_path_factory.mktemp("ds")
    table = random_catalog(11, n_ads=N)
    schema = tmp / "cat.schema.json"
    schema.write_text(json.dumps(schema_dict()))
    pq.write_table(table, tmp / "cat.parquet")
    _write_parts(tmp / "cat", _split(table, cuts), hive)
    partition, kw = mode
    want = _checksums(gtmkit.build_index(tmp / "cat.parquet", tmp / "i-file", partition=partition, **kw))
    got_dir = _checksums(gtmkit.build_index(tmp / "cat", tmp / "i-dir", partition=partition, **kw))  # schema beside
    pattern = str(tmp / "cat" / ("shard=*" if hive else "") / "*.parquet").replace(os.sep + os.sep, os.sep)
    got_glob = _checksums(gtmkit.build_index(pattern, tmp / "i-glob", schema=schema, partition=partition, **kw))
    assert got_dir == want and got_glob == want


def test_problem_names_the_file_and_its_row(tmp_path):
    table = random_catalog(3, n_ads=N)
    sids = table.column("sid").to_pylist()
    sids[50] = [1, 2]  # row 50 of the whole input: row 20 of the second file
    table = table.set_column(table.schema.get_field_index("sid"), "sid", pa.array(sids, pa.list_(pa.int32())))
    _write_parts(tmp_path / "cat", [table.slice(0, 30), table.slice(30)], hive=False)
    with pytest.raises(CatalogError) as e:
        gtmkit.build_index(tmp_path / "cat", tmp_path / "idx", schema=schema_dict())
    assert str(tmp_path / "cat" / "part-001.parquet") in str(e.value) and "row 20: SID has 2 tokens" in str(e.value)


def test_duplicate_ad_id_across_files_names_both(tmp_path):
    table = random_catalog(4, n_ads=N)
    ids = table.column("ad_id").to_pylist()
    ids[70] = ids[5]
    table = table.set_column(table.schema.get_field_index("ad_id"), "ad_id", pa.array(ids, pa.int64()))
    _write_parts(tmp_path / "cat", [table.slice(0, 40), table.slice(40)], hive=False)
    with pytest.raises(CatalogError) as e:
        gtmkit.build_index(tmp_path / "cat", tmp_path / "idx", schema=schema_dict())
    msg = str(e.value)
    assert "part-001.parquet: column 'ad_id', row 30: duplicate ad_id" in msg
    assert "part-000.parquet row 5" in msg


def test_inputs_without_data_are_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "only_markers").mkdir()
    (tmp_path / "only_markers" / "_SUCCESS").write_text("")
    for path, text in ((tmp_path / "empty", "a directory without Parquet files"),
                       (tmp_path / "only_markers", "a directory without Parquet files"),
                       (str(tmp_path / "nothing-*.parquet"), "no file matches")):
        with pytest.raises(CatalogError, match=text):
            gtmkit.build_index(path, tmp_path / "idx", schema=schema_dict())
    pq.write_table(random_catalog(1, n_ads=10), tmp_path / "a.parquet")
    with pytest.raises(SchemaError, match="a schema is needed for the files a glob names"):
        gtmkit.build_index(str(tmp_path / "*.parquet"), tmp_path / "idx")
    os.mkfifo(tmp_path / "empty" / "part.parquet")
    with pytest.raises(CatalogError, match="not a regular file"):
        gtmkit.build_index(tmp_path / "empty", tmp_path / "idx", schema=schema_dict())
    assert not (tmp_path / "idx").exists()


def test_trie_keys_from_file_folder_and_glob(tmp_path):
    from click.testing import CliRunner

    from gtmkit.cli import cli
    rng = np.random.default_rng(5)
    keys = [rng.integers(0, 50, int(rng.integers(1, 6))).tolist() for _ in range(300)]
    table = pa.table({"key": pa.array(keys, pa.list_(pa.int64()))})
    pq.write_table(table, tmp_path / "keys.parquet")
    _write_parts(tmp_path / "keys", _split(table, [70, 200]), hive=True)
    runner = CliRunner()
    for src, out in ((tmp_path / "keys.parquet", "t-file"), (tmp_path / "keys", "t-dir"),
                     (str(tmp_path / "keys" / "shard=*" / "*.parquet"), "t-glob")):
        r = runner.invoke(cli, ["trie", "build", str(src), "-o", str(tmp_path / out), "-s", "--json"])
        assert r.exit_code == 0, r.output
    tries = [gtmkit.SuccinctTrie.load(tmp_path / n) for n in ("t-file", "t-dir", "t-glob")]
    for t in tries[1:]:
        assert [t.key(i) for i in range(t.stats()["keys"])] == [tries[0].key(i) for i in range(tries[0].stats()["keys"])]
    bad = table.to_pylist()
    bad[150] = {"key": []}  # row 150: row 80 of the second file
    _write_parts(tmp_path / "bad", _split(pa.Table.from_pylist(bad, table.schema), [70]), hive=False)
    r = runner.invoke(cli, ["trie", "build", str(tmp_path / "bad"), "-o", str(tmp_path / "t-bad"), "-s"])
    assert r.exit_code == 1 and "part-001.parquet: column 'key': row 80" in r.output, r.output


def test_verify_checks_an_index_against_a_folder_catalog(tmp_path):
    from click.testing import CliRunner

    from gtmkit.cli import cli
    table = random_catalog(6, n_ads=N)
    _write_parts(tmp_path / "cat", _split(table, [25, 60]), hive=False)
    (tmp_path / "cat.schema.json").write_text(json.dumps(schema_dict()))
    gtmkit.build_index(tmp_path / "cat", tmp_path / "idx").close()
    r = CliRunner().invoke(cli, ["verify", str(tmp_path / "idx"), "--catalog", str(tmp_path / "cat"), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["ok"], r.output
    pq.write_table(table.slice(0, 60), tmp_path / "cat" / "part-001.parquet")  # a different catalog now
    r = CliRunner().invoke(cli, ["verify", str(tmp_path / "idx"), "--catalog", str(tmp_path / "cat"), "--json"])
    assert r.exit_code != 0, r.output
