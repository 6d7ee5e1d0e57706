"""A sharded build's pieces between phases: named arrays that a task returns (on Dask they move worker to worker and
spill to a worker's local disk) or keeps in a staging folder, a local path or an object-store URL (--staging).

A piece answers get(name) (the whole array) and rows(name, a, b) (rows a..b-1 of it, reading only those where it
is stored); a Writer takes a task's arrays one at a time and gives its piece."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from ..artifact.npy import load as load_npy, read_header
from ..artifact.writes import blocks, make_dir, npy_header, save_npy, writing
from ..errors import GtmkitError
from ..inputs.stores import is_url, locate, pa_errors
from .tasks import publish, task_dir


class InMemory:
    """A task's arrays, held as they are: the result Dask keeps on the worker that made it."""

    def __init__(self, arrays: dict):
        self.arrays = arrays

    def __sizeof__(self) -> int:
        # what Dask counts for the result (sys.getsizeof): its arrays' bytes, so that the scheduler runs a task where
        # its piece lies rather than moving the piece, and a worker spills what it really holds
        return object.__sizeof__(self) + sum(int(np.asarray(a).nbytes) for a in self.arrays.values())

    def get(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def rows(self, name: str, a: int, b: int) -> np.ndarray:
        return self.arrays[name][a:b]

    def names(self) -> list:
        return list(self.arrays)


class Stored:
    """A piece kept as one .npy file an array in the folder `root` (a local path or a URL)."""

    def __init__(self, root: str, names: list):
        self.root, self._names = root, list(names)

    def names(self) -> list:
        return list(self._names)

    def path(self, name: str) -> str:
        return f"{self.root}/{name}.npy"

    def get(self, name: str) -> np.ndarray:
        if not is_url(self.root):
            return load_npy(self.path(name), "r")
        with _open(self.path(name)) as f:
            h = read_header(f)
            return _array(f.read(h.nbytes), h, h.shape)

    def rows(self, name: str, a: int, b: int) -> np.ndarray:
        if not is_url(self.root):
            return load_npy(self.path(name), "r")[a:b]
        with _open(self.path(name)) as f:
            h = read_header(f)
            row = int(np.prod(h.shape[1:], dtype=np.int64)) * h.dtype.itemsize
            return _array(f.read_at((b - a) * row, h.offset + a * row), h, (b - a,) + tuple(h.shape[1:]))


def _array(data: bytes, h, shape) -> np.ndarray:
    # frombuffer of bytes is read-only, as a mapped local piece is
    return np.frombuffer(data, h.dtype).reshape(shape)


def _open(url: str):
    fs, inner = locate(url, GtmkitError)
    try:
        return fs.open_input_file(inner)
    except pa_errors() as exc:
        raise GtmkitError(f"{url}: cannot read a staged piece ({str(exc).splitlines()[0]})") from None


class Writer:
    """Where a task puts its arrays: kept in memory (staging None) or written at once, one file an array, into
    staging/name (a local folder made under a fresh name, then renamed: a task run again after its worker died
    replaces what the first run left; an object store's objects are replaced whole)."""

    def __init__(self, staging: str | None, name: str):
        self.final = None if staging is None else f"{staging}/{name}"
        self.arrays, self.names = {}, []
        self.nbytes = 0  # the piece's bytes
        self.tmp = None
        if self.final is not None and not is_url(self.final):
            self.tmp = task_dir(Path(self.final))

    def save(self, name: str, array) -> None:
        array = np.asarray(array)
        self.nbytes += array.nbytes
        if self.final is None:
            # a contiguous copy only where it is a view: a view would keep its whole base alive in the result
            self.arrays[name] = array if array.base is None else np.ascontiguousarray(array).copy()
        elif self.tmp is not None:
            save_npy(self.tmp / f"{name}.npy", array)
        else:
            _put(f"{self.final}/{name}.npy", array)
        self.names.append(name)

    def done(self):
        if self.final is None:
            return InMemory(self.arrays)
        if self.tmp is not None:
            publish(self.tmp, Path(self.final))
        return Stored(self.final, self.names)


def _put(url: str, array: np.ndarray) -> None:
    fs, inner = locate(url, GtmkitError)
    try:
        with fs.open_output_stream(inner) as f:
            f.write(npy_header(array.dtype, array.shape))
            for block in blocks(np.ascontiguousarray(array)):
                f.write(block)
    except pa_errors() as exc:
        raise GtmkitError(f"{url}: cannot write a staged piece ({str(exc).splitlines()[0]})") from None


def land(piece, folder) -> Stored:
    """piece as local files in folder (made here) for the assembler to map: a piece in memory or in an object
    store is written or copied, one array at a time; a local one stays where it is."""
    if isinstance(piece, Stored) and not is_url(piece.root):
        return piece
    make_dir(folder)
    for name in piece.names():
        if isinstance(piece, InMemory):
            save_npy(os.path.join(folder, f"{name}.npy"), piece.get(name))
        else:
            _download(piece.path(name), os.path.join(folder, f"{name}.npy"))
    return Stored(str(folder), piece.names())


def _download(url: str, path: str) -> None:
    with writing(path), _open(url) as src, open(path, "wb") as dst:
        while True:
            block = src.read(1 << 24)
            if not block:
                break
            dst.write(block)


class Staging:
    """A build's own folder under the --staging location (a local path or URL), removed when the build ends."""

    def __init__(self, where: str):
        where = str(where).rstrip("/")
        if not is_url(where):
            where = os.path.realpath(os.path.expanduser(where))
        self.root = f"{where}/gtmkit-staging-{uuid.uuid4().hex[:12]}"
        self.url = is_url(where)
        if self.url:
            fs, inner = locate(self.root, GtmkitError)
            try:
                fs.create_dir(inner)
            except pa_errors() as exc:
                raise GtmkitError(f"--staging {where}: cannot write there ({str(exc).splitlines()[0]})") from None
        else:
            try:
                os.makedirs(self.root)
            except OSError as exc:
                raise GtmkitError(f"--staging {where}: cannot write there ({exc.strerror or exc})") from None

    def remove(self) -> None:
        if not self.url:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        try:
            fs, inner = locate(self.root, GtmkitError)
            fs.delete_dir(inner)
        except (GtmkitError,) + pa_errors():  # best effort: the build's own error, if any, is the line
            pass
