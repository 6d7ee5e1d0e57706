"""Artifacts in object storage, against a local S3-API server: `-o s3://...` and the writers upload a version
(members, manifest, then the pointer object), load_index / SuccinctTrie.load(URL, cache=DIR) download it into a
local cache checked on arrival, reuse it and prune older versions; a reader never mixes two versions; updates
publish over the version they read; failures are one line naming the URL and leave nothing pointed to."""

from __future__ import annotations

import json
import logging
import os
import threading

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("moto", reason="moto (the local S3-API server) is not installed")

import gtmkit  # noqa: E402
from gtmkit.artifact import remote  # noqa: E402
from gtmkit.artifact.header import read_header  # noqa: E402
from gtmkit.artifact.staging import Switch, VersionChanged  # noqa: E402
from gtmkit.cli import cli  # noqa: E402
from gtmkit.commands.match import match_user  # noqa: E402
from gtmkit.errors import ArtifactError  # noqa: E402
from gtmkit.index import load_index  # noqa: E402
from gtmkit.matcher.matcher import Matcher  # noqa: E402
from gtmkit.trie.trie import SuccinctTrie  # noqa: E402

from support.catalogs import random_catalog, random_user, schema_dict, write  # noqa: E402
from support.s3 import s3_filesystem, s3_server  # noqa: E402

BUCKET = "gtmkit-test"


@pytest.fixture(scope="module")
def server():
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the server's line per request
    with s3_server(BUCKET) as (endpoint, env):
        yield endpoint, env


@pytest.fixture
def store(server, monkeypatch, tmp_path):
    """(endpoint, a fresh URL prefix in the bucket); the AWS_* environment set, the user cache in tmp_path."""
    endpoint, env = server
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return endpoint, f"s3://{BUCKET}/{tmp_path.name}"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    d = tmp_path_factory.mktemp("cat")
    return write(d, random_catalog(3, n_ads=80, L=3, V=6), schema_dict(L=3, V=6), "cat.parquet")


def _objects(endpoint, url):
    import pyarrow.fs as pafs
    fs = s3_filesystem(endpoint)
    base = url.split("://", 1)[1]
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return sorted(i.path[len(base) + 1:] for i in infos if i.type == pafs.FileType.File)


def _same_arrays(a, b):
    assert a.artifact.names == b.artifact.names
    for n in a.artifact.names:
        np.testing.assert_array_equal(a.artifact.array(n), b.artifact.array(n), err_msg=n)


def test_index_to_store_and_back(store, catalog, tmp_path):
    endpoint, url = store
    local = gtmkit.build_index(catalog, tmp_path / "local")
    built = gtmkit.build_index(catalog, url)
    assert built.path == url and not os.path.exists("s3:") and not (tmp_path / "s3:").exists()
    objs = _objects(endpoint, url)
    name = built.version
    assert "CURRENT" in objs and f"{name}/manifest.json" in objs
    assert all(o == "CURRENT" or o.startswith(name + "/") for o in objs)
    built.close()
    idx = load_index(url, cache=tmp_path / "cache")
    assert idx.path == url and idx.version == name
    assert str(idx.artifact.dir).startswith(str(tmp_path / "cache"))
    _same_arrays(idx, local)
    rng = np.random.default_rng(0)
    for _ in range(3):
        user = random_user(rng)
        user = {k: v for k, v in user.items() if k in ("country", "age", "gender", "location")}
        a = match_user(idx, user, [1, 8, 16], seed=1)
        b = match_user(local, user, [1, 8, 16], seed=1)
        assert a["top"] == b["top"] and a["eligible_ads"] == b["eligible_ads"]
    h = read_header(url)
    assert h.kind == "index" and h.version == name and h.summary["ads"] == 80
    with pytest.raises(ArtifactError, match=f"^{url}: already exists"):
        gtmkit.build_index(catalog, url)
    idx.close()
    local.close()


def test_trie_to_store_and_back(store, tmp_path):
    _, url = store
    keys = [[1, 2, 3], [1, 2], [4], [5, 6, 7, 8], [1, 9]]
    t = SuccinctTrie.build(keys)
    t.save(url)
    t.save(tmp_path / "local")
    got = SuccinctTrie.load(url, cache=tmp_path / "cache")
    want = SuccinctTrie.load(tmp_path / "local")
    assert len(got) == len(want) == 5
    for k in keys + [[1], [2], [1, 2, 3, 4]]:
        assert got.lookup(k) == want.lookup(k)
    for f in got.arrays._fields:
        np.testing.assert_array_equal(np.asarray(getattr(got.arrays, f)), np.asarray(getattr(want.arrays, f)))
    assert read_header(url).kind == "trie"
    with pytest.raises(ArtifactError, match="already exists"):
        t.save(url)
    t.save(url, overwrite=True)
    got.close()
    want.close()


def test_cache_reused_then_pruned(store, tmp_path, monkeypatch):
    _, url = store
    SuccinctTrie.build([[1], [2]]).save(url)
    cache = tmp_path / "cache"
    calls = []
    real = remote._download
    monkeypatch.setattr(remote, "_download", lambda *a: (calls.append(a[3]), real(*a)))
    first = SuccinctTrie.load(url, cache=cache)
    v1 = first._artifact.dir
    mtime = os.stat(v1 / "manifest.json").st_mtime_ns
    again = SuccinctTrie.load(url, cache=cache)
    assert len(calls) == 1 and again._artifact.dir == v1  # no second download
    assert os.stat(v1 / "manifest.json").st_mtime_ns == mtime
    again.close()
    first.close()
    SuccinctTrie.build([[1], [2], [3]]).save(url, overwrite=True)
    newer = SuccinctTrie.load(url, cache=cache)
    assert len(calls) == 2 and len(newer) == 3 and newer._artifact.dir != v1
    assert not v1.exists()  # the older version, no longer held, was pruned
    versions = [p.name for p in newer._artifact.dir.parent.iterdir() if p.name.startswith("v-")]
    assert versions == [newer._artifact.dir.name]
    newer.close()


def test_corrupt_object_refused_on_arrival(store, tmp_path):
    endpoint, url = store
    SuccinctTrie.build([[1, 2], [3]]).save(url)
    name = remote.read_pointer(url)
    fs = s3_filesystem(endpoint)
    member = next(o for o in _objects(endpoint, url) if o.endswith(".npy"))
    key = f"{url.split('://', 1)[1]}/{member}"
    with fs.open_input_stream(key) as f:
        data = bytearray(f.read())
    data[-1] ^= 0xFF
    with fs.open_output_stream(key) as f:
        f.write(bytes(data))
    with pytest.raises(ArtifactError) as e:
        SuccinctTrie.load(url, cache=tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{url}/{name}/") and "checksum mismatch on arrival" in msg
    root = remote.cache_root(url, tmp_path / "cache")
    assert not (root / name).exists() and not any(p.name.startswith(".staging-") for p in root.iterdir())
    result = CliRunner().invoke(cli, ["trie", "verify", url, "--cache", str(tmp_path / "cache")])
    assert result.exit_code == 1 and "checksum mismatch on arrival" in result.output


def test_reader_sees_one_version_while_writer_publishes(store, tmp_path):
    _, url = store
    sets = [[[i, j] for j in range(n)] for i, n in enumerate(range(2, 9))]  # set i: keys [i, 0..n-1]
    SuccinctTrie.build(sets[0]).save(url)
    stop, errors, seen = threading.Event(), [], set()

    def writer():
        try:
            for keys in sets[1:]:
                SuccinctTrie.build(keys).save(url, overwrite=True)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            stop.set()

    th = threading.Thread(target=writer)
    th.start()
    cache = tmp_path / "cache"
    while not stop.is_set() or not seen:
        t = SuccinctTrie.load(url, cache=cache)  # verify=True: checksums and every invariant
        n = len(t)
        i = n - 2
        assert all(t.lookup([i, j]) >= 0 for j in range(n)), n  # whole and one version: its own keys only
        assert t.lookup([i + 1, 0]) < 0 and (i == 0 or t.lookup([i - 1, 0]) < 0)
        seen.add(n)
        t.close()
    th.join()
    assert not errors
    last = SuccinctTrie.load(url, cache=cache)
    assert len(last) == 8
    last.close()


def test_update_url_then_load_sees_change(store, catalog, tmp_path):
    _, url = store
    gtmkit.build_index(catalog, url).close()
    cache = tmp_path / "cache"
    before = load_index(url, cache=cache)
    m = Matcher(before)
    ad = int(before.ad_ids_sorted[0])
    ids = tmp_path / "pause.txt"
    ids.write_text(f"{ad}\n")
    r = CliRunner().invoke(cli, ["update", url, "--pause", str(ids), "--cache", str(cache), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["written"] and out["base_version"] == before.version
    after = load_index(url, cache=cache)
    assert after.version != before.version and list(after.paused_ad_ids) == [ad]
    assert list(before.paused_ad_ids) == []  # the old version is still held and read as it was
    assert m.swap(after) == after.version
    r = CliRunner().invoke(cli, ["stats", url, "--cache", str(cache), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["ads"] == 80
    r = CliRunner().invoke(cli, ["verify", url, "--cache", str(cache)])
    assert r.exit_code == 0, r.output
    before.close()
    after.close()


def test_compare_and_switch_on_the_pointer(store, catalog, tmp_path):
    endpoint, url = store
    SuccinctTrie.build([[1]]).save(url)
    objs = _objects(endpoint, url)
    with pytest.raises(VersionChanged, match="v-0-00000000"):
        with Switch(url, "v-0-00000000"):
            SuccinctTrie.build([[2]]).save(url, overwrite=True)
    assert _objects(endpoint, url) == objs  # the refused version's objects were removed, nothing points to them
    first = remote.read_pointer(url)
    with Switch(url, first) as sw:
        SuccinctTrie.build([[2]]).save(url, overwrite=True)
    assert sw.started == sw.replaced == first and remote.read_pointer(url) == sw.published != first


def test_cli_build_force_and_readers(store, catalog, tmp_path):
    _, url = store
    run = CliRunner().invoke
    cache = str(tmp_path / "cache")
    r = run(cli, ["build", str(catalog), "-o", url, "-s"])
    assert r.exit_code == 0, r.output
    first = remote.read_pointer(url)
    r = run(cli, ["build", str(catalog), "-o", url, "-s"])
    assert r.exit_code == 1 and f"{url}: already exists" in r.output
    r = run(cli, ["build", str(catalog), "-o", url, "-s", "-f"])
    assert r.exit_code == 0 and f"{url}: replaced version {first}" in r.output
    user = json.dumps({"country": "US"})
    r = run(cli, ["match", url, "--user", user, "--cache", cache, "--json"])
    assert r.exit_code == 0, r.output
    keys = tmp_path / "keys.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"key": pa.array([[1, 2], [3]], pa.list_(pa.int64()))}), keys)
    turl = url + "-trie"
    r = run(cli, ["trie", "build", str(keys), "-o", turl])
    assert r.exit_code == 0, r.output
    r = run(cli, ["trie", "stats", turl, "--cache", cache, "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["keys"] == 2
    assert not os.path.exists("s3:")


def test_errors_name_the_url(store, tmp_path, monkeypatch):
    _, url = store
    cache = tmp_path / "cache"
    with pytest.raises(ArtifactError, match=f"^{url}/none: no gtmkit artifact there"):
        load_index(url + "/none", cache=cache)
    with pytest.raises(ArtifactError, match="^s3://no-such-bucket-x/a: no such bucket"):
        SuccinctTrie.load("s3://no-such-bucket-x/a", cache=cache)
    with pytest.raises(ArtifactError, match="no such bucket"):
        SuccinctTrie.build([[1]]).save("s3://no-such-bucket-x/a")
    r = CliRunner().invoke(cli, ["stats", url + "/none", "--cache", str(cache)])
    assert r.exit_code == 1 and url + "/none" in r.output and len(r.output.strip().splitlines()) == 1
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there: refused, no hang
    import time
    t0 = time.monotonic()
    with pytest.raises(ArtifactError) as e:
        load_index(url, cache=cache)
    assert str(e.value).startswith(f"{url}: cannot read the version pointer") and "\n" not in str(e.value)
    assert time.monotonic() - t0 < 30


def test_sharded_builds_to_store(store, catalog, tmp_path):
    _, url = store
    local = gtmkit.build_index(catalog, tmp_path / "local")
    sharded = gtmkit.build_index(catalog, url, shards=2)
    _same_arrays(load_index(url, cache=tmp_path / "cache"), local)
    sharded.close()
    import pyarrow as pa
    import pyarrow.parquet as pq
    keys = tmp_path / "keys.parquet"
    pq.write_table(pa.table({"key": pa.array([[1, 2], [3], [1, 4, 5], [6]], pa.list_(pa.int64()))}), keys)
    t = SuccinctTrie.build_dataset(str(keys), url + "-trie", shards=2)
    assert len(SuccinctTrie.load(url + "-trie", cache=tmp_path / "cache")) == len(t) == 4


def test_edited_manifest_refused_on_arrival(store, tmp_path):
    endpoint, url = store
    SuccinctTrie.build([[1, 2], [3]]).save(url)
    name = remote.read_pointer(url)
    key = f"{url.split('://', 1)[1]}/{name}/manifest.json"
    fs = s3_filesystem(endpoint)
    with fs.open_input_stream(key) as f:
        m = json.loads(f.read())
    m["num_keys"] = 3
    with fs.open_output_stream(key) as f:
        f.write(json.dumps(m).encode())
    with pytest.raises(ArtifactError, match=rf"^{url}/{name}/manifest.json: manifest_sha256 mismatch.*on arrival"):
        SuccinctTrie.load(url, cache=tmp_path / "cache")


def test_version_pruned_while_downloading_is_read_again(store, tmp_path, monkeypatch):
    """A writer publishes twice while a reader copies: the version the reader's pointer named is deleted from the
    store; the reader reads the pointer again and loads the newest version whole."""
    _, url = store
    SuccinctTrie.build([[1]]).save(url)
    real, calls = remote._download, []

    def racing(*a):
        calls.append(a[3])
        if len(calls) == 1:
            SuccinctTrie.build([[1], [2]]).save(url, overwrite=True)
            SuccinctTrie.build([[1], [2], [3]]).save(url, overwrite=True)  # deletes the version a[3]
        return real(*a)

    monkeypatch.setattr(remote, "_download", racing)
    t = SuccinctTrie.load(url, cache=tmp_path / "cache")
    assert len(calls) == 2 and calls[1] != calls[0] and len(t) == 3
    t.close()


def test_update_applied_again_when_another_writer_published(store, catalog, tmp_path, monkeypatch):
    from gtmkit.indexer.update.publish import update_path
    _, url = store
    cache = tmp_path / "cache"
    gtmkit.build_index(catalog, url).close()
    with load_index(url, cache=cache) as idx:
        a, b = (int(x) for x in idx.ad_ids_sorted[:2])
    real, calls = remote.publish, []

    def racing(*args):
        calls.append(args[1].name)
        if len(calls) == 1:  # another writer publishes between this update's read and its pointer switch
            th = threading.Thread(target=update_path, args=(url,), kwargs={"pause": [b], "cache": tmp_path / "c2"})
            th.start()
            th.join()
        return real(*args)

    monkeypatch.setattr(remote, "publish", racing)
    done = update_path(url, pause=[a], cache=cache)
    assert done.tries == 2 and len(calls) == 3
    with load_index(url, cache=cache) as final:
        assert sorted(final.paused_ad_ids.tolist()) == sorted([a, b])


def test_update_with_shard_rebuild_of_a_url(store, tmp_path):
    """gtmkit update URL --rebuild-shards: an ad moved to a SID the index lacks; the version published to the store
    equals a fresh build of the changed catalog, checksum for checksum."""
    import itertools

    import pyarrow as pa
    _, url = store
    table, sd = random_catalog(5, n_ads=40, L=3, V=6, n_sids=10), schema_dict(L=3, V=6)
    gtmkit.build_index(write(tmp_path, table, sd, "c0.parquet"), url).close()
    d = table.to_pydict()
    have = {tuple(s) for s in d["sid"]}
    d["sid"][0] = list(next(s for s in itertools.product(range(6), repeat=3) if s not in have))
    changes = pa.Table.from_pylist([{k: d[k][0] for k in d}], schema=table.schema)
    pq_changes = tmp_path / "changes.parquet"
    import pyarrow.parquet as pq
    pq.write_table(changes, pq_changes)
    cache = str(tmp_path / "cache")
    r = CliRunner().invoke(cli, ["update", url, str(pq_changes), "--rebuild-shards", "--cache", cache, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["rebuilt"]
    fresh = gtmkit.build_index(write(tmp_path, pa.table(d, schema=table.schema), sd, "c1.parquet"), tmp_path / "f")
    with load_index(url, cache=cache) as got:
        assert {n: f["sha256"] for n, f in got.manifest["files"].items()} == \
            {n: f["sha256"] for n, f in fresh.manifest["files"].items()}
    fresh.close()
