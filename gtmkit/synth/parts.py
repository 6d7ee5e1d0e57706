"""Synthetic inputs written as datasets: a new directory of Parquet parts, written by several processes at
once (forked, so that they share what the parent drew; where fork is missing, one process). The part writers
live with what they write (synth/catalog.py, synth/keys.py); each part's bytes depend only on its arguments,
never on how many processes wrote them."""

from __future__ import annotations

import multiprocessing
import os
import shutil
from pathlib import Path

from ..errors import GtmkitError
from ..progress import Progress, report


def check_target(path: Path) -> None:
    """Parts go to a new or empty directory: refused before anything is drawn."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise GtmkitError(f"{path}: exists and is not an empty directory; a dataset of parts needs a new one")


def _call(job) -> int:
    fn, file, args = job
    return fn(file, *args)


def write_parts(path, fn, jobs: list, workers: int, progress: Progress, total: int, phase: str) -> list:
    """fn(file, *args) for each args of jobs, writing `path/part-00000.parquet`, ... and returning units done
    (reported against `total`); with `workers` processes. The parts appear together: they are written in a
    hidden folder beside path, then renamed. fn must be a module-level function (workers take it by name).
    Returns the part paths."""
    path = Path(path)
    check_target(path)
    names = [f"part-{i:05d}.parquet" for i in range(len(jobs))]
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True)
        work = [(fn, tmp / name, args) for name, args in zip(names, jobs)]
        done = 0
        if workers > 1 and len(work) > 1 and "fork" in multiprocessing.get_all_start_methods():
            with multiprocessing.get_context("fork").Pool(min(workers, len(work))) as pool:
                for n in pool.imap_unordered(_call, work):
                    done += n
                    report(progress, min(done, total), total, phase)
        else:
            for job in work:
                done += _call(job)
                report(progress, min(done, total), total, phase)
        if path.is_dir():
            path.rmdir()  # empty: check_target saw to it
        os.replace(tmp, path)
    except OSError as exc:
        raise GtmkitError(f"{path}: cannot write the parts ({exc.strerror or exc})") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return [path / name for name in names]
