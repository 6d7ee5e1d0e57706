"""A synthetic catalog written as a dataset: a directory of Parquet parts, written by several processes at
once. Part i holds a contiguous range of the catalog's row groups, so the parts read in path order are the
single-file catalog's rows, and each part's bytes depend only on the arguments (not on how many processes)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from ..errors import GtmkitError
from ..progress import Progress, report
from .world import ROWS_PER_GROUP

_GENERATION = None  # the parent's generation, which forked workers inherit instead of redrawing it


def _write_part(job) -> int:
    from .catalog import _PARQUET_OPTIONS, ARROW_SCHEMA
    i, lo, hi, path = job
    with pq.ParquetWriter(str(path), ARROW_SCHEMA, **_PARQUET_OPTIONS) as writer:
        for b in range(lo, hi):
            writer.write_table(_GENERATION.batch(b), row_group_size=ROWS_PER_GROUP)
    return hi - lo


def check_target(path: Path) -> None:
    """A catalog of parts goes to a new or empty directory: refused before anything is drawn."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise GtmkitError(f"{path}: exists and is not an empty directory; a catalog of parts needs a new one")


def write_parts(path, gen, parts: int, workers: int, progress: Progress = None) -> list:
    """Write gen's row groups as `path/part-00000.parquet`, ... (at most one part a row group) with `workers`
    processes (forked: they share gen's arrays; where fork is missing, one process). path must be new or an
    empty directory; the parts appear there together (written in a hidden folder beside it, then renamed).
    Returns the part paths."""
    global _GENERATION
    path = Path(path)
    check_target(path)
    if gen.plan.rates.sid_coherence > 0.0:
        gen._leaders()  # drawn once here, before the workers fork, not once a worker
    nb = gen.n_batches
    parts = max(1, min(parts, nb))
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    jobs = [(i, i * nb // parts, (i + 1) * nb // parts, tmp / f"part-{i:05d}.parquet") for i in range(parts)]
    _GENERATION = gen
    try:
        tmp.mkdir(parents=True)
        done = 0
        if workers > 1 and parts > 1 and "fork" in multiprocessing.get_all_start_methods():
            with multiprocessing.get_context("fork").Pool(min(workers, parts)) as pool:
                for n in pool.imap_unordered(_write_part, jobs):
                    done += n
                    report(progress, min(done * ROWS_PER_GROUP, gen.plan.n_ads), gen.plan.n_ads, "synth catalog")
        else:
            for job in jobs:
                done += _write_part(job)
                report(progress, min(done * ROWS_PER_GROUP, gen.plan.n_ads), gen.plan.n_ads, "synth catalog")
        if path.is_dir():
            path.rmdir()  # empty, checked above
        os.replace(tmp, path)
    except OSError as exc:
        raise GtmkitError(f"{path}: cannot write catalog parts ({exc.strerror or exc})") from None
    finally:
        _GENERATION = None
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return [path / j[3].name for j in jobs]
