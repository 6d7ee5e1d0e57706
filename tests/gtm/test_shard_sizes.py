"""Shard sizes come from the workers' memory as the scheduler reports it (in this process, from this machine's),
less the workers' share of the pieces they hold between phases (docs/design.md §3)."""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import given, settings, strategies as st

from gtmkit.sharding.plan import MIN_SHARD_ROWS, shard_count
from gtmkit.sharding.runner import runner

GiB = 2**30


def fits(rows: int, n: int, workers: int, limit: int, row_bytes: int, held: int) -> bool:
    """A worker's memory at its peak with n shards, one shard of rows/n rows and its share of the held pieces,
    within its limit: rows / n * row_bytes + held / workers <= limit, in integers."""
    return rows * row_bytes * workers + held * n <= limit * n * workers


builds = dict(rows=st.integers(1, 10**9), workers=st.integers(1, 64), limit=st.integers(2**20, 2**40),
              row_bytes=st.integers(1, 2000), held_per_row=st.integers(0, 500))


@settings(max_examples=300, deadline=None)
@given(**builds)
def test_the_count_fits_whenever_a_count_could(rows, workers, limit, row_bytes, held_per_row):
    held = rows * held_per_row
    n = shard_count(rows, workers, limit, row_bytes, held)
    most = max(1, math.ceil(rows / MIN_SHARD_ROWS))
    assert n >= workers and n % workers == 0  # whole waves of the workers
    if fits(rows, most, workers, limit, row_bytes, held):  # the smallest shards fit: so does n
        assert fits(rows, n, workers, limit, row_bytes, held)
        # and it is the fewest whole waves that do
        assert n == workers or not fits(rows, n - workers, workers, limit, row_bytes, held)
    else:
        assert n == workers * math.ceil(most / workers)  # none fits: the smallest shards


@settings(max_examples=300, deadline=None)
@given(**builds, more=st.integers(0, 2**40))
def test_more_memory_never_gives_more_shards(rows, workers, limit, row_bytes, held_per_row, more):
    held = rows * held_per_row
    assert shard_count(rows, workers, limit + more, row_bytes, held) <= shard_count(rows, workers, limit, row_bytes,
                                                                                    held)


@settings(max_examples=300, deadline=None)
@given(**builds, more=st.integers(0, 500))
def test_more_held_never_gives_fewer_shards(rows, workers, limit, row_bytes, held_per_row, more):
    a = shard_count(rows, workers, limit, row_bytes, rows * held_per_row)
    assert shard_count(rows, workers, limit, row_bytes, rows * (held_per_row + more)) >= a


def test_held_pieces_take_their_share_of_each_worker():
    # 45M ads at 400 bytes a shard row on two 8 GiB workers: 3 shards alone, 4 in whole waves; with 107 bytes a row
    # held (the split pieces as task results) a worker has 5.7 GiB left for its shard: still 4
    assert shard_count(45_000_000, 2, 8 * GiB, 400) == 4
    assert shard_count(45_000_000, 2, 8 * GiB, 400, 45_000_000 * 107) == 4
    # 6 GiB workers: 3.4 GiB left beside the pieces: 6 shards, where the shards alone would take 4
    assert shard_count(45_000_000, 2, 6 * GiB, 400) == 4
    assert shard_count(45_000_000, 2, 6 * GiB, 400, 45_000_000 * 107) == 6


def test_pieces_that_fill_the_cluster_warn_and_take_the_smallest_shards(caplog):
    with caplog.at_level(logging.WARNING, logger="gtmkit"):
        n = shard_count(45_000_000, 2, 2 * GiB, 400, 45_000_000 * 107)  # 4.5 GB of pieces, 4 GiB of workers
    assert n == 450
    [rec] = [r for r in caplog.records if r.name.startswith("gtmkit")]
    assert rec.levelno == logging.WARNING and "--staging" in rec.getMessage() and "4.5 GiB" in rec.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gtmkit"):
        shard_count(45_000_000, 2, 8 * GiB, 400, 45_000_000 * 107)
        shard_count(45_000_000, 2, 1, 400)  # no pieces held: nothing to suggest
    assert not [r for r in caplog.records if r.name.startswith("gtmkit")]


def test_the_workers_memory_limit_sizes_the_shards():
    distributed = pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    with distributed.LocalCluster(n_workers=2, processes=False, memory_limit="1GiB", dashboard_address=":0") as c, \
            distributed.Client(c) as client:
        run = runner(client=client)
        try:
            assert run.worker_memory() == 2**30
            # 10M rows of 400 bytes need 4 GB: four 1 GiB workers' worth of shards
            assert shard_count(10_000_000, run.workers, run.worker_memory(), 400) == 4
        finally:
            run.close()
    assert runner().worker_memory() is None  # in this process: shard_count shares this machine's memory


def test_a_build_whose_pieces_fill_the_workers_warns_and_builds_the_same(tmp_path, caplog):
    distributed = pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    import gtmkit
    from support.catalogs import random_catalog, schema_dict, write
    cat = write(tmp_path, random_catalog(5, n_ads=30_000, V=20, n_sids=5_000), schema_dict(V=20))
    want = gtmkit.build_index(cat, tmp_path / "one")
    with distributed.LocalCluster(n_workers=2, processes=False, dashboard_address=":0") as c, \
            distributed.Client(c) as client, caplog.at_level(logging.WARNING, logger="gtmkit"):
        # a memory limit for the sizing (the workers have none) that the split pieces (~3 MB) alone exceed
        got = gtmkit.build_index(cat, tmp_path / "dask", client=client, memory_limit=2**20)
    [rec] = [r for r in caplog.records if r.name.startswith("gtmkit")]
    assert "--staging" in rec.getMessage()
    assert got.manifest["build"]["shards"] == 2  # the smallest shards: one a worker for 30,000 ads
    assert {k: f["sha256"] for k, f in got.manifest["files"].items()} == \
        {k: f["sha256"] for k, f in want.manifest["files"].items()}
