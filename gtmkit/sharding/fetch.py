"""A task's {"meta", "piece"} result brought from the Dask worker that holds it onto the driver's disk: its meta
first, then its piece's arrays in blocks of rows of at most BLOCK bytes, each cut off the result on that worker by a
small task, fetched, written and released, so the driver holds one block at a time whatever a shard's size."""

from __future__ import annotations

import os

import numpy as np

from ..artifact.writes import make_dir, npy_header, writing
from .pieces import InMemory, Stored, land

BLOCK = 1 << 26  # bytes of one fetch: the driver's memory for a shard's piece, whatever its size
AHEAD = 2  # blocks asked for before the one being written is done: the next crosses the network meanwhile


def outline(result: dict) -> tuple:
    """Task: (meta, [(name, shape, dtype)] of a piece in memory, None), or (meta, None, the piece) of a staged one
    (a small object naming its files)."""
    piece = result["piece"]
    if isinstance(piece, InMemory):
        arrays = [(n, piece.get(n).shape, piece.get(n).dtype) for n in piece.names()]
        return result["meta"], arrays, None
    return result["meta"], None, piece


def rows_of(result: dict, name: str, a: int, b: int) -> np.ndarray:
    """Task: rows a..b-1 of one array of the piece (run where the result lies; a 0-d array whole)."""
    x = result["piece"].get(name)
    return x if x.ndim == 0 else x[a:b]


def _blocks(arrays: list) -> list:
    """(name, a, b) of every block, array by array, each at most BLOCK bytes (one row at least)."""
    out = []
    for name, shape, dtype in arrays:
        n = shape[0] if shape else 1
        row = max(1, int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize)
        step = max(1, BLOCK // row)
        out += [(name, a, min(n, a + step)) for a in range(0, n, step)] or [(name, 0, 0)]
    return out


def land_remote(run, future, folder, phase: str) -> tuple:
    """(meta, the piece of the task `future` as local files in folder); run: the OnDask runner holding it. The small
    tasks run on the worker holding the result (Dask would place many small tasks of one large input anywhere, as
    it places a graph's first tasks, and move the whole result to them)."""
    where = run.holder(future)
    meta, arrays, staged = run.value(run.later(outline, future, phase=f"{phase}-meta", where=where), phase)
    if staged is not None:
        return meta, land(staged, folder)
    make_dir(folder)
    todo = _blocks(arrays)
    asked, f = [], None
    shapes = {name: (shape, dtype) for name, shape, dtype in arrays}
    try:
        for k, (name, a, b) in enumerate(todo):
            while len(asked) <= min(k + AHEAD, len(todo) - 1):
                asked.append(run.later(rows_of, future, *todo[len(asked)], phase=f"{phase}-rows", where=where))
            if a == 0:  # an array's first block: its file begins
                if f is not None:
                    with writing(f.name):  # the close flushes the last bytes: a full disk may show here
                        f.close()
                shape, dtype = shapes[name]
                f = _open(os.path.join(folder, f"{name}.npy"), shape, dtype)
            block = run.value(asked[k], phase)
            asked[k].release()  # this block leaves the scheduler's books; the driver drops it once written
            with writing(f.name):
                f.write(np.ascontiguousarray(block).data)
            del block
    finally:
        if f is not None and not f.closed:
            with writing(f.name):
                f.close()
        run.release(asked)
    return meta, Stored(str(folder), [name for name, _, _ in arrays])


def _open(path: str, shape, dtype):
    head = npy_header(dtype, shape)
    with writing(path, len(head) + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize):
        f = open(path, "wb")
        f.write(head)
    return f
