"""Parquet inputs given as one file, a directory of Parquet files (hive-partitioned ones too) or a glob, local or
under a URL (s3://, gs://, hdfs://, file://: stores.py), read with pyarrow.dataset and streamed in record batches,
each batch tagged with the file and the row in that file it starts at, so that a problem names the file and row
it is in (docs/design.md §3)."""

from __future__ import annotations

import glob as globlib
import os
import re
import stat
from bisect import bisect_right
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..errors import GtmkitError
from .files import regular_file
from .stores import inner_path, is_url, locate, pa_errors

GLOB_CHARS = "*?["


def is_glob(path) -> bool:
    return isinstance(path, str) and any(c in path for c in GLOB_CHARS)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _files_below(root: Path, error) -> list:
    """The Parquet files below a directory in path order; files and folders named with a leading '.' or '_'
    (_SUCCESS, _metadata, .crc: what Spark and Dask leave beside the data) are not data."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        for f in sorted(filenames):
            if not f.startswith((".", "_")):
                out.append(Path(dirpath) / f)
    return out


def _walk_order(rel: str) -> list:
    """A sort key of paths below a folder giving _files_below's order: a folder's files (by name) before its
    subfolders' (by name)."""
    parts = rel.split("/")
    return [(1, p) for p in parts[:-1]] + [(0, parts[-1])]


def _glob_regex(pattern: str):
    """A glob as a regex over a store's paths: * and ? within one folder, ** across folders, [...] a set."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in pattern[i + 2:]:
            j = pattern.index("]", i + 2)
            body = pattern[i + 1:j]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = j + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def _store_files(path: str, error, what: str, filesystem=None) -> list:
    """input_files of a URL (or a path in a given file system): the objects it names, named as URLs."""
    import pyarrow.fs as pafs
    fs, inner = locate(path, error, filesystem)
    try:
        if is_glob(inner):
            base = inner[:min(inner.index(c) for c in GLOB_CHARS if c in inner)].rpartition("/")[0]
            rx = _glob_regex(inner)
            found = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
            dots = "/." in "/" + inner  # as glob.glob: a name starting with '.' only where the pattern says so
            files = sorted(i.path for i in found if i.type == pafs.FileType.File and rx.match(i.path) and (
                dots or not any(part.startswith(".") for part in i.path[len(base):].split("/"))))
            if not files:
                raise error(f"{path}: no file matches")
        else:
            info = fs.get_file_info(inner)
            if info.type == pafs.FileType.NotFound:
                bucket = inner.split("/", 1)[0]
                if filesystem is None and bucket and fs.type_name in ("s3", "gcs") and \
                        fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                    raise error(f"{path}: no such bucket {bucket!r}")
                raise error(f"{path}: no such file or directory")
            if info.type == pafs.FileType.Directory:
                root = inner.rstrip("/")
                found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
                files = sorted((i.path for i in found if i.type == pafs.FileType.File and not any(
                    part.startswith((".", "_")) for part in i.path[len(root) + 1:].split("/"))),
                    key=lambda p: _walk_order(p[len(root) + 1:]))
                if not files:
                    raise error(f"{path}: a directory without Parquet files")
            else:
                files = [inner]
    except pa_errors() as exc:
        raise error(f"{path}: cannot read {what} ({_first_line(exc)})") from None
    if filesystem is not None:
        return files
    return [_url_of(path, inner, f) for f in files]


def _url_of(url: str, inner: str, found: str) -> str:
    """The URL of an object found under URL url (whose path in its file system is inner): the URL's part before
    that path, then the object's path."""
    return url[:len(url) - len(inner)] + found if url.endswith(inner) else found


def input_files(path, error: type = GtmkitError, what: str = "Parquet input", filesystem=None) -> list:
    """The regular files a Parquet input names, in the order their rows are read; one-line `error` for a path
    that names nothing readable (a FIFO, a device, an empty folder, a glob matching no file). A URL's objects
    come back as URLs (filesystem: a pyarrow or fsspec file system the path lies in, its paths as they are)."""
    if not isinstance(path, (str, os.PathLike)):
        raise error(f"a {what} path must be a string or a path, got {type(path).__name__}")
    if is_url(path) or filesystem is not None:
        return _store_files(os.fspath(path), error, what, filesystem)
    if is_glob(str(path)) and not os.path.exists(path):
        files = [Path(p) for p in sorted(globlib.glob(str(path), recursive=True)) if not os.path.isdir(p)]
        if not files:
            raise error(f"{path}: no file matches")
    else:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise error(f"{path}: no such file or directory") from None
        except (OSError, ValueError) as exc:
            raise error(f"{path}: cannot read {what} ({getattr(exc, 'strerror', None) or exc})") from None
        if stat.S_ISDIR(mode):
            files = _files_below(Path(path), error)
            if not files:
                raise error(f"{path}: a directory without Parquet files")
        else:
            files = [Path(path)]
    return [regular_file(f, error, what) for f in files]


# older pyarrow releases name it _get_partition_keys
_partition_keys = getattr(ds, "get_partition_keys", None) or getattr(ds, "_get_partition_keys")


class ParquetInput:
    """A Parquet input's files as one dataset. dictionary_columns: string columns read dictionary-encoded
    straight from Parquet's dictionary pages (no string is materialised twice). Hive partitions of a
    directory (key=value folders) are columns too."""

    def __init__(self, path, error: type = GtmkitError, what: str = "Parquet input", dictionary_columns=(),
                 files=None, partition_types=None, filesystem=None):
        """files: these of the input's files (as input_files lists them) instead of all, e.g. one a task;
        partition_types: then the whole input's (its partition_types), for a key=value folder's values are
        typed from every folder (all digits in one file's folder may be strings in the whole input).
        filesystem: a pyarrow or fsspec file system that path lies in (a URL finds its own)."""
        self.path, self.error = str(path), error
        remote = is_url(self.path) or filesystem is not None
        self.files = input_files(path, error, what, filesystem) if files is None else [
            str(f) if remote else Path(f) for f in files]
        self.names = [str(f) for f in self.files]  # what errors name: as given, a URL for a store's object
        fs, root = None, (str(path) if os.path.isdir(path) else None) if not remote else None
        inner = [str(f) for f in self.files]
        if remote:
            fs, base = locate(self.path, error, filesystem)
            if filesystem is None:
                inner = [inner_path(f) for f in inner]
            if not is_glob(base):
                try:
                    import pyarrow.fs as pafs
                    root = base.rstrip("/") if fs.get_file_info(base).type == pafs.FileType.Directory else None
                except pa_errors() as exc:
                    raise error(f"{path}: cannot read {what} ({_first_line(exc)})") from None
        self.filesystem = fs
        try:
            wanted = set(dictionary_columns)
            leaves = self._parquet_schema(fs, inner[0]) if wanted else []
            paths = [c.path for c in leaves if c.path.split(".")[0] in wanted and c.physical_type == "BYTE_ARRAY"]
            fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=paths))
            part = "hive" if root else None
            if root and partition_types is not None:
                part = ds.partitioning(partition_types, flavor="hive")
            self.dataset = ds.dataset(inner, format=fmt, partitioning=part, partition_base_dir=root, filesystem=fs)
            self.schema = self.dataset.schema
            # the types as stored (before dictionary decoding): what a type check should see
            self._stored = ds.dataset(inner, format="parquet", partitioning=part, partition_base_dir=root,
                                      filesystem=fs) if paths else self.dataset
            self.stored_schema = self._stored.schema
            self.fragments = list(self.dataset.get_fragments())
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            shown, why = path, _first_line(exc)
            if remote:  # name the object that is no Parquet file, as a URL
                shown, why = self._culprit(fs, inner) or (path, why)
            raise error(f"{shown}: not a readable Parquet file ({why})") from None
        self.file_rows = []
        for name, frag in zip(self.names, self.fragments):
            try:
                self.file_rows.append(frag.count_rows())
            except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
                raise error(f"{name if remote else path}: not a readable Parquet file ({_first_line(exc)})") \
                    from None
        self.starts = [0]
        for n in self.file_rows:
            self.starts.append(self.starts[-1] + n)

    def _culprit(self, fs, inner: list):
        """(name, why) of the first of the files that does not open as Parquet, or None."""
        for name, p in zip(self.names, inner):
            try:
                self._parquet_schema(fs, p)
            except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
                return name, _first_line(exc)
        return None

    @staticmethod
    def _parquet_schema(fs, path):
        if fs is None:
            return pq.ParquetFile(path).schema
        with fs.open_input_file(path) as f:
            return pq.ParquetFile(f).schema

    @property
    def partition_types(self) -> pa.Schema:
        """The columns that key=value folders hold, typed as this input reads them."""
        names = {}
        for frag in self._stored.get_fragments():
            names.update(dict.fromkeys(_partition_keys(frag.partition_expression)))
        return pa.schema([self._stored.schema.field(n) for n in names])

    def file_types(self) -> list:
        """Per file, in order, {column: type} as that file stores it, its partition folders' columns included: a
        dataset's schema is its first file's, so only this shows a later file whose columns differ."""
        out = []
        for name, frag in zip(self.names, self._stored.get_fragments()):
            try:
                types = {f.name: f.type for f in frag.physical_schema}
            except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
                raise self.error(f"{name}: not a readable Parquet file ({_first_line(exc)})") from None
            for name in _partition_keys(frag.partition_expression):
                types.setdefault(name, self._stored.schema.field(name).type)
            out.append(types)
        return out

    @property
    def num_rows(self) -> int:
        return self.starts[-1]

    def where(self, row: int) -> tuple:
        """(file, row in that file) of a row of the whole input."""
        i = max(bisect_right(self.starts, row) - 1, 0)
        i = min(i, len(self.files) - 1)
        return self.names[i], row - self.starts[i]

    def batches(self, columns, batch_rows: int):
        """(record batch, first row of it in the whole input) in file order, then row order."""
        row = 0
        for frag, n in zip(self.fragments, self.file_rows):
            if n == 0:  # a zero-row part (Spark and Dask write them) adds nothing
                continue
            for batch in frag.to_batches(schema=self.dataset.schema, columns=columns, batch_size=batch_rows,
                                         use_threads=True):
                yield batch, row
                row += batch.num_rows
