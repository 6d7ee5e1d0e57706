"""--staging on the command line: `gtmkit build`, `gtmkit trie build` and `gtmkit update --rebuild-shards` on
two local Dask worker processes keep the pieces between phases in a local folder or under an s3:// URL (a local
S3-API server, moto's), give what the single-process commands give, and leave nothing in the staging location."""

from __future__ import annotations

import itertools
import json
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

pytest.importorskip("distributed", reason="a Dask cluster needs distributed")

from gtmkit.cli import cli  # noqa: E402
from gtmkit.index import load_index  # noqa: E402
from gtmkit.trie.trie import SuccinctTrie  # noqa: E402

from support.catalogs import random_catalog, schema_dict, write  # noqa: E402

pytestmark = pytest.mark.slow  # each command starts its own worker processes

BUCKET = "gtmkit-staging"
V, L = 6, 3


@pytest.fixture(params=["folder", "s3"])
def staging(request, tmp_path, monkeypatch):
    """(the --staging argument, what is left under it: a list of paths)."""
    if request.param == "folder":
        where = tmp_path / "stage"
        where.mkdir()
        yield str(where), lambda: sorted(str(p) for p in where.rglob("*"))
        return
    pytest.importorskip("moto", reason="the local S3 server needs moto (pip install 'moto[server]')")
    import pyarrow.fs as pafs
    from support.s3 import s3_filesystem, s3_server
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the server's line per request
    with s3_server(BUCKET) as (endpoint, env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)  # the worker processes started by the commands inherit it
        fs = s3_filesystem(endpoint)

        def left():
            infos = fs.get_file_info(pafs.FileSelector(f"{BUCKET}/stage", recursive=True, allow_not_found=True))
            return sorted(i.path for i in infos if i.type == pafs.FileType.File)
        yield f"s3://{BUCKET}/stage", left


def _run(*args) -> dict:
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return json.loads(r.output) if "--json" in args else {}


def _checksums(path) -> dict:
    with load_index(path) as index:
        return {name: f["sha256"] for name, f in index.manifest["files"].items()}


def _changes(table) -> pa.Table:
    """Two ads moved to SIDs the catalog lacks (a shard rebuild's case)."""
    have = {tuple(s) for s in table.column("sid").to_pylist()}
    free = [list(s) for s in itertools.product(range(V), repeat=L) if s not in have]
    rows = table.slice(0, 2).to_pylist()
    for row, sid in zip(rows, free[:2]):
        row["sid"] = sid
    return pa.Table.from_pylist(rows, schema=table.schema)


def test_build_trie_build_and_rebuild_with_staging(staging, tmp_path):
    where, left = staging
    table = random_catalog(7, n_ads=120, L=L, V=V, n_sids=30)
    cat = write(tmp_path, table, schema_dict(L=L, V=V), "cat.parquet")
    keys = tmp_path / "keys.parquet"
    pq.write_table(pa.table({"key": pa.array([list(map(int, k)) for k in
                                              np.random.default_rng(3).integers(0, 30, (200, 3))],
                                             pa.list_(pa.int32()))}), keys)
    changes = tmp_path / "changes.parquet"
    pq.write_table(_changes(table), changes)
    dask = ["--workers", 2, "--staging", where]

    _run("build", cat, "-o", tmp_path / "one", "-s")
    got = _run("build", cat, "-o", tmp_path / "two", "--shards", 2, "--json", "-s", *dask)
    assert got["shards"] == 2 and _checksums(tmp_path / "one") == _checksums(tmp_path / "two")
    assert left() == []

    _run("trie", "build", keys, "-o", tmp_path / "t1")
    _run("trie", "build", keys, "-o", tmp_path / "t2", "--shards", 2, *dask)
    a, b = SuccinctTrie.load(tmp_path / "t1"), SuccinctTrie.load(tmp_path / "t2")
    for name, x in a.arrays._asdict().items():
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(np.asarray(getattr(b.arrays, name)), x, err_msg=name)
    assert left() == []

    _run("update", tmp_path / "one", changes, "--rebuild-shards", "--json")
    rep = _run("update", tmp_path / "two", changes, "--rebuild-shards", "--json", *dask)
    assert rep["rebuilt"]["workers"] == 2 and _checksums(tmp_path / "one") == _checksums(tmp_path / "two")
    assert left() == []
