"""Writing an artifact's files: a full disk, a quota or any other OSError met while a version or its working files
are written becomes one ArtifactError line naming the artifact path, the file, about how many bytes the write
needed and how many are free (docs/format.md "Writing"), never a traceback; ArtifactWriter turns whatever OSError
ends its block into that line once its staging directory is removed.

Every writer of gtmkit's files goes through here: writing() around a write, save_npy() for a build's working
arrays (np.save's tofile reports a full disk without an errno), blocks() for the bytes of an array."""

from __future__ import annotations

import errno as errnos
import io
import os
import pathlib
import re
import shutil
from contextlib import contextmanager
from typing import Iterator

import numpy as np

from ..errors import ArtifactError

NO_SPACE = frozenset(e for e in (errnos.ENOSPC, getattr(errnos, "EDQUOT", None)) if e is not None)
CHUNK = 16 * 1024 * 1024
_STAGING = re.compile(r"\.staging-[0-9]{1,20}-[0-9a-f]{8}")  # layout.STAGING, kept here so layout may import this
_SHORT = re.compile(r"\d+ requested and \d+ written")  # numpy's tofile on a full disk: no errno, only this


def human(n: int) -> str:
    """Bytes for a person: 912 B, 3.4 kB, 65 MB, 1.2 GB (powers of 1000)."""
    x = float(max(int(n), 0))
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if x < 999.5 or unit == "TB":
            return f"{int(x)} B" if unit == "B" else f"{x:.1f} {unit}" if x < 9.95 else f"{x:.0f} {unit}"
        x /= 1000
    return f"{x:.0f} TB"


def free_bytes(path) -> int | None:
    """Bytes free to an unprivileged writer on the filesystem of path (or of its nearest existing folder)."""
    p = pathlib.Path(os.path.abspath(path))
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def staging_of(path) -> pathlib.Path | None:
    """The staging directory a file lies in (None: not inside one)."""
    for p in pathlib.Path(path).parents:
        if _STAGING.fullmatch(p.name):
            return p
    return None


def disk_bytes(st: os.stat_result) -> int:
    """Bytes a file takes on its device: whole blocks (many small working files take a block each)."""
    return max(st.st_size, getattr(st, "st_blocks", 0) * 512)


def tree_bytes(root) -> int:
    """Bytes the files under a directory take on its device (what a write had put there)."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                total += disk_bytes(os.lstat(os.path.join(dirpath, f)))
            except OSError:
                pass
    return total


def _no_space(exc: OSError) -> bool:
    return exc.errno in NO_SPACE or (exc.errno is None and bool(_SHORT.search(str(exc))))


def _why(exc: OSError) -> str:
    if exc.errno is None and _SHORT.search(str(exc)):
        return os.strerror(errnos.ENOSPC)
    if exc.errno in NO_SPACE:  # pyarrow puts its whole message in strerror
        return os.strerror(exc.errno)
    if exc.errno is not None:
        return exc.strerror or os.strerror(exc.errno)
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class WriteError(ArtifactError):
    """An OSError writing a file of an artifact, in one line. path: the file; need: about the bytes the whole write
    needed when it failed (what it had written, the file it was writing, and what it expected still to write; 0:
    unknown; estimated: it counts the size the finished version was expected to have, else it is what was
    written, a floor); no_space: the disk or a quota was full (why: the system's words for it); root: the artifact
    path; free: bytes free there after the write's files were removed (None: not measured)."""

    def __init__(self, path, need: int = 0, no_space: bool = False, why: str = "", root=None, free=None,
                 estimated: bool = False):
        self.path, self.need, self.no_space, self.why = str(path), int(need), bool(no_space), why
        self.root, self.free, self.estimated = (str(root) if root is not None else None), free, bool(estimated)
        super().__init__(self._line())

    def __reduce__(self):  # raised in a Dask worker, it travels back to the build as it is
        return type(self), (self.path, self.need, self.no_space, self.why, self.root, self.free, self.estimated)

    @classmethod
    def of(cls, exc: OSError, path, size: int = 0) -> "WriteError":
        """The OSError met writing `size` bytes to file `path`; need counts what its staging directory held then,
        but for that file's own bytes so far."""
        stage, need = staging_of(path), int(size)
        if stage is not None:
            try:
                here = disk_bytes(os.lstat(path))
            except OSError:
                here = 0
            need += max(tree_bytes(stage) - here, 0)
        return cls(path, need, _no_space(exc), _why(exc))

    def at(self, root, expected: int = 0) -> "WriteError":
        """This error said of the artifact at root, its files removed: the free bytes measured there now, the
        bytes needed at least the version's expected size."""
        return type(self)(self.path, max(self.need, int(expected)), self.no_space, self.why, root, free_bytes(root),
                          int(expected) >= self.need)

    def _line(self) -> str:
        path = pathlib.Path(self.path)
        stage = staging_of(path)
        root = self.root or (str(stage.parent) if stage is not None else str(path.parent))
        inside = stage is not None or path == pathlib.Path(root) or pathlib.Path(root) in path.parents
        what = str(path.relative_to(stage)) if stage is not None else os.path.relpath(path, root) if inside else None
        if what == ".":
            what = "the new version"
        if what is None:  # an OSError of another file (an input) stopped the write
            return f"{root}: nothing written: {path}: {self.why}"
        if not self.no_space:
            return f"{root}: cannot write {what} ({self.why})"
        sizes = [f"{'about' if self.estimated else 'at least'} {human(self.need)} needed"] if self.need else []
        if self.free is not None:
            sizes.append(f"{human(self.free)} free")
        said = (self.why or "no space left on device")
        said = said[:1].lower() + said[1:]
        return f"{root}: {said} writing {what}" + (f" ({', '.join(sizes)})" if sizes else "")


@contextmanager
def writing(path, size: int = 0):
    """Any OSError inside (the write of `size` bytes to file `path`) raised as a WriteError naming it."""
    try:
        yield
    except WriteError:
        raise
    except OSError as exc:
        raise WriteError.of(exc, path, size) from None


def is_file_error(exc: BaseException) -> bool:
    """An OSError of a file (its errno set, or numpy's short write): a lost connection or a timeout, which the
    cluster's code says in its own words, is not one."""
    if isinstance(exc, WriteError):
        return True
    return (isinstance(exc, OSError) and not isinstance(exc, (ConnectionError, TimeoutError))
            and (exc.errno is not None or bool(_SHORT.search(str(exc)))))


def as_write_error(exc: OSError, staging=None) -> WriteError:
    """A WriteError of an OSError that ended a write (its file, or else the staging directory, named)."""
    if isinstance(exc, WriteError):
        return exc
    name = exc.filename if isinstance(exc.filename, (str, os.PathLike)) else None
    return WriteError.of(exc, name if name is not None else (staging or "."))


def blocks(array: np.ndarray) -> Iterator[memoryview]:
    """The array's bytes in C order, CHUNK bytes at a time."""
    if array.size == 0:
        return
    if array.flags.c_contiguous:
        # Zero-copy slices of the array's own buffer: multi-GB arrays are never duplicated.
        flat = memoryview(array.reshape(-1).view(np.uint8))
        for i in range(0, len(flat), CHUNK):
            yield flat[i:i + CHUNK]
    else:
        # Buffered nditer copies at most ~CHUNK bytes at a time into C order.
        bufsize = max(CHUNK // max(array.itemsize, 1), 1)
        for piece in np.nditer(array, flags=["external_loop", "buffered", "zerosize_ok"],
                               buffersize=bufsize, order="C"):
            yield memoryview(np.ascontiguousarray(piece).view(np.uint8))


def npy_header(dtype, shape) -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, dict(descr=np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                      fortran_order=False, shape=tuple(shape)))
    return header.getvalue()


def save_npy(path, array) -> None:
    """np.save of a plain array (C order, .npy 1.0), each write's error a WriteError: a build's working files."""
    array = np.asanyarray(array)
    head = npy_header(array.dtype, array.shape)
    with writing(path, len(head) + array.nbytes), open(path, "wb") as f:
        f.write(head)
        for block in blocks(array):
            f.write(block)


def make_dir(path) -> None:
    """mkdir, its error a WriteError."""
    with writing(path):
        os.mkdir(path)
