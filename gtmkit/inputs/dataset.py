"""Parquet inputs given as one file, a directory of Parquet files (hive-partitioned ones too) or a glob, read
with pyarrow.dataset and streamed in record batches, each batch tagged with the file and the row in that file
it starts at, so that a problem names the file and row it is in (docs/design.md §3)."""

from __future__ import annotations

import glob as globlib
import os
import stat
from bisect import bisect_right
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..errors import GtmkitError
from .files import regular_file

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


def input_files(path, error: type = GtmkitError, what: str = "Parquet input") -> list:
    """The regular files a Parquet input names, in the order their rows are read; one-line `error` for a path
    that names nothing readable (a FIFO, a device, an empty folder, a glob matching no file)."""
    if not isinstance(path, (str, os.PathLike)):
        raise error(f"a {what} path must be a string or a path, got {type(path).__name__}")
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
                 files=None, partition_types=None):
        """files: these of the input's files (as input_files lists them) instead of all, e.g. one a task;
        partition_types: then the whole input's (its partition_types), for a key=value folder's values are
        typed from every folder (all digits in one file's folder may be strings in the whole input)."""
        self.path, self.error = str(path), error
        self.files = input_files(path, error, what) if files is None else [Path(f) for f in files]
        root = str(path) if os.path.isdir(path) else None
        try:
            wanted = set(dictionary_columns)
            leaves = pq.ParquetFile(self.files[0]).schema if wanted else []
            paths = [c.path for c in leaves if c.path.split(".")[0] in wanted and c.physical_type == "BYTE_ARRAY"]
            fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=paths))
            files, part = [str(f) for f in self.files], "hive" if root else None
            if root and partition_types is not None:
                part = ds.partitioning(partition_types, flavor="hive")
            self.dataset = ds.dataset(files, format=fmt, partitioning=part, partition_base_dir=root)
            self.schema = self.dataset.schema
            # the types as stored (before dictionary decoding): what a type check should see
            self._stored = ds.dataset(files, format="parquet", partitioning=part,
                                      partition_base_dir=root) if paths else self.dataset
            self.stored_schema = self._stored.schema
            self.fragments = list(self.dataset.get_fragments())
            self.file_rows = [f.count_rows() for f in self.fragments]
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            raise error(f"{path}: not a readable Parquet file ({_first_line(exc)})") from None
        self.starts = [0]
        for n in self.file_rows:
            self.starts.append(self.starts[-1] + n)

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
        for frag in self._stored.get_fragments():
            try:
                types = {f.name: f.type for f in frag.physical_schema}
            except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
                raise self.error(f"{frag.path}: not a readable Parquet file ({_first_line(exc)})") from None
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
        return self.fragments[i].path, row - self.starts[i]

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
