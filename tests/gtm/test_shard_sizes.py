"""Shard sizes come from the workers' memory as the scheduler reports it; in this process, from this machine's."""

from __future__ import annotations

import pytest

from gtmkit.sharding.plan import shard_count
from gtmkit.sharding.runner import runner


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
