"""Generic on-disk artifact: a directory of .npy arrays and .parquet tables plus a checksummed manifest.json.
Written atomically (temporary sibling + rename), opened memory-mapped, checked against format name/version."""

from __future__ import annotations

import datetime
import hashlib
import io
import itertools
import json
import os
import pathlib
import re
import shutil
import stat
import uuid
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gtmkit._version import __version__
from gtmkit.errors import ArtifactError
from gtmkit.progress import Progress, report

MANIFEST = "manifest.json"
CHUNK = 16 * 1024 * 1024
_NAME = re.compile(r"[A-Za-z0-9_]+")
DIGEST = "manifest_sha256"
DIGEST_SINCE = 2  # both gtmkit formats carry the manifest digest from version 2; version 1 never had one
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


def _fsync_dir(path: pathlib.Path) -> None:
    try:  # directories cannot be opened for fsync on Windows; the rename is still atomic there
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _why(exc: BaseException) -> str:
    """One-line description of a library exception, so no message ever spans lines."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _json_default(obj):
    if isinstance(obj, (np.generic, np.ndarray)):  # callers naturally put numpy counts/stats in manifests
        return obj.tolist()
    raise TypeError(f"manifest value of type {type(obj).__name__} is not JSON-serialisable")


def manifest_digest(manifest: dict) -> str:
    """Hex sha256 of the canonical JSON (sorted keys, no whitespace, ASCII) of every manifest field but the
    digest itself: any edit of any field changes it."""
    body = {k: v for k, v in manifest.items() if k != DIGEST}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


class ArtifactWriter:
    """Write an artifact directory atomically.

    with ArtifactWriter(out_dir, format_name, format_version, overwrite=False) as w:
        w.add_array("node_offsets", arr); w.add_table("bloom_dict_location", table); w.commit(manifest_dict)

    Files go into a temporary sibling directory (``.<name>.tmp-<random>``) that commit() renames to out_dir.
    If the with-block raises or commit() is never called, the temporary directory is removed and out_dir is
    untouched. An existing out_dir is an ArtifactError unless overwrite=True; then the old one is renamed aside
    and deleted only once the new one is in place. Names are unique ``[A-Za-z0-9_]+`` across arrays and tables.
    """

    def __init__(self, out_dir, format_name: str, format_version: int, overwrite: bool = False):
        self.out_dir = pathlib.Path(out_dir).absolute()
        self.format_name, self.format_version, self.overwrite = format_name, int(format_version), overwrite
        if self.out_dir.exists() and not overwrite:
            raise ArtifactError(f"{self.out_dir}: already exists (pass overwrite=True to replace it)")
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.out_dir.parent / f".{self.out_dir.name}.tmp-{uuid.uuid4().hex[:12]}"
        self._tmp.mkdir()
        self._files: dict[str, dict] = {}
        self._committed = False

    def __enter__(self) -> "ArtifactWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.abort()

    def abort(self) -> None:
        """Remove the temporary directory unless commit() succeeded (idempotent; called by ``with``)."""
        if not self._committed:
            shutil.rmtree(self._tmp, ignore_errors=True)

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
        header = io.BytesIO()
        descr = np.lib.format.dtype_to_descr(array.dtype)
        np.lib.format.write_array_header_1_0(header, dict(descr=descr, fortran_order=False, shape=array.shape))
        h = hashlib.sha256()
        with open(path, "wb") as f:
            for block in itertools.chain([header.getvalue()], _c_order_blocks(array)):
                h.update(block)
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        self._files[name] = {"file": path.name, "kind": "array", "dtype": array.dtype.str,
                             "shape": list(array.shape), "bytes": path.stat().st_size, "sha256": h.hexdigest()}

    def add_table(self, name: str, table: pa.Table) -> None:
        """Store a pyarrow Table as ``<name>.parquet`` (tables are small, so hashing re-reads the file)."""
        if not isinstance(table, pa.Table):
            raise ArtifactError(f"{self.out_dir}: table {name!r} is not a pyarrow.Table ({type(table).__name__})")
        path = self._claim(name, ".parquet")
        pq.write_table(table, path)
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
        self._files[name] = {"file": path.name, "kind": "table", "rows": table.num_rows,
                             "bytes": path.stat().st_size, "sha256": file_sha256(path)}

    def commit(self, manifest: dict) -> pathlib.Path:
        """Write manifest.json (caller's keys plus format/format_version/gtmkit_version/created/files) and
        atomically move the directory into place. Returns the final path."""
        clash = sorted(k for k in manifest if k in _RESERVED)
        if clash:
            raise ArtifactError(f"{self.out_dir}: manifest must not set reserved keys {clash}")
        if self._committed or not self._tmp.is_dir():
            raise ArtifactError(f"{self.out_dir}: writer already committed or aborted")
        full = dict(manifest, format=self.format_name, format_version=self.format_version,
                    gtmkit_version=__version__, files=self._files,
                    created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        # digest the manifest as a reader will parse it, so numpy values and float spellings cannot differ
        full = json.loads(json.dumps(full, allow_nan=False, default=_json_default))
        full[DIGEST] = manifest_digest(full)
        text = json.dumps(full, sort_keys=True, indent=1, allow_nan=False) + "\n"
        with open(self._tmp / MANIFEST, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(self._tmp)
        aside = None
        if self.out_dir.exists() or self.out_dir.is_symlink():
            if not self.overwrite:
                raise ArtifactError(f"{self.out_dir}: already exists (pass overwrite=True to replace it)")
            aside = self.out_dir.parent / f".{self.out_dir.name}.old-tmp-{uuid.uuid4().hex[:12]}"
            os.replace(self.out_dir, aside)
        try:
            os.replace(self._tmp, self.out_dir)
        except OSError:
            if aside is not None:  # put the previous artifact back rather than leave nothing
                os.replace(aside, self.out_dir)
            raise
        self._committed = True
        _fsync_dir(self.out_dir.parent)
        if aside is not None:
            shutil.rmtree(aside) if aside.is_dir() and not aside.is_symlink() else aside.unlink()
        return self.out_dir


def _c_order_blocks(array: np.ndarray) -> Iterator[memoryview]:
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


def _digest_problems(path: pathlib.Path, manifest: dict, version: int) -> Iterator[str]:
    """The digest must be present from DIGEST_SINCE on (deleting it is no way around it) and match."""
    digest = manifest.get(DIGEST)
    if digest is None:
        if version >= DIGEST_SINCE:
            yield f"{path / MANIFEST}: no {DIGEST} (format version {version} requires it)"
        return
    try:
        want = manifest_digest(manifest)
    except ValueError as exc:  # NaN/inf cannot be in a manifest gtmkit wrote
        yield f"{path / MANIFEST}: invalid manifest ({_why(exc)})"
        return
    if digest != want:
        yield f"{path / MANIFEST}: {DIGEST} mismatch, the manifest was edited (sha256 {want[:12]}...)"


def _npy_header(fpath: pathlib.Path):
    with open(fpath, "rb") as f:
        version = np.lib.format.read_magic(f)
        reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in reader:  # ArtifactWriter always writes 1.0; 2.0 only appears for huge headers
            raise ValueError(f"unsupported .npy version {version}")
        shape, fortran, dtype = reader[version](f)
        return shape, fortran, dtype, f.tell()


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
        if (not isinstance(fname, str) or pathlib.PurePath(fname).name != fname or fname.startswith(".")
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
            except Exception as exc:  # numpy raises ValueError/EOFError/SyntaxError on garbage headers
                yield f"{fpath}: unreadable .npy header ({_why(exc)})"
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
    """An opened, validated artifact: ``.path``, ``.manifest``, ``.array(name)`` (read-only memmap when opened
    with mmap=True, else loaded into memory), ``.table(name)`` (pyarrow.Table), ``.names`` (array names),
    ``.table_names``, ``.nbytes`` (total bytes of all member files)."""

    def __init__(self, path, manifest: dict, mmap: bool = True):
        self.path, self.manifest, self.mmap = pathlib.Path(path), manifest, mmap
        self._cache: dict[str, object] = {}

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
        fpath = self.path / self._entry(name, "array")["file"]
        if name not in self._cache:
            try:
                self._cache[name] = np.load(fpath, mmap_mode="r" if self.mmap else None, allow_pickle=False)
            except Exception as exc:  # file changed since open; keep the one-line error contract
                raise ArtifactError(f"{fpath}: cannot load array ({_why(exc)})") from None
        return self._cache[name]

    def table(self, name: str) -> pa.Table:
        fpath = self.path / self._entry(name, "table")["file"]
        if name not in self._cache:
            try:
                self._cache[name] = pq.read_table(fpath, memory_map=self.mmap)
            except Exception as exc:
                raise ArtifactError(f"{fpath}: cannot read table ({_why(exc)})") from None
        return self._cache[name]


def open_artifact(path, format_name: str, supported_versions: Iterable[int], verify: bool = True,
                  mmap: bool = True, progress: Progress = None) -> Artifact:
    """Validate and open an artifact; raise ArtifactError (one line, naming path/file) on the first problem:
    manifest present and valid, format name, format version, files present with recorded sizes (truncation
    reported), .npy headers matching the manifest, and with verify=True the sha256 of every file
    (progress ``(bytes_done, bytes_total, "verify")``)."""
    for problem in _problems(path, format_name, supported_versions, verify, progress):
        raise ArtifactError(problem)
    return Artifact(path, read_manifest(path), mmap=mmap)


def verify_artifact(path, format_name: str, supported_versions: Iterable[int],
                    progress: Progress = None) -> list[str]:
    """Run every check of open_artifact(verify=True), collecting all problems; [] means the artifact is sound."""
    return list(_problems(path, format_name, supported_versions, True, progress))
