"""Catalogs, trie keys and schemas under URLs: a local S3-API server (tests/support/s3.py) holds a catalog as a
folder of parts, a hive-partitioned folder and a glob; builds from the s3:// URLs give the local build's arrays,
member for member; the store is configured by the AWS_* environment only (AWS_ENDPOINT_URL included); every
problem (no such bucket or key, a glob matching nothing, access denied, an unreachable endpoint, an object that is
no Parquet file) is one line naming the URL."""

from __future__ import annotations

import json
import socket

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli
from gtmkit.errors import GtmkitError
from gtmkit.trie.trie import SuccinctTrie

from support.catalogs import random_catalog, schema_dict

BUCKET = "gtmkit-test"
N = 90


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(endpoint, environment, local folder): the catalog, its parts and keys written locally and uploaded."""
    pytest.importorskip("moto", reason="the local S3 server needs moto (pip install 'moto[server]')")
    from support.s3 import s3_filesystem, s3_server
    local = tmp_path_factory.mktemp("local")
    table = random_catalog(11, n_ads=N)
    keys = pa.table({"key": pa.array([list(map(int, k)) for k in np.random.default_rng(3).integers(0, 50, (400, 4))],
                                     pa.list_(pa.int32()))})
    with s3_server(BUCKET) as (endpoint, env):
        fs = s3_filesystem(endpoint)
        pq.write_table(table, local / "cat.parquet")
        (local / "cat.schema.json").write_text(json.dumps(schema_dict()))
        pq.write_table(keys, local / "keys.parquet")
        put = lambda name, data: _put(fs, f"{BUCKET}/{name}", data)  # noqa: E731
        for i, (a, b) in enumerate([(0, 25), (25, 60), (60, N)]):
            part = _parquet(table.slice(a, b - a))
            put(f"cat/part-{i:03d}.parquet", part)
            put(f"hive/shard={i:03d}/part.parquet", part)
        put("cat/_SUCCESS", b"")
        put("cat/.part-000.parquet.crc", b"\x00\x01")
        put("cat.schema.json", json.dumps(schema_dict()).encode())
        put("keys/part-0.parquet", _parquet(keys.slice(0, 150)))
        put("keys/part-1.parquet", _parquet(keys.slice(150)))
        put("changes.parquet", _parquet(table.slice(5, 7)))
        pq.write_table(table.slice(5, 7), local / "changes.parquet")
        sids = table.column("sid").to_pylist()[60:]
        sids[7] = [0, 99, 0]  # a token outside the vocabulary: row 7 of the third part
        put("badrow/part-0.parquet", _parquet(table.slice(0, 60)))
        put("badrow/part-1.parquet", _parquet(table.slice(60).set_column(1, "sid", pa.array(sids, pa.list_(pa.int32())))))
        put("bad/part-0.parquet", _parquet(table.slice(0, 10)))
        put("bad/part-1.parquet", b"not parquet at all")
        yield endpoint, env, local


def _put(fs, path, data: bytes):
    with fs.open_output_stream(path) as f:
        f.write(data)


def _parquet(table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


@pytest.fixture
def s3env(store, monkeypatch):
    endpoint, env, local = store
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return store


def _members(index) -> dict:
    """Every member array's checksum (the .npy files, byte for byte)."""
    return {name: f["sha256"] for name, f in index.manifest["files"].items()}


def test_builds_from_s3_folder_hive_and_glob_equal_the_local_build(s3env, tmp_path):
    _, _, local = s3env
    want = gtmkit.build_index(local / "cat.parquet", tmp_path / "local")
    for i, url in enumerate([f"s3://{BUCKET}/cat/", f"s3://{BUCKET}/hive", f"s3://{BUCKET}/cat/part-*.parquet"]):
        got = gtmkit.build_index(url, tmp_path / f"s3-{i}", schema=f"s3://{BUCKET}/cat.schema.json")
        assert _members(got) == _members(want), url
        assert got.manifest["source"]["catalog"] == url
    got = gtmkit.build_index(f"s3://{BUCKET}/cat", tmp_path / "beside")  # the schema found beside the folder
    assert _members(got) == _members(want)
    sharded = gtmkit.build_index(f"s3://{BUCKET}/cat/", tmp_path / "sharded", shards=2)  # split tasks read URLs
    assert _members(sharded) == _members(want) and sharded.manifest["build"]["files"] == 3


def test_trie_from_s3_keys_equals_the_local_one(s3env, tmp_path):
    _, _, local = s3env
    want = SuccinctTrie.build(pq.read_table(local / "keys.parquet").column("key"))
    got = SuccinctTrie.build_dataset(f"s3://{BUCKET}/keys/", tmp_path / "t", column="key", shards=2)
    for name, a in want.arrays._asdict().items():
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(np.asarray(getattr(got.arrays, name)), a, err_msg=name)
    r = CliRunner().invoke(cli, ["trie", "build", f"s3://{BUCKET}/keys/", "-o", str(tmp_path / "cli"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["keys"] == want.num_keys


def test_cli_build_with_schema_url(s3env, tmp_path):
    _, _, local = s3env
    want = gtmkit.build_index(local / "cat.parquet", tmp_path / "local")
    r = CliRunner().invoke(cli, ["build", f"s3://{BUCKET}/cat/", "-o", str(tmp_path / "idx"),
                                  "--schema", f"s3://{BUCKET}/cat.schema.json", "-s", "--json"])
    assert r.exit_code == 0, r.output
    assert _members(gtmkit.load_index(tmp_path / "idx")) == _members(want)


def test_verify_and_update_read_urls(s3env, tmp_path):
    """`gtmkit verify --catalog URL` and `gtmkit update INDEX URL` read the store as the build does."""
    _, _, local = s3env
    for name in ("a", "b"):
        gtmkit.build_index(local / "cat.parquet", tmp_path / name, slack=0.5)
    r = CliRunner().invoke(cli, ["verify", str(tmp_path / "a"), "--catalog", f"s3://{BUCKET}/cat/", "--schema",
                                 f"s3://{BUCKET}/cat.schema.json"])
    assert r.exit_code == 0, r.output
    for name, changes in (("a", str(local / "changes.parquet")), ("b", f"s3://{BUCKET}/changes.parquet")):
        r = CliRunner().invoke(cli, ["update", str(tmp_path / name), changes, "--json"])
        assert r.exit_code == 0, r.output
    assert _members(gtmkit.load_index(tmp_path / "a")) == _members(gtmkit.load_index(tmp_path / "b"))


def _one_line_error(args, *names):
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    for name in names:
        assert name in lines[0], r.output
    return lines[0]


@pytest.mark.parametrize("url, says", [
    (f"s3://{BUCKET}/missing/", "no such file or directory"),
    ("s3://no-such-bucket/cat/", "no such bucket 'no-such-bucket'"),
    (f"s3://{BUCKET}/cat/zz-*.parquet", "no file matches"),
])
def test_missing_inputs_are_one_line(s3env, tmp_path, url, says):
    _one_line_error(["build", url, "-o", str(tmp_path / "i"), "--schema", f"s3://{BUCKET}/cat.schema.json"], url,
                    says)
    _one_line_error(["trie", "build", url, "-o", str(tmp_path / "t")], url, says)


def test_a_non_parquet_object_is_named(s3env, tmp_path):
    bad = f"s3://{BUCKET}/bad/part-1.parquet"
    _one_line_error(["build", f"s3://{BUCKET}/bad/", "-o", str(tmp_path / "i"), "--schema",
                     f"s3://{BUCKET}/cat.schema.json"], bad, "not a readable Parquet file")
    with pytest.raises(GtmkitError, match="part-1.parquet: not a readable Parquet file"):
        SuccinctTrie.build_dataset(bad, tmp_path / "t", column="key")


def test_a_bad_row_is_named_by_its_object_url_and_row(s3env, tmp_path):
    _one_line_error(["build", f"s3://{BUCKET}/badrow/", "-s", "-o", str(tmp_path / "i"), "--schema",
                     f"s3://{BUCKET}/cat.schema.json"], f"s3://{BUCKET}/badrow/part-1.parquet: column 'sid', row 7: "
                    "token 99 outside [0, 6)")


def test_schema_url_problems_are_one_line(s3env, tmp_path):
    url = f"s3://{BUCKET}/nothing.schema.json"
    _one_line_error(["build", f"s3://{BUCKET}/cat/", "-o", str(tmp_path / "i"), "--schema", url], url, "no such file")
    url = f"s3://{BUCKET}/cat/part-000.parquet"  # not JSON
    _one_line_error(["build", f"s3://{BUCKET}/cat/", "-o", str(tmp_path / "i"), "--schema", url], url)


def test_access_denied_is_one_line(s3env, tmp_path):
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin
    before = settings.INITIAL_NO_AUTH_ACTION_COUNT
    settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count = 0, 0  # credentials checked now
    try:
        line = _one_line_error(["build", f"s3://{BUCKET}/cat/", "-o", str(tmp_path / "i"), "--schema",
                                str(s3env[2] / "cat.schema.json")], f"s3://{BUCKET}/cat/")
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = before
    assert "ACCESS_DENIED" in line


def test_unreachable_endpoint_fails_fast_in_one_line(s3env, tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    import time
    t0 = time.monotonic()
    line = _one_line_error(["trie", "build", f"s3://{BUCKET}/keys/", "-o", str(tmp_path / "t")], f"s3://{BUCKET}/keys/")
    assert time.monotonic() - t0 < 30
    assert "connect" in line.lower()


def test_from_the_store_to_the_store(s3env, tmp_path, monkeypatch):
    """A catalog in the store built into the store (-o s3://) loads back as the local build, and no local folder
    named 's3:' appears."""
    _, _, local = s3env
    monkeypatch.chdir(tmp_path)
    want = gtmkit.build_index(local / "cat.parquet", tmp_path / "local")
    url = f"s3://{BUCKET}/built-index"
    r = CliRunner().invoke(cli, ["build", f"s3://{BUCKET}/cat/", "-o", url, "--schema", f"s3://{BUCKET}/cat.schema.json",
                                 "-s"])
    assert r.exit_code == 0, r.output
    got = gtmkit.load_index(url, cache=tmp_path / "cache")
    assert _members(got) == _members(want)
    assert not (tmp_path / "s3:").exists()


def test_file_urls_and_relative_paths(tmp_path, monkeypatch):
    """file:// URLs read local files; a relative input is recorded and handed to tasks as an absolute path."""
    table = random_catalog(11, n_ads=N)
    (tmp_path / "d").mkdir()
    pq.write_table(table, tmp_path / "d" / "cat.parquet")
    (tmp_path / "d" / "cat.schema.json").write_text(json.dumps(schema_dict()))
    (tmp_path / "link").symlink_to(tmp_path / "d")
    want = gtmkit.build_index(tmp_path / "d" / "cat.parquet", tmp_path / "a")
    got = gtmkit.build_index(f"file://{tmp_path}/d/cat.parquet", tmp_path / "b")
    assert _members(got) == _members(want)
    monkeypatch.chdir(tmp_path)
    got = gtmkit.build_index("link/cat.parquet", "c", shards=2)
    assert _members(got) == _members(want)
    assert got.manifest["source"]["catalog"] == str((tmp_path / "d" / "cat.parquet").resolve())


@pytest.mark.slow  # Dask worker processes
def test_local_dask_workers_read_the_urls(s3env, tmp_path):
    """Worker processes get the URLs and read the store from the environment they inherit."""
    pytest.importorskip("distributed", reason="a local Dask cluster needs distributed")
    _, _, local = s3env
    want = gtmkit.build_index(local / "cat.parquet", tmp_path / "local")
    got = gtmkit.build_index(f"s3://{BUCKET}/hive/", tmp_path / "dask", schema=f"s3://{BUCKET}/cat.schema.json",
                             workers=2, memory_limit=1 << 30)
    assert _members(got) == _members(want) and got.manifest["build"]["workers"] == 2


def test_an_fsspec_file_system(tmp_path):
    """The readers take a fsspec file system too (here fsspec's in-memory one), its problems one line each."""
    fsspec = pytest.importorskip("fsspec")
    from gtmkit.errors import CatalogError
    from gtmkit.inputs.catalog import read_catalog
    from gtmkit.inputs.keys import read_key_column
    from gtmkit.inputs.schema import parse_schema
    mem = fsspec.filesystem("memory")
    table = random_catalog(11, n_ads=N)
    for i, (a, b) in enumerate([(0, 40), (40, N)]):
        with mem.open(f"/gtmkit-url/cat/part-{i}.parquet", "wb") as f:
            pq.write_table(table.slice(a, b - a), f)
    pq.write_table(table, tmp_path / "cat.parquet")
    schema = parse_schema(schema_dict())
    got, want = read_catalog("/gtmkit-url/cat", schema, filesystem=mem), read_catalog(tmp_path / "cat.parquet", schema)
    np.testing.assert_array_equal(got.ad_ids, want.ad_ids)
    np.testing.assert_array_equal(got.sids, want.sids)
    col, _ = read_key_column("/gtmkit-url/cat", "sid", filesystem=mem)
    assert col.to_pylist() == table.column("sid").to_pylist()
    with pytest.raises(CatalogError, match="^/gtmkit-url/none: no such file or directory$"):
        read_catalog("/gtmkit-url/none", schema, filesystem=mem)


def test_a_store_lists_what_the_local_folder_and_glob_list(tmp_path):
    """A folder and a glob under a file:// URL (listed through pyarrow.fs, as any store's) name the files the local
    path names, in the same order."""
    from gtmkit.inputs.dataset import input_files
    root = tmp_path / "d"
    for rel in ["b.parquet", "a.parquet", "_SUCCESS", ".a.parquet.crc", "k=1/x.parquet", "k=0/y.parquet",
                "k=0/z/w.parquet", "_tmp/q.parquet", ".hidden/r.parquet", "k=0/_meta"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"")
    for pattern in ["", "/*.parquet", "/k=*/*.parquet", "/**/*.parquet", "/k=?/*", "/[ab].parquet"]:
        want = [f"file://{p}" for p in input_files(str(root) + pattern)]
        assert input_files(f"file://{root}{pattern}") == want, pattern


@pytest.mark.parametrize("url, says", [("foo://host/cat/", "cannot open the store"),
                                       ("file://cat.parquet", "a file:// URL names an absolute path"),
                                       ("s3:///cat/", "no bucket in the URL")])
def test_urls_no_store_reads_are_one_line(tmp_path, url, says):
    _one_line_error(["trie", "build", url, "-o", str(tmp_path / "t")], url, says)


def test_a_silent_endpoint_times_out_in_one_line(tmp_path, monkeypatch):
    """An endpoint that accepts connections and never answers: the request timeout ends it (shortened here)."""
    import threading
    from gtmkit.inputs import stores
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in iter(int, 1)], daemon=True).start()
    monkeypatch.setattr(stores, "REQUEST_TIMEOUT_S", 1.0)
    monkeypatch.setattr(stores, "RETRIES", 1)
    for k, v in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_EC2_METADATA_DISABLED": "true",
                 "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.getsockname()[1]}"}.items():
        monkeypatch.setenv(k, v)
    import time
    t0 = time.monotonic()
    line = _one_line_error(["trie", "build", "s3://silent/keys/", "-o", str(tmp_path / "t")], "s3://silent/keys/")
    assert time.monotonic() - t0 < 20 and "Timeout" in line
    server.close()
