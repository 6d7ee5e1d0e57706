"""Generic on-disk artifact: versions of .npy arrays and .parquet tables plus a checksummed manifest.json,
behind an atomically replaced pointer (layout.py); every member is opened at load, memory-mapped, and
checked against format name/version."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import itertools
import json
import os
import pathlib
import re
import stat
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gtmkit._version import __version__
from gtmkit.errors import ArtifactError
from gtmkit.progress import Progress, report

from . import npy, remote
from .digest import DIGEST, DIGEST_SINCE, _why, digest_problems as _digest_problems, manifest_digest  # noqa: F401
from .layout import acquire, current, fsync_dir as _fsync_dir
from .locks import Lock
from .staging import Staging, _switches
from .writes import WriteError, as_write_error, blocks as _c_order_blocks, is_file_error, npy_header, writing

MANIFEST = "manifest.json"
CHUNK = 16 * 1024 * 1024
_NAME = re.compile(r"[A-Za-z0-9_]+")
_RESERVED = ("format", "format_version", "gtmkit_version", "created", "files", DIGEST)


def file_sha256(path, progress: Progress = None, chunk: int = CHUNK) -> str:
    """Hex sha256 of a file, streamed in ``chunk``-byte pieces; reports ``(done, file_size, "sha256")``."""
    h, done = hashlib.sha256(), 0
    total = os.path.getsize(path)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
            done += len(block)
            report(progress, done, total, "sha256")
    return h.hexdigest()


def _json_default(obj):
    if isinstance(obj, (np.generic, np.ndarray)):  # callers naturally put numpy counts/stats in manifests
        return obj.tolist()
    raise TypeError(f"manifest value of type {type(obj).__name__} is not JSON-serialisable")


class ArtifactWriter:
    """Write a new version of an artifact atomically.

    with ArtifactWriter(out_dir, format_name, format_version, overwrite=False) as w:
        w.add_array("node_offsets", arr); w.add_table("bloom_dict_location", table); w.commit(manifest_dict)

    Files go into a staging directory inside out_dir that commit() renames to a new version and makes
    current; indexes still holding the previous version keep reading it, and it is deleted by the first
    write after they close it. If the with-block raises or commit() is never called, the staging directory
    is removed and out_dir serves what it served. out_dir must be new, empty or a gtmkit artifact (which is
    an ArtifactError unless overwrite=True); anything else is refused before anything is written (see
    output.check_output). Names are unique ``[A-Za-z0-9_]+`` across arrays and tables.

    An OSError that ends the with-block (a full disk, a quota, in a member, the manifest or a build's working
    files in the staging directory) comes out as one WriteError line naming the path and the file, with about the
    bytes needed (at least what expect() was told) and the bytes free once the staging directory is removed.
    """

    def __init__(self, out_dir, format_name: str, format_version: int, overwrite: bool = False):
        self.format_name, self.format_version, self.overwrite = format_name, int(format_version), overwrite
        self._url = self._local = None
        if remote.is_url(out_dir):  # built in a local folder, then uploaded by commit() (remote.py)
            self._url = remote.check_remote_output(out_dir, overwrite)
            self._switches = _switches(self._url)
            self._local = remote.upload_dir()
            try:
                self._stage = Staging(self._local, overwrite=True)
            except BaseException:
                remote.remove_local(self._local)
                raise
            self.out_dir, self._tmp = self._url, self._stage.dir
        else:
            self._stage = Staging(out_dir, overwrite)
            self.out_dir, self._tmp = self._stage.root, self._stage.dir
        self._files: dict[str, dict] = {}
        self._committed = False
        self._expected = 0

    def __enter__(self) -> "ArtifactWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.abort()
        if is_file_error(exc) and not (isinstance(exc, WriteError) and exc.root is not None):
            # said once the staging directory is gone, so the bytes free are what the user has to work with
            raise as_write_error(exc, self._tmp).at(self._stage.root, self._expected) from None

    def expect(self, nbytes: int) -> None:
        """Tell the writer about how many bytes its members will hold in all (those stored already included): a
        full disk is then reported as needing at least that."""
        self._expected = max(self._expected, int(nbytes))

    def expect_arrays(self, arrays: dict) -> None:
        """expect() the bytes of these arrays (name: array), those stored already as stored."""
        done = sum(e["bytes"] for e in self._files.values() if e is not None)
        self.expect(done + sum(int(np.asarray(a).nbytes) + 128 for n, a in arrays.items() if n not in self._files))

    @property
    def staging(self) -> pathlib.Path:
        """The private directory the version is written in: removed with it on an abort, so a build may keep
        its working files there (and must remove them before commit())."""
        return self._tmp

    def abort(self) -> None:
        """Remove the staging directory unless commit() succeeded (idempotent; called by ``with``)."""
        if not self._committed:
            self._stage.abort()
        if self._local is not None:
            remote.remove_local(self._local)
            self._local = None

    def _claim(self, name: str, suffix: str) -> pathlib.Path:
        if self._committed or not self._tmp.is_dir():
            raise ArtifactError(f"{self.out_dir}: writer already committed or aborted")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ArtifactError(f"{self.out_dir}: invalid artifact member name {name!r} (need [A-Za-z0-9_]+)")
        if name in self._files:
            raise ArtifactError(f"{self.out_dir}: duplicate artifact member name {name!r}")
        return self._tmp / f"{name}{suffix}"

    def add_array(self, name: str, array: np.ndarray) -> None:
        """Store ``array`` as ``<name>.npy`` (C order), hashing the bytes as they are written."""
        array = np.asanyarray(array)
        if array.dtype.hasobject or array.dtype.fields is not None:
            # Object arrays cannot be memory-mapped; structured dtypes would need a lossy manifest spelling.
            raise ArtifactError(f"{self.out_dir}: array {name!r} has unsupported dtype {array.dtype}")
        path = self._claim(name, ".npy")
        header = npy_header(array.dtype, array.shape)
        h = hashlib.sha256()
        with writing(path, len(header) + array.nbytes), open(path, "wb") as f:
            for block in itertools.chain([header], _c_order_blocks(array)):
                h.update(block)
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        self._files[name] = {"file": path.name, "kind": "array", "dtype": array.dtype.str,
                             "shape": list(array.shape), "bytes": path.stat().st_size, "sha256": h.hexdigest()}

    def stream_array(self, name: str, dtype, shape) -> "ArrayStream":
        """A new `<name>.npy` of this dtype and shape written front to back by .write(values) calls and stored
        by .close(): an array made in pieces without holding it or mapping it."""
        path = self._claim(name, ".npy")
        dtype = np.dtype(dtype)
        if dtype.hasobject or dtype.fields is not None:
            raise ArtifactError(f"{self.out_dir}: array {name!r} has unsupported dtype {dtype}")
        self._files[name] = None  # claimed until closed
        return ArrayStream(self, name, path, dtype, tuple(int(x) for x in np.atleast_1d(shape)))

    def has(self, name: str) -> bool:
        return name in self._files

    def entry(self, name: str) -> dict:
        """The manifest entry of a member already stored (dtype, shape, bytes, sha256)."""
        return dict(self._files[name])

    def add_table(self, name: str, table: pa.Table) -> None:
        """Store a pyarrow Table as ``<name>.parquet`` (tables are small, so hashing re-reads the file)."""
        if not isinstance(table, pa.Table):
            raise ArtifactError(f"{self.out_dir}: table {name!r} is not a pyarrow.Table ({type(table).__name__})")
        path = self._claim(name, ".parquet")
        with writing(path, table.nbytes):
            pq.write_table(table, path)
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
        self._files[name] = {"file": path.name, "kind": "table", "rows": table.num_rows,
                             "bytes": path.stat().st_size, "sha256": file_sha256(path)}

    def commit(self, manifest: dict) -> pathlib.Path:
        """Write manifest.json (caller's keys plus format/format_version/gtmkit_version/created/files) and
        atomically make this the served version. Returns the artifact path."""
        clash = sorted(k for k in manifest if k in _RESERVED)
        if clash:
            raise ArtifactError(f"{self.out_dir}: manifest must not set reserved keys {clash}")
        if self._committed or not self._tmp.is_dir():
            raise ArtifactError(f"{self.out_dir}: writer already committed or aborted")
        unfinished = sorted(k for k, v in self._files.items() if v is None)
        if unfinished:
            raise ArtifactError(f"{self.out_dir}: arrays begun but not finished: {unfinished}")
        full = dict(manifest, format=self.format_name, format_version=self.format_version,
                    gtmkit_version=__version__, files=self._files,
                    created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        # digest the manifest as a reader will parse it, so numpy values and float spellings cannot differ
        full = json.loads(json.dumps(full, allow_nan=False, default=_json_default))
        full[DIGEST] = manifest_digest(full)
        text = json.dumps(full, sort_keys=True, indent=1, allow_nan=False) + "\n"
        with writing(self._tmp / MANIFEST, len(text)), open(self._tmp / MANIFEST, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(self._tmp)
        if self._url is None:
            self._stage.publish()
            self._committed = True
            return self.out_dir
        version = self._stage.publish()  # in the local folder; then members, manifest, pointer into the store
        remote.publish(self._url, version, self.overwrite, self._switches)
        self._committed = True
        remote.adopt(self._url, version)  # loading it next downloads nothing
        self.abort()
        return self.out_dir


class ArrayStream:
    """ArtifactWriter.stream_array's writer: values in C order, hashed as they are written."""

    def __init__(self, writer: ArtifactWriter, name: str, path: pathlib.Path, dtype: np.dtype, shape: tuple):
        self.writer, self.name, self.path, self.dtype, self.shape = writer, name, path, dtype, shape
        header = npy_header(dtype, shape)
        self.left = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.size = len(header) + self.left
        self._hash = hashlib.sha256()
        with writing(path, self.size):
            self._file = open(path, "wb")
        self._put(header)

    def _put(self, block) -> None:
        self._hash.update(block)
        with self._writing():
            self._file.write(block)

    @contextlib.contextmanager
    def _writing(self):
        try:
            with writing(self.path, self.size):
                yield
        except WriteError:
            self._file.close()  # the stream is dead: its file goes with the staging directory
            raise

    def write(self, values) -> None:
        values = np.ascontiguousarray(values, self.dtype)
        if values.nbytes > self.left:
            raise ArtifactError(f"{self.writer.out_dir}: array {self.name!r}: more values written than its shape "
                                f"{list(self.shape)} holds")
        self.left -= values.nbytes
        for block in _c_order_blocks(values):
            self._put(block)

    def close(self) -> None:
        if self.left:
            raise ArtifactError(f"{self.writer.out_dir}: array {self.name!r}: {self.left} bytes short of its shape")
        with self._writing():
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        self.writer._files[self.name] = {"file": self.path.name, "kind": "array", "dtype": self.dtype.str,
                                         "shape": list(self.shape), "bytes": self.path.stat().st_size,
                                         "sha256": self._hash.hexdigest()}


def read_manifest(path) -> dict:
    """Read only ``<path>/manifest.json`` (cheap). ArtifactError if path is not a directory, has no manifest,
    or the manifest is not a JSON object."""
    path = pathlib.Path(path)
    if not path.is_dir():
        raise ArtifactError(f"{path}: {'not a directory' if path.exists() else 'no such artifact directory'}")
    mpath = path / MANIFEST
    if mpath.is_symlink():
        raise ArtifactError(f"{mpath}: is a symbolic link (an artifact's files must be regular files inside it)")
    if not mpath.is_file():
        raise ArtifactError(f"{path}: not a gtmkit artifact (no {MANIFEST})")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ArtifactError(f"{mpath}: invalid manifest ({_why(e)})") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{mpath}: invalid manifest (not a JSON object)")
    return manifest


def _npy_header(fpath: pathlib.Path):
    with open(fpath, "rb") as f:
        h = npy.read_header(f)
    if h.version == (3, 0):  # ArtifactWriter always writes 1.0; 2.0 only appears for huge headers
        raise npy.NpyError("unsupported .npy version 3.0")
    return h.shape, h.fortran_order, h.dtype, h.offset


def _problems(path, format_name: str, supported_versions, verify: bool, progress: Progress) -> Iterator[str]:
    """Yield problem messages lazily, phase by phase, so open_artifact can stop at the first one."""
    path = pathlib.Path(path)
    try:
        manifest = read_manifest(path)
    except ArtifactError as e:
        yield str(e)
        return
    if manifest.get("format") != format_name:
        yield f'{path}: not a {format_name} artifact (format "{manifest.get("format")}")'
        return
    supported = sorted(int(v) for v in supported_versions)
    version = manifest.get("format_version")
    if type(version) is not int or version not in supported:  # JSON true/1.0 must not pass as version 1
        yield (f"{path}: unsupported {format_name} format version {version!r} "
               f"(this gtmkit {__version__} reads versions {', '.join(map(str, supported))})")
        return
    files = manifest.get("files")
    if not isinstance(files, dict):
        yield f"{path / MANIFEST}: invalid manifest (no 'files' object)"
        return
    ok = []
    for name, e in sorted(files.items()):  # phase 1: entries sane, files present with the recorded size
        fname = e.get("file") if isinstance(e, dict) else None
        if (not isinstance(fname, str) or "\0" in fname  # (no file has a NUL in its name; os calls raise on it)
                or pathlib.PurePath(fname).name != fname or fname.startswith(".")
                or e.get("kind") not in ("array", "table") or not isinstance(e.get("bytes"), int)
                or not isinstance(e.get("sha256"), str)):
            yield f"{path / MANIFEST}: invalid entry for file {name!r}"
            continue
        fpath = path / fname
        try:
            st = fpath.lstat()
        except OSError:
            yield f"{fpath}: missing"
            continue
        if not stat.S_ISREG(st.st_mode):  # a link could point anywhere, a FIFO would block a reader
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            yield f"{fpath}: is {kind} (an artifact's files must be regular files inside it)"
            continue
        size = st.st_size
        if size < e["bytes"]:
            yield f"{fpath}: truncated ({size} of {e['bytes']} bytes)"
        elif size > e["bytes"]:
            yield f"{fpath}: has {size} bytes, manifest says {e['bytes']}"
        else:
            ok.append((name, e, fpath))
    checked = []
    for name, e, fpath in ok:  # phase 2: .npy headers agree with the manifest and the file size
        if e["kind"] == "array":
            try:
                shape, fortran, dtype, offset = _npy_header(fpath)
            except Exception as exc:  # one line, whatever the bytes are
                yield f"{fpath}: unreadable .npy header ({exc if isinstance(exc, npy.NpyError) else _why(exc)})"
                continue
            if fortran or dtype.str != e.get("dtype") or list(shape) != e.get("shape"):
                yield (f"{fpath}: header says dtype {dtype.str} shape {list(shape)}"
                       f"{' (Fortran order)' if fortran else ''}, manifest says dtype {e.get('dtype')} "
                       f"shape {e.get('shape')}")
                continue
            if offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != e["bytes"]:
                yield f"{fpath}: data size does not match header dtype {dtype.str} shape {list(shape)}"
                continue
        checked.append((name, e, fpath))
    yield from _digest_problems(path, manifest, version)
    if not verify:
        return
    total, base = sum(e["bytes"] for _, e, _ in checked), 0
    report(progress, 0, total, "verify")
    for name, e, fpath in checked:  # phase 3: checksums, the only phase that reads whole files
        try:
            digest = file_sha256(fpath, lambda d, t, p, b=base: report(progress, b + d, total, "verify"))
        except OSError as exc:
            yield f"{fpath}: unreadable ({_why(exc)})"
            continue
        finally:
            base += e["bytes"]
        if digest != e["sha256"]:
            yield f"{fpath}: checksum mismatch, file is corrupt (sha256 {digest[:12]}..., want {e['sha256'][:12]}...)"


class Artifact:
    """An opened, validated version of an artifact: ``.path`` (the artifact path), ``.dir`` (the version's
    directory; ``.path`` itself for the flat layout), ``.manifest``, ``.array(name)`` (read-only memmap when
    opened with mmap=True, else loaded into memory), ``.table(name)`` (pyarrow.Table), ``.names`` (array
    names), ``.table_names``, ``.nbytes`` (total bytes of all member files).

    Every member is opened here, so nothing is read by path later and a rebuild of the path never mixes
    in. ``lock`` (held shared from before the manifest was read) keeps the version from being deleted
    until close(), ``with`` exit or garbage collection; arrays taken before stay readable after it."""

    def __init__(self, path, manifest: dict, mmap: bool = True, directory=None, lock: Lock | None = None):
        self.path = path if remote.is_url(path) else pathlib.Path(path)  # a URL stays the URL it was loaded from
        self.manifest, self.mmap = manifest, mmap
        self.dir = pathlib.Path(directory) if directory is not None else self.path
        self._lock = lock
        self._cache: dict[str, object] = {}
        for name, e in sorted(manifest["files"].items()):
            fpath = self.dir / e["file"]
            try:
                if e["kind"] == "array":  # not np.load: its header parse fails when threads load at once
                    self._cache[name] = npy.load(fpath, "r" if mmap else None)
                else:
                    self._cache[name] = pq.read_table(fpath, memory_map=mmap)
            except Exception as exc:  # keep the one-line error contract
                raise ArtifactError(f"{fpath}: cannot load {e['kind']} ({_why(exc)})") from None

    def close(self) -> None:
        """Release the version (idempotent): the next write of the path may delete its files."""
        if self._lock is not None:
            self._lock.close()

    @property
    def closed(self) -> bool:
        return self._lock is None or self._lock.fd < 0

    def __enter__(self) -> "Artifact":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _entry(self, name: str, kind: str) -> dict:
        e = self.manifest["files"].get(name)
        if e is None or e["kind"] != kind:
            raise ArtifactError(f"{self.path}: no {kind} named {name!r}")
        return e

    @property
    def names(self) -> list[str]:
        return sorted(n for n, e in self.manifest["files"].items() if e["kind"] == "array")

    @property
    def table_names(self) -> list[str]:
        return sorted(n for n, e in self.manifest["files"].items() if e["kind"] == "table")

    @property
    def nbytes(self) -> int:
        return sum(e["bytes"] for e in self.manifest["files"].values())

    def array(self, name: str) -> np.ndarray:
        self._entry(name, "array")
        return self._cache[name]

    def private_array(self, name: str) -> np.ndarray:
        """A writable copy-on-write map of an array (only the pages written are copied, privately): what an
        update derives an array from. The file is this version's own, which is never modified and stays while
        the version is held, so mapping it again reads what the load checked."""
        e = self._entry(name, "array")
        if not self.mmap:
            return np.array(self._cache[name])
        try:
            return npy.load(self.dir / e["file"], "c")
        except Exception as exc:
            raise ArtifactError(f"{self.dir / e['file']}: cannot map ({_why(exc)})") from None

    def table(self, name: str) -> pa.Table:
        self._entry(name, "table")
        return self._cache[name]


def _artifact_path(path):
    """A path the file system can be asked about: a str, bytes or os.PathLike without NUL bytes."""
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        raise ArtifactError(f"an artifact path must be a str or os.PathLike, got {type(path).__name__}") from None
    if "\0" in text:
        raise ArtifactError(f"{text!r}: an artifact path cannot hold a NUL byte")
    return path


def local_root(path, cache=None):
    """The local artifact path to open for `path`: itself, or for an object-store URL its cache folder holding the
    version the URL serves, downloaded and checked on arrival unless there already (remote.fetch)."""
    if remote.is_url(path):
        return remote.fetch(path, cache)
    return _artifact_path(path)


def open_artifact(path, format_name: str, supported_versions: Iterable[int], verify: bool = True,
                  mmap: bool = True, progress: Progress = None, cache=None) -> Artifact:
    """Validate and open the version an artifact path serves; raise ArtifactError (one line, naming
    path/file) on the first problem: manifest present and valid, format name, format version, files present
    with recorded sizes (truncation reported), .npy headers matching the manifest, and with verify=True the
    sha256 of every file (progress ``(bytes_done, bytes_total, "verify")``). An object-store URL is read through
    the local cache folder `cache` (default: remote.default_cache()); ``.path`` stays the URL."""
    vdir, lock = acquire(local_root(path, cache))
    try:
        for problem in _problems(vdir, format_name, supported_versions, verify, progress):
            raise ArtifactError(problem)
        return Artifact(remote.normalize(path) if remote.is_url(path) else path, read_manifest(vdir), mmap=mmap,
                        directory=vdir, lock=lock)
    except BaseException:
        if lock is not None:
            lock.close()
        raise


def verify_artifact(path, format_name: str, supported_versions: Iterable[int],
                    progress: Progress = None, cache=None) -> list[str]:
    """Run every check of open_artifact(verify=True) on the version served, collecting all problems;
    [] means the artifact is sound."""
    vdir, lock = acquire(local_root(path, cache))
    try:
        return list(_problems(vdir, format_name, supported_versions, True, progress))
    finally:
        if lock is not None:
            lock.close()


def manifest_path(path) -> pathlib.Path:
    """The manifest.json of the version an artifact path serves (for a cheap peek at its keys)."""
    return current(pathlib.Path(local_root(path))) / MANIFEST
