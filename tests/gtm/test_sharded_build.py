"""Sharded GTM builds (indexer/shards): for any shard count, in this process or on a real Dask LocalCluster,
the artifact's arrays are the single-process build's, byte for byte; bad inputs and dying workers end in one
error with nothing left at the output path."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gtmkit
from gtmkit.errors import CatalogError, GtmkitError
from gtmkit.sharding.plan import shard_bounds

from support.catalogs import random_catalog, schema_dict

MODES = [("none", {}), ("static", {"k": [2, 3, 2]}), ("dynamic", {"target_fill": 0.3, "k_max": 4})]


def _checksums(index) -> dict:
    return {name: f["sha256"] for name, f in index.manifest["files"].items()}


def _stats(index) -> dict:
    s = dict(index.manifest["stats"])
    s.pop("build_seconds"), s.pop("shards", None)
    return s


def _catalog(tmp, seed, n_ads, hot, domain, cuts, V=6):
    """A catalog as files part-000... cut at `cuts`; hot: most SIDs start with token 0."""
    table = random_catalog(seed, n_ads=n_ads, V=V)
    if hot:
        rng = np.random.default_rng(seed)
        sids = [[0 if rng.random() < 0.8 else s[0], *s[1:]] for s in table.column("sid").to_pylist()]
        table = table.set_column(1, "sid", pa.array(sids, pa.list_(pa.int32())))
    root = tmp / "cat"
    root.mkdir()
    bounds = [0, *sorted(set(cuts)), n_ads]
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        pq.write_table(table.slice(a, b - a), root / f"part-{i:03d}.parquet", row_group_size=17)
    (tmp / "cat.schema.json").write_text(json.dumps(schema_dict(V=V, domain=domain)))
    return root


def _dirs(path) -> list:
    """What lies at an output path: its entries (a version's name as 'v-') and each version's files."""
    if not os.path.exists(path):
        return []
    out = []
    for name in sorted(os.listdir(path)):
        if name.startswith("v-"):
            out.append(("v-", sorted(os.listdir(os.path.join(path, name)))))
        else:
            out.append((name, None))
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n_ads=st.integers(1, 150), shards=st.integers(1, 9), hot=st.booleans(),
       domain=st.booleans(), cuts=st.lists(st.integers(1, 149), max_size=3), mode=st.sampled_from(MODES))
def test_sharded_arrays_equal_single_process(tmp_path_factory, seed, n_ads, shards, hot, domain, cuts, mode):
    tmp = tmp_path_factory.mktemp("sh")
    cat = _catalog(tmp, seed, n_ads, hot, domain, [c for c in cuts if c < n_ads])
    partition, kw = mode
    single = gtmkit.build_index(cat, tmp / "single", partition=partition, **kw)
    sharded = gtmkit.build_index(cat, tmp / "sharded", partition=partition, shards=shards, **kw)
    assert _checksums(sharded) == _checksums(single)
    assert _stats(sharded) == _stats(single)
    b = sharded.manifest["build"]
    assert b["mode"] == "sharded" and 1 <= b["shards"] <= shards
    assert single.manifest["build"]["mode"] == "single-process"
    assert b["prefix_bounds"][0] == [0, 0] and b["prefix_bounds"][-1] == [6, 0]
    assert _dirs(tmp / "sharded") == _dirs(tmp / "single")  # no working files left beside the version


@pytest.mark.parametrize("shards", [2, 3, 9])
def test_hot_first_token_splits_on_the_second(tmp_path, shards):
    """80% of the SIDs start with token 0: it is split between shards by second token (a shard may hold only
    part of its node), and the arrays stay the single-process build's."""
    cat = _catalog(tmp_path, 8, 300, True, True, [100])
    for partition, kw in MODES:
        single = gtmkit.build_index(cat, tmp_path / f"single-{partition}", partition=partition, **kw)
        sharded = gtmkit.build_index(cat, tmp_path / f"sharded-{partition}", partition=partition, shards=shards, **kw)
        assert _checksums(sharded) == _checksums(single), partition
        assert _stats(sharded) == _stats(single)
        bounds = sharded.manifest["build"]["prefix_bounds"]
        assert any(first == 0 and second > 0 for first, second in bounds)


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.integers(0, 50), min_size=1, max_size=40).filter(lambda r: sum(r) > 0),
       shards=st.integers(1, 50))
def test_shard_bounds_cover_every_token_once_with_rows_in_each(rows, shards):
    rows = np.array(rows, np.int64)
    b = shard_bounds(rows, shards)
    assert b[0] == 0 and b[-1] == len(rows) and all(x < y for x, y in zip(b, b[1:]))
    assert len(b) - 1 <= shards
    assert all(rows[x:y].sum() > 0 for x, y in zip(b, b[1:]))
    if shards >= 2 and np.count_nonzero(rows) >= 2:
        assert len(b) - 1 >= 2  # rows in two tokens split when two shards are asked for
    # no shard holds more than an equal share plus the one token that crossed it
    share = rows.sum() / shards
    assert all(rows[x:y].sum() <= share + rows[x:y].max() for x, y in zip(b, b[1:]))


def test_bad_row_in_one_file_names_it_and_leaves_nothing(tmp_path):
    cat = _catalog(tmp_path, 3, 120, False, True, [40, 80])
    t = pq.read_table(cat / "part-001.parquet")
    sids = t.column("sid").to_pylist()
    sids[7] = sids[7][:2]
    pq.write_table(t.set_column(1, "sid", pa.array(sids, pa.list_(pa.int32()))), cat / "part-001.parquet")
    with pytest.raises(CatalogError, match=r"part-001.parquet: column 'sid', row 7: SID has 2 tokens"):
        gtmkit.build_index(cat, tmp_path / "idx", shards=3)
    assert not (tmp_path / "idx").exists()


def test_repeated_ad_id_across_shards_is_named_like_the_single_process_build(tmp_path):
    cat = _catalog(tmp_path, 4, 100, False, True, [50])
    a, b = pq.read_table(cat / "part-000.parquet"), pq.read_table(cat / "part-001.parquet")
    ids = b.column("ad_id").to_pylist()
    ids[9] = a.column("ad_id")[3].as_py()
    pq.write_table(b.set_column(0, "ad_id", pa.array(ids, pa.int64())), cat / "part-001.parquet")
    with pytest.raises(CatalogError) as single:
        gtmkit.build_index(cat, tmp_path / "idx")
    with pytest.raises(CatalogError) as sharded:
        gtmkit.build_index(cat, tmp_path / "idx", shards=4)
    assert str(sharded.value) == str(single.value) and "part-001.parquet: column 'ad_id', row 9" in str(single.value)
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_shard_and_worker_counts_are_checked(tmp_path, bad):
    cat = _catalog(tmp_path, 5, 30, False, True, [])
    for name in ("shards", "workers"):
        with pytest.raises(GtmkitError, match=name):
            gtmkit.build_index(cat, tmp_path / "idx", **{name: bad})
    assert not (tmp_path / "idx").exists()


def _synth_parts(tmp_path, n: int, parts: int, seed: int) -> tuple:
    """A synthetic catalog of n ads as `parts` files in tmp_path/cat, and its schema dict."""
    from gtmkit.synth.catalog import catalog_schema, synth_catalog

    table = synth_catalog(n, seed=seed)
    cat = tmp_path / "cat"
    cat.mkdir()
    for i in range(parts):
        pq.write_table(table.slice(i * n // parts, n // parts), cat / f"part-{i}.parquet")
    return cat, catalog_schema(n, seed=seed)


@contextlib.contextmanager
def _local_cluster():
    """A Client of a real 2-worker LocalCluster."""
    distributed = pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.CRITICAL) as lc, distributed.Client(lc) as client:
        yield client


@pytest.fixture(scope="module")
def cluster():
    with _local_cluster() as client:
        yield client


@pytest.mark.parametrize("mode", MODES, ids=[m[0] for m in MODES])
def test_dask_cluster_builds_the_same_arrays(tmp_path, cluster, mode):
    cat = _catalog(tmp_path, 6, 400, True, False, [100, 250], V=12)
    partition, kw = mode
    single = gtmkit.build_index(cat, tmp_path / "single", partition=partition, **kw)
    sharded = gtmkit.build_index(cat, tmp_path / "dask", partition=partition, client=cluster, shards=5, **kw)
    assert _checksums(sharded) == _checksums(single)
    assert sharded.manifest["build"]["workers"] == 2
    assert sharded.manifest["build"]["scheduler"] == cluster.scheduler.address


def test_dask_task_error_is_one_error_and_nothing_is_left(tmp_path, cluster):
    cat = _catalog(tmp_path, 7, 90, False, True, [30, 60])
    t = pq.read_table(cat / "part-002.parquet")
    pq.write_table(t.set_column(0, "ad_id", pa.array([None] * t.num_rows, pa.int64())), cat / "part-002.parquet")
    with pytest.raises(CatalogError, match=r"part-002.parquet: column 'ad_id', row 0: null ad_id"):
        gtmkit.build_index(cat, tmp_path / "idx", client=cluster, shards=2)
    assert not (tmp_path / "idx").exists()


@pytest.mark.slow
def test_killed_worker_is_survived_or_reported_with_nothing_left(tmp_path):
    """A worker process killed while its shard builds: the scheduler runs the task again on a worker that
    lives (the same arrays come out) or the build fails with one GtmkitError; either way the output path then
    holds a whole index or nothing."""
    import signal

    cat, schema = _synth_parts(tmp_path, 400_000, 8, seed=2)
    single = gtmkit.build_index(cat, tmp_path / "single", schema=schema)
    with _local_cluster() as client:
        pids = list(client.run(os.getpid).values())
        killed = []

        def kill_when_shards_build(stage_root=tmp_path / "idx"):
            end = time.monotonic() + 60
            while time.monotonic() < end and not killed:
                if any((d / "shards").is_dir() and any(x.name.startswith("shard-") for x in (d / "shards").iterdir())
                       for d in stage_root.glob(".staging-*")):
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])
                time.sleep(0.005)

        killer = threading.Thread(target=kill_when_shards_build)
        killer.start()
        try:
            index = gtmkit.build_index(cat, tmp_path / "idx", schema=schema, client=client, shards=8)
        except GtmkitError:
            index = None
        killer.join()
    assert killed, "the build finished before a worker could be killed"
    if index is None:
        assert not (tmp_path / "idx").exists()
    else:
        assert _checksums(index) == _checksums(single)
        assert _dirs(tmp_path / "idx") == _dirs(tmp_path / "single")


def _cli(*args):
    from click.testing import CliRunner

    from gtmkit.cli import cli
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_cli_sharded_build_prints_shards_and_matches_the_single_build(tmp_path):
    cat = _catalog(tmp_path, 9, 200, True, False, [70])
    assert _cli("build", cat, "-o", tmp_path / "a", "-s").exit_code == 0
    r = _cli("build", cat, "-o", tmp_path / "b", "--shards", 3, "--memory-limit", "2GiB", "-s")
    assert r.exit_code == 0, r.output
    assert "3 shards" in r.output or "2 shards" in r.output
    r = _cli("stats", tmp_path / "b", "--json")
    assert json.loads(r.output)["shards"] >= 2
    assert _checksums(gtmkit.load_index(tmp_path / "a")) == _checksums(gtmkit.load_index(tmp_path / "b"))


@pytest.mark.parametrize("args, message", [
    (["--memory-limit", "lots"], "expected a size"),
    (["--memory-limit", "0"], "expected a size"),
    (["--shards", "0"], "--shards"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "give one of them"),
])
def test_cli_sharding_options_are_checked(tmp_path, args, message):
    cat = _catalog(tmp_path, 10, 20, False, True, [])
    r = _cli("build", cat, "-o", tmp_path / "idx", "-s", *args)
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output
    assert not (tmp_path / "idx").exists()


@pytest.mark.slow  # waits out the client's 10 s connect timeout
def test_cli_unreachable_scheduler_is_one_error(tmp_path):
    pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    cat = _catalog(tmp_path, 11, 20, False, True, [])
    r = _cli("build", cat, "-o", tmp_path / "idx", "-s", "--scheduler", "tcp://127.0.0.1:1")
    assert r.exit_code == 1 and "cannot reach a Dask scheduler" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "idx").exists()


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "SIGTERM to a background job"])
def test_ctrl_c_during_a_sharded_build_leaves_nothing(tmp_path, stop):
    """SIGINT (Ctrl-C) or SIGTERM (a job scheduler; also to a job started in the background, whose SIGINT is
    ignored) to a real `gtmkit build --shards` process once its shards' working files exist: it exits with an
    error and the output path is gone again (it did not exist before)."""
    import signal
    import subprocess
    import sys

    cat, schema = _synth_parts(tmp_path, 300_000, 6, seed=4)
    (tmp_path / "cat.schema.json").write_text(json.dumps(schema))
    out = tmp_path / "idx"
    background = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if "background" in stop else None
    proc = subprocess.Popen([sys.executable, "-m", "gtmkit", "build", str(cat), "-o", str(out), "--shards", "6", "-s"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=background)
    end, sent = time.monotonic() + 120, False
    while time.monotonic() < end and proc.poll() is None:
        if sent or any((d / "shards").is_dir() for d in out.glob(".staging-*")):
            proc.send_signal(getattr(signal, stop.split()[0]))  # again until it exits: one may land where Python defers it
            sent = True
        time.sleep(0.001 if sent else 0.01)  # a hammered Ctrl-C, as an impatient user gives it
    _, err = proc.communicate(timeout=120)
    assert sent and "Traceback" not in err
    if proc.returncode == 0 or (out / "CURRENT").exists():  # the signal came after the commit: the index is whole
        assert gtmkit.load_index(out, verify=True).num_ads == 300_000
        assert [e for e in _dirs(out) if e[0].startswith(".staging")] == []
    else:
        assert not out.exists(), sorted(p.name for p in out.rglob("*"))
