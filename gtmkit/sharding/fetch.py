"""A task's {"meta", "piece"} result brought from the Dask worker that holds it onto the driver's disk: its meta
first, then its piece's arrays one at a time, each split off the result on that worker by a small task, fetched,
written and released, so the driver never holds more than a few of one shard's arrays at once."""

from __future__ import annotations

import os

from ..artifact.writes import make_dir, save_npy
from .pieces import InMemory, Stored, land

AHEAD = 2  # arrays asked for before the one being written is done: the next crosses the network meanwhile


def outline(result: dict) -> tuple:
    """Task: (meta, the piece's array names, None) of a piece in memory, or (meta, None, the piece) of a staged one
    (a small object naming its files)."""
    piece = result["piece"]
    if isinstance(piece, InMemory):
        return result["meta"], piece.names(), None
    return result["meta"], None, piece


def array_of(result: dict, name: str):
    """Task: one array of the piece (run where the result lies: a reference, no copy)."""
    return result["piece"].get(name)


def land_remote(run, future, folder, phase: str) -> tuple:
    """(meta, the piece of the task `future` as local files in folder); run: the OnDask runner holding it."""
    meta, names, staged = run.value(run.later(outline, future, phase=f"{phase}-meta"), phase)
    if staged is not None:
        return meta, land(staged, folder)
    make_dir(folder)
    asked = []
    try:
        for k, name in enumerate(names):
            while len(asked) <= min(k + AHEAD, len(names) - 1):
                asked.append(run.later(array_of, future, names[len(asked)], phase=f"{phase}-array"))
            save_npy(os.path.join(folder, f"{name}.npy"), run.value(asked[k], phase))
            asked[k].release()  # this array leaves the driver (and the scheduler's books) before the next comes
    finally:
        run.release(asked)
    return meta, Stored(str(folder), names)
