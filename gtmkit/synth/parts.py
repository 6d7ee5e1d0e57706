"""Synthetic inputs written as datasets: directories of Parquet parts, written by several processes at once.

A catalog's part i holds a contiguous range of its row groups, so the parts read in path order are the
single-file catalog's rows; trie keys are drawn part by part (synth/keys.py: disjoint first-token classes, so
no two parts share a key). Either way a part's bytes depend only on the arguments, not on how many processes."""

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


def _run(jobs, fn, workers: int, progress: Progress, total: int, phase: str) -> None:
    """fn over jobs, in forked processes when there are several workers (else here); fn returns units done."""
    done = 0
    if workers > 1 and len(jobs) > 1 and "fork" in multiprocessing.get_all_start_methods():
        with multiprocessing.get_context("fork").Pool(min(workers, len(jobs))) as pool:
            for n in pool.imap_unordered(fn, jobs):
                done += n
                report(progress, min(done, total), total, phase)
    else:
        for job in jobs:
            done += fn(job)
            report(progress, min(done, total), total, phase)


def _staged(path: Path, write) -> None:
    """write(folder) into a hidden folder beside path, renamed to path when it is complete."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True)
        write(tmp)
        if path.is_dir():
            path.rmdir()  # empty: check_target saw to it
        os.replace(tmp, path)
    except OSError as exc:
        raise GtmkitError(f"{path}: cannot write the parts ({exc.strerror or exc})") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_key_part(job) -> int:
    import pyarrow as pa
    from .keys import synth_keys
    i, n, parts, path, kw = job
    pq.write_table(pa.table({"key": synth_keys(n, part=i, parts=parts, **kw)}), str(path))
    return n


def write_key_parts(path, n: int, parts: int, workers: int, progress: Progress = None, **kw) -> list:
    """synth_keys as `path/part-00000.parquet`, ...: part i is synth_keys(part=i, parts=parts) with its share of
    the n keys (keys.part_sizes). Returns the part paths."""
    from .keys import part_sizes, synth_keys
    path = Path(path)
    check_target(path)
    synth_keys(1, part=0, parts=parts, **kw)  # the arguments checked here, before any process starts
    sizes = part_sizes(n, kw.get("vocab", 2_200_000), parts)
    names = [f"part-{i:05d}.parquet" for i in range(parts)]
    _staged(path, lambda tmp: _run([(i, int(m), parts, tmp / names[i], kw) for i, m in enumerate(sizes) if m],
                                   _write_key_part, workers, progress, n, "synth keys"))
    return [path / names[i] for i, m in enumerate(sizes) if m]


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
    names = [f"part-{i:05d}.parquet" for i in range(parts)]
    _GENERATION = gen
    try:
        _staged(path, lambda tmp: _run([(i, i * nb // parts, (i + 1) * nb // parts, tmp / names[i])
                                        for i in range(parts)], _write_part, workers, progress, nb,
                                       "synth catalog"))
    finally:
        _GENERATION = None
    return [path / name for name in names]
