"""The sharded build's driver: the three phases as tasks, in this process one after another or on a Dask
cluster (docs/design.md §3). Working files live in the artifact's staging directory, so a failed or
interrupted build leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import time
import uuid

import numpy as np

from ...errors import GtmkitError
from ...formats import index_format as fmt
from ...formats.artifact import ArtifactWriter
from ...formats.catalog import Catalog, StringLists, open_catalog
from ...progress import Progress, report
from ..rows import resolve_layout
from .assemble import assemble
from .plan import hot_tokens, merge_dictionaries, save_dictionaries, shard_count, shard_keys
from .shard import build_shard
from .split import second_token_rows, split_file
from ..write import write_index


def count_arg(x, name: str, lo: int) -> int:
    """A build's shard, worker or byte count: an integer >= lo (bools refused)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < lo:
        raise GtmkitError(f"{name} must be an integer >= {lo}, got {x!r}")
    return int(x)


class InProcess:
    """Tasks run here, one after another: a shard at a time in memory."""
    workers = 1
    address = None

    def map(self, fn, args: list, progress, phase: str) -> list:
        out = []
        for i, a in enumerate(args):
            out.append(fn(*a))
            report(progress, i + 1, len(args), phase)
        return out

    def close(self) -> None:
        pass


class OnDask:
    """Tasks on a dask.distributed cluster: a Client given, or a LocalCluster of `workers` processes."""

    def __init__(self, client=None, workers: int | None = None, memory_limit: int | None = None):
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise GtmkitError("a build on Dask workers needs dask and distributed: "
                              "pip install 'gtmkit[dist]'") from None
        self._own = None
        if client is None:
            import logging
            # the workers share this machine's cores: parallel kernels with more threads than their share spin
            # against each other (OpenMP's waiting threads keep their cores)
            share = str(max(1, (os.cpu_count() or 1) // workers))
            self._own = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                     memory_limit=memory_limit or "auto", dashboard_address=":0",
                                     silence_logs=logging.CRITICAL,  # a task's error is the build's one line
                                     env={"NUMBA_NUM_THREADS": share, "OMP_NUM_THREADS": share})
            client = Client(self._own)
        self.client = client
        self.workers = max(1, len(client.scheduler_info().get("workers", {})))
        # a LocalCluster of this build is named by its size alone: its address is gone with it
        self.address = None if self._own is not None else client.scheduler.address

    def map(self, fn, args: list, progress, phase: str) -> list:
        from distributed import KilledWorker, as_completed, wait
        tag = uuid.uuid4().hex[:8]
        futures = [self.client.submit(fn, *a, key=f"gtmkit-{phase}-{tag}-{i}", pure=False)
                   for i, a in enumerate(args)]
        place = {f.key: i for i, f in enumerate(futures)}
        finished = False
        try:
            for done, f in enumerate(as_completed(futures), 1):
                if f.status == "error":
                    # the first failing task in order raises, as InProcess would: with several bad files the
                    # error is the single-process build's, whichever task ends first
                    before = futures[:place[f.key]]
                    wait(before)
                    for g in before + [f]:
                        if g.status == "error":
                            g.result()  # raises the task's own error
                report(progress, done, len(args), phase)
            out = self.client.gather(futures)
            finished = True
            return out
        except KilledWorker as exc:
            # the scheduler ran the task again on other workers (distributed.scheduler.allowed-failures times)
            raise GtmkitError(f"{phase}: Dask workers died running one task, every time it ran ({exc})") from None
        finally:
            self.client.cancel(futures)
            if not finished:
                self._wait_stopped(list(place))

    def _wait_stopped(self, keys: list, timeout: float = 60.0) -> None:
        """Until no worker runs any of these tasks: a cancelled task runs on to its end, and one that wrote into
        the staging directory while the build removed it would leave that directory behind."""
        if self._own is not None:
            return  # this build's own workers stop with it, before its files are removed
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                busy = self.client.run(_running, keys)
            except Exception:  # a worker gone or unreachable runs nothing of ours
                return
            if not any(busy.values()):
                return
            time.sleep(0.02)

    def close(self) -> None:
        if self._own is not None:
            own, self._own = self._own, None
            self.client.close()
            own.close()


def _running(keys: list, dask_worker=None) -> list:
    """Those of the keys this worker still executes (a cancelled task's thread runs to its end)."""
    tasks = dask_worker.state.tasks
    return [k for k in keys if k in tasks and tasks[k].state in ("executing", "long-running", "cancelled", "resumed")]


def runner(client=None, workers: int | None = None, memory_limit: int | None = None):
    if client is None and not workers:
        return InProcess()
    return OnDask(client, workers, memory_limit)


def build_sharded(catalog, out_dir, schema, spec, shards: int | None, run, memory_limit: int | None,
                  progress: Progress, overwrite: bool, timer, slack: float = None, source=None):
    """The index of `catalog` built in shards by `run` (InProcess or OnDask) into out_dir. source: the catalog
    opened (open_catalog: every file's columns and types checked, as the single-process read does)."""
    source = open_catalog(catalog, schema) if source is None else source
    total = source.num_rows
    if total == 0:
        from ...errors import CatalogError
        raise CatalogError(f"{catalog}: the catalog has no rows")
    files = [str(f) for f in source.files]
    timer.lap("plan")
    with ArtifactWriter(out_dir, fmt.FORMAT_NAME, fmt.FORMAT_VERSION, overwrite=overwrite) as w:
        stage = w.staging / "shards"
        stage.mkdir()
        try:
            folders = source.partition_types
            split = run.map(split_file, [(str(catalog), files, i, schema, str(stage), folders)
                                         for i in range(len(files))], progress, "split")
            timer.lap("split")
            n_attrs = len(schema.bitmask) + len(schema.bloom)
            dictionaries, remaps = merge_dictionaries(split, n_attrs)
            save_dictionaries(stage, dictionaries, remaps)
            tokens = np.sum([r["tokens"] for r in split], axis=0)
            n = shards or shard_count(total, run.workers, memory_limit)
            hot = hot_tokens(tokens, n, schema.sid_length)
            bounds = shard_keys(tokens, second_token_rows(stage, len(files), hot, schema.vocab), n)
            starts = source.starts
            metas = run.map(build_shard, [(str(stage), s, bounds[s], bounds[s + 1], starts, schema)
                                          for s in range(len(bounds) - 1)], progress, "shards")
            timer.lap("shards")
            probe = Catalog(str(catalog), np.zeros(0, np.int64), np.zeros((0, schema.sid_length), np.int32),
                            [StringLists(np.zeros(1, np.int64), np.zeros(0, np.int32), d) for d in dictionaries], [])
            layout, _, rl = resolve_layout(probe, schema)
            parts = assemble(stage, metas, schema, rl, dictionaries, source, w)
            shutil.rmtree(stage)
            timer.lap("assemble")
            build = {"mode": "sharded", "shards": len(metas), "workers": run.workers, "scheduler": run.address,
                     "prefix_bounds": [[int(b) // schema.vocab, int(b) % schema.vocab] for b in bounds],
                     "files": len(files)}
            write_index(w, catalog, schema, layout, rl, parts["trie"], parts["matchers"], parts["tables"],
                        parts["level_stats"], parts["ad_level"], parts["ads"], parts["ad_lists"], timer, progress,
                        build, slack)
        except BaseException:
            run.close()  # this build's own workers stop before the files they write are removed
            shutil.rmtree(stage, ignore_errors=True)
            raise
