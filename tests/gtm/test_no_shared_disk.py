"""Sharded builds on a Dask cluster whose workers share no disk with the driver: a scheduler and worker processes,
each worker in its own working and local directory, the catalog and keys in a local S3-API server (moto), and a
run where every worker is started under `unshare --mount` with a tmpfs over the driver's temp folder, so that no
path of the driver's exists for it. The GTM index and the trie equal the single-process build of the local copy,
array for array; so does update --rebuild-shards of an index on the driver's disk; `-o s3://` then
load_index(URL, cache=...) answers as the local index; a worker killed mid-build
still gives the same arrays (its lost pieces computed again) or one error."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("moto", reason="the local S3 server needs moto (pip install 'moto[server]')")
distributed = pytest.importorskip("distributed", reason="a Dask cluster needs distributed")

import gtmkit  # noqa: E402
from gtmkit.commands.match import match_user  # noqa: E402
from gtmkit.errors import GtmkitError  # noqa: E402
from gtmkit.index import load_index  # noqa: E402
from gtmkit.trie.trie import SuccinctTrie  # noqa: E402

from support.catalogs import random_catalog, random_user, schema_dict  # noqa: E402
from support.s3 import s3_filesystem, s3_server  # noqa: E402

pytestmark = pytest.mark.slow  # scheduler and worker processes

BUCKET = "gtmkit-nodisk"
N = 600


def _unshare_works() -> str | None:
    """None where `unshare --mount --map-root-user` may mount a tmpfs, else why not."""
    if not shutil.which("unshare"):
        return "no unshare command"
    d = tempfile.mkdtemp()
    try:
        r = subprocess.run(["unshare", "--mount", "--map-root-user", "mount", "-t", "tmpfs", "tmpfs", d],
                           capture_output=True, text=True, timeout=30)
    finally:
        os.rmdir(d)
    return None if r.returncode == 0 else f"unshare --mount --map-root-user refused: {r.stderr.strip()[:120]}"


def _put(fs, path: str, table) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    with fs.open_output_stream(path) as f:
        f.write(sink.getvalue().to_pybytes())


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(environment, local folder): the catalog (three parts) and keys (two parts) written locally and uploaded."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    local = tmp_path_factory.mktemp("local")
    table = random_catalog(21, n_ads=N)
    keys = pa.table({"key": pa.array([list(map(int, k)) for k in np.random.default_rng(4).integers(0, 40, (900, 4))],
                                     pa.list_(pa.int32()))})
    pq.write_table(table, local / "cat.parquet")
    (local / "cat.schema.json").write_text(json.dumps(schema_dict()))
    pq.write_table(keys, local / "keys.parquet")
    with s3_server(BUCKET) as (endpoint, env):
        fs = s3_filesystem(endpoint)
        for i, (a, b) in enumerate([(0, 150), (150, 420), (420, N)]):
            _put(fs, f"{BUCKET}/cat/part-{i}.parquet", table.slice(a, b - a))
        with fs.open_output_stream(f"{BUCKET}/cat.schema.json") as f:
            f.write(json.dumps(schema_dict()).encode())
        _put(fs, f"{BUCKET}/keys/part-0.parquet", keys.slice(0, 400))
        _put(fs, f"{BUCKET}/keys/part-1.parquet", keys.slice(400))
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # the driver and the workers it starts read the store from the environment
        try:
            yield env, local
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _own_group() -> None:
    os.setpgrp()


def _kill(proc) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@contextlib.contextmanager
def _cluster(masked: str | None, workers: int = 2):
    """(Client, worker folders) of a scheduler and `workers` worker processes (with nannies), each run in a folder
    of its own outside the driver's temp folder; masked: a folder each worker sees as an empty tmpfs."""
    home = tempfile.mkdtemp(prefix="gtmkit-cluster-")
    procs = []
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
             "--dashboard-address", ":0", "--scheduler-file", "scheduler.json"], cwd=home,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_own_group))
        end = time.monotonic() + 30
        while not os.path.exists(os.path.join(home, "scheduler.json")):
            assert time.monotonic() < end and procs[0].poll() is None, "the scheduler did not start"
            time.sleep(0.05)
        time.sleep(0.1)  # written whole
        with open(os.path.join(home, "scheduler.json")) as f:
            address = json.load(f)["address"]
        dirs = []
        for w in range(workers):
            d = os.path.join(home, f"worker-{w}")
            os.mkdir(d)
            dirs.append(d)
            cmd = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--no-dashboard",
                   "--local-directory", d, "--memory-limit", "2GiB"]
            if masked:
                cmd = ["unshare", "--mount", "--map-root-user", "sh", "-c",
                       'mount -t tmpfs tmpfs "$1" && shift && exec "$@"', "sh", masked, *cmd]
            procs.append(subprocess.Popen(cmd, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          preexec_fn=_own_group))
        with distributed.Client(address, timeout=10) as client:
            client.wait_for_workers(workers, timeout=40)
            yield client, dirs
    finally:
        for p in procs:
            _kill(p)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module", params=["own-folders", "unshared"])
def cluster(request, store, tmp_path_factory):
    masked = None
    if request.param == "unshared":
        why = _unshare_works()
        if why:
            pytest.skip(why)
        masked = str(tmp_path_factory.getbasetemp())
    with _cluster(masked) as (client, dirs):
        yield request.param, client, dirs


def _members(index) -> dict:
    return {name: f["sha256"] for name, f in index.manifest["files"].items()}


def _paths_in(folder: str) -> list:
    return sorted(os.path.relpath(os.path.join(r, f), folder) for r, _, fs in os.walk(folder) for f in fs)


def test_builds_from_s3_equal_the_local_build(cluster, store, tmp_path):
    kind, client, dirs = cluster
    _, local = store
    seen = client.run(os.path.exists, str(tmp_path))
    assert all(v is (kind == "own-folders") for v in seen.values())  # unshared: the driver's folders are not there
    cwd = client.run(os.getcwd)
    assert sorted(cwd.values()) == sorted(dirs)
    want = gtmkit.build_index(local / "cat.parquet", tmp_path / "local")
    got = gtmkit.build_index(f"s3://{BUCKET}/cat/", tmp_path / "dask", client=client, shards=3)
    assert _members(got) == _members(want) and got.manifest["build"]["shards"] == 3
    assert [p for p in _paths_in(str(tmp_path / "dask")) if "staging" in p] == []
    keys = SuccinctTrie.build(pq.read_table(local / "keys.parquet").column("key"))
    trie = SuccinctTrie.build_dataset(f"s3://{BUCKET}/keys/", tmp_path / "trie", client=client, shards=3)
    for name, a in keys.arrays._asdict().items():
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(np.asarray(getattr(trie.arrays, name)), a, err_msg=name)


def test_pieces_larger_than_the_workers_memory_warn_on_the_command_line(cluster, store, tmp_path):
    """A memory limit the split pieces alone exceed: one warning line suggesting --staging, and the same index."""
    kind, client, _ = cluster
    env, _ = store
    table = random_catalog(5, n_ads=30_000, V=20, n_sids=5_000)  # split pieces of ~3 MB
    pq.write_table(table, tmp_path / "big.parquet")
    (tmp_path / "big.schema.json").write_text(json.dumps(schema_dict(V=20)))
    want = gtmkit.build_index(tmp_path / "big.parquet", tmp_path / "local")
    fs = s3_filesystem(env["AWS_ENDPOINT_URL"])
    _put(fs, f"{BUCKET}/big-{kind}/part-0.parquet", table)
    with fs.open_output_stream(f"{BUCKET}/big-{kind}.schema.json") as f:
        f.write(json.dumps(schema_dict(V=20)).encode())
    r = subprocess.run([sys.executable, "-m", "gtmkit", "build", f"s3://{BUCKET}/big-{kind}/", "-o", tmp_path / "cli",
                        "--scheduler", client.scheduler.address, "--memory-limit", "1MiB", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    [line] = [x for x in r.stderr.splitlines() if "warning" in x]
    assert line.startswith("gtmkit: warning: the pieces held between phases") and "--staging" in line
    with load_index(tmp_path / "cli") as got:
        assert _members(got) == _members(want)


def test_output_to_s3_then_load_answers_as_the_local_index(cluster, store, tmp_path):
    kind, client, _ = cluster
    _, local = store
    url = f"s3://{BUCKET}/out-{kind}-{tmp_path.name}"
    want = gtmkit.build_index(local / "cat.parquet", tmp_path / "local")
    gtmkit.build_index(f"s3://{BUCKET}/cat/", url, client=client).close()
    got = load_index(url, cache=tmp_path / "cache")
    assert _members(got) == _members(want)
    rng = np.random.default_rng(0)
    for _ in range(4):
        user = {k: v for k, v in random_user(rng).items() if k in ("country", "age", "gender", "location")}
        a, b = match_user(got, user, [1, 8, 16], seed=1), match_user(want, user, [1, 8, 16], seed=1)
        assert a["top"] == b["top"] and a["eligible_ads"] == b["eligible_ads"]
    got.close()


def test_staging_in_the_store(cluster, store, tmp_path):
    kind, client, _ = cluster
    _, local = store
    stage = f"s3://{BUCKET}/stage-{kind}-{tmp_path.name}"
    want = gtmkit.build_index(local / "cat.parquet", tmp_path / "local")
    got = gtmkit.build_index(f"s3://{BUCKET}/cat/", tmp_path / "dask", client=client, shards=2, staging=stage)
    assert _members(got) == _members(want)
    import pyarrow.fs as pafs
    fs = s3_filesystem(os.environ["AWS_ENDPOINT_URL"])
    left = fs.get_file_info(pafs.FileSelector(stage[len("s3://"):], recursive=True, allow_not_found=True))
    assert [i.path for i in left if i.type == pafs.FileType.File] == []  # the run's folder removed at its end


def test_rebuild_shards_on_workers_that_cannot_read_the_index(cluster, store, tmp_path):
    """update --rebuild-shards of an index on the driver's disk only: the tasks' inputs and pieces move through
    Dask, and the new version equals the single-process rebuild's."""
    import itertools
    kind, client, _ = cluster
    _, local = store
    table = pq.read_table(local / "cat.parquet")
    have = {tuple(s) for s in table.column("sid").to_pylist()}
    free = [list(s) for s in itertools.product(range(6), repeat=3) if s not in have]
    rows = table.slice(0, 3).to_pylist()  # three ads moved to SIDs the index lacks
    for row, sid in zip(rows, free):
        row["sid"] = sid
    changes = pa.Table.from_pylist(rows, schema=table.schema)
    got = []
    for name, c in (("here", None), ("dask", client)):
        gtmkit.build_index(local / "cat.parquet", tmp_path / name).close()
        new, rep = gtmkit.rebuild_shards(tmp_path / name, changes, client=c)
        got.append(_members(new))
        new.close()
    assert len(free) >= 3 and rep.rebuilt["workers"] == 2 and got[0] == got[1]
    assert [p for p in _paths_in(str(tmp_path / "dask")) if "staging" in p] == []


def test_a_worker_killed_mid_build_gives_the_same_arrays_or_one_error(store, tmp_path):
    """The worker holding split pieces is killed once the split phase ends: its nanny starts it again and the
    scheduler computes the lost pieces again."""
    _, local = store
    want = gtmkit.build_index(local / "cat.parquet", tmp_path / "local")
    with _cluster(None) as (client, _):
        pids = list(client.run(os.getpid).values())
        killed = []

        def progress(done, total, phase):
            if phase == "split" and done == total and not killed:
                killed.append(pids[0])
                os.kill(pids[0], signal.SIGKILL)
        try:
            got = gtmkit.build_index(f"s3://{BUCKET}/cat/", tmp_path / "dask", client=client, shards=3,
                                     progress=progress)
        except GtmkitError as exc:
            assert len(str(exc).splitlines()) == 1
            return
        assert killed and _members(got) == _members(want)
