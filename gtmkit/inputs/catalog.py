"""Read and validate an ad catalog (Parquet), streaming record batches into flat numpy columns.

Every problem is one CatalogError naming the file, the column and the first offending row."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._arrays import offsets_from_lengths
from ..errors import CatalogError
from ..progress import Progress, report
from .dataset import ParquetInput
from .schema import Schema

BATCH_ROWS = 1 << 20


@dataclass
class StringLists:
    """A list<string> column, dictionary-encoded: row i holds codes[offsets[i]:offsets[i+1]].

    Shape: offsets int64 [n+1]; codes int32 [nnz]; dictionary: list of str (code -> string)."""

    offsets: np.ndarray
    codes: np.ndarray
    dictionary: list

    def row(self, i: int) -> list:
        return [self.dictionary[c] for c in self.codes[self.offsets[i]:self.offsets[i + 1]]]


@dataclass
class Catalog:
    """The catalog's columns in file order. ad_ids int64 [n]; sids int32 [n, L];
    allowed / excluded: per attribute (bitmask attributes first, then Bloom, schema order) StringLists
    sharing one dictionary per attribute, its strings sorted (excluded is all-empty when there is no exclude
    column)."""

    path: str
    ad_ids: np.ndarray
    sids: np.ndarray
    allowed: list
    excluded: list

    @property
    def num_ads(self) -> int:
        return len(self.ad_ids)


class _ListBuilder:
    """Accumulates one attribute's string lists over batches with a global dictionary."""

    def __init__(self, index: dict, dictionary: list, total_rows: int):
        self.index, self.dictionary = index, dictionary
        # Filled in place: fresh large allocations cost page faults, so no per-batch concatenation.
        self.offsets = np.zeros(total_rows + 1, np.int64)
        self.rows = 0
        self.codes = []
        # the first of codes' batches not yet checked against the domain, and the position of its first code
        self.checked_batches, self.checked_codes = 0, 0
        self._last = (None, None)  # (batch dictionary, its remap): row groups repeat dictionaries

    def add(self, lengths: np.ndarray, values: pa.Array, where: tuple) -> None:
        """where: (path, column, first row of the batch), to name a row holding invalid UTF-8."""
        r, n = self.rows, len(lengths)
        seg = offsets_from_lengths(lengths)
        self.offsets[r + 1:r + n + 1] = seg[1:] + self.offsets[r]
        self.rows += n
        if len(values) == 0:
            self.codes.append(np.zeros(0, np.int32))
            return
        enc = values if pa.types.is_dictionary(values.type) else pc.dictionary_encode(values)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks()
        last, remap = self._last
        if last is None or not enc.dictionary.equals(last):
            _check_utf8(enc, lengths, *where)
            local = enc.dictionary.to_pylist()
            remap = np.fromiter((self.index.setdefault(s, len(self.index)) for s in local), np.int32, len(local))
            while len(self.dictionary) < len(self.index):
                self.dictionary.append(None)
            for s, c in zip(local, remap):
                self.dictionary[c] = s
            self._last = (enc.dictionary, remap)
        self.codes.append(remap[enc.indices.to_numpy(zero_copy_only=False)])

    def finish(self, remap: np.ndarray, dictionary: list) -> StringLists:
        """The lists in the codes of `dictionary` (remap: this builder's code -> its code there), the batches'
        codes released as they are copied."""
        codes = np.empty(sum(len(c) for c in self.codes), np.int32)
        at = 0
        while self.codes:
            c = self.codes.pop(0)
            codes[at:at + len(c)] = remap[c]
            at += len(c)
        return StringLists(self.offsets, codes, dictionary)


def sorted_strings(strings) -> list:
    """Distinct strings in ascending order of their UTF-8 bytes (Python's code point order is the same order
    for any valid string): the order of every dictionary a build writes."""
    return sorted(set(strings))


def _shared_codes(allowed: _ListBuilder, excluded: _ListBuilder) -> tuple:
    """One dictionary for an attribute's two columns: every string either names, sorted (sorted_strings). Why:
    codes then depend on the catalog's strings only, not on the rows' order or on where batches or files split
    them (the same rows in any order, as one file or as parts, give the same index)."""
    dictionary = sorted_strings(allowed.dictionary + excluded.dictionary)
    code = {s: i for i, s in enumerate(dictionary)}
    return tuple(lists.finish(np.fromiter((code[s] for s in lists.dictionary), np.int32, len(lists.dictionary)),
                              dictionary) for lists in (allowed, excluded))


def _check_utf8(enc: pa.DictionaryArray, lengths: np.ndarray, path, column, row0) -> None:
    """Parquet does not check that string columns hold UTF-8; Python cannot decode what does not."""
    try:
        enc.dictionary.validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    raw = enc.dictionary.view(pa.large_binary() if pa.types.is_large_string(enc.dictionary.type) else pa.binary())
    for code, b in enumerate(raw.to_pylist()):
        try:
            b.decode("utf-8")
        except UnicodeDecodeError as exc:
            why = f"a string is not valid UTF-8 (byte {exc.start} of {b[:16]!r}: {exc.reason})"
            uses = np.flatnonzero(enc.indices.to_numpy(zero_copy_only=False) == code)
            if not len(uses):
                raise CatalogError(f"{path}: column '{column}': {why}") from None
            row = int(np.searchsorted(np.cumsum(lengths), uses[0], side="right"))
            raise _fail(path, column, row0 + row, why) from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _fail(path, column, row, msg) -> CatalogError:
    return CatalogError(f"{path}: column '{column}', row {row}: {msg}")


def _first_true(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _string_lists(arr: pa.Array, path, column, row0) -> tuple:
    """-> (lengths int64 [n], flat values StringArray); null or empty = untargeted."""
    t = arr.type
    if _is_string(t):
        valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
        return valid.astype(np.int64), arr.drop_null()
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_string(t.value_type):
        lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        values = pc.list_flatten(arr)
        if values.null_count:
            flat_row = np.repeat(np.arange(len(lengths)), lengths)
            bad = _first_true(values.is_null().to_numpy(zero_copy_only=False))
            raise _fail(path, column, row0 + int(flat_row[bad]), "null string inside the list")
        return lengths, values
    raise CatalogError(f"{path}: column '{column}' has type {t}, expected list<string> or string")


def _sid_tokens(arr: pa.Array, schema: Schema, path, row0) -> np.ndarray:
    col, L, V = schema.sid_column, schema.sid_length, schema.vocab
    t = arr.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) \
            or not pa.types.is_integer(t.value_type):
        raise CatalogError(f"{path}: column '{col}' has type {t}, expected list<int> of {L} tokens")
    if arr.null_count:
        raise _fail(path, col, row0 + _first_true(arr.is_null().to_numpy(zero_copy_only=False)), "null SID")
    lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
    if np.any(lengths != L):
        i = _first_true(lengths != L)
        raise _fail(path, col, row0 + i, f"SID has {int(lengths[i])} tokens, expected {L}")
    values = pc.list_flatten(arr)
    if values.null_count:
        i = _first_true(values.is_null().to_numpy(zero_copy_only=False)) // L
        raise _fail(path, col, row0 + i, "null token in SID")
    if len(values) == 0:  # a zero-row batch: min_max of nothing is None
        return np.zeros((0, L), np.int32)
    mm = pc.min_max(values).as_py()
    if mm["min"] < 0 or mm["max"] >= V:  # only now pay for locating the row
        tok = values.to_numpy(zero_copy_only=False).reshape(-1, L)  # its own dtype: uint64 stays exact
        bad = (tok >= V) if tok.dtype.kind == "u" else (tok < 0) | (tok >= V)
        i = _first_true(bad.any(axis=1))
        raise _fail(path, col, row0 + i, f"token {int(tok[i][bad[i]][0])} outside [0, {V})")
    return values.to_numpy(zero_copy_only=False).astype(np.int32, copy=False).reshape(-1, L)


def open_catalog(path, schema: Schema, files=None, partition_types=None, filesystem=None) -> ParquetInput:
    """The catalog's files as one input whose columns the schema can read (files: a subset of them, with the
    whole input's partition_types; filesystem: a pyarrow or fsspec one the path lies in; ParquetInput)."""
    src = ParquetInput(path, CatalogError, "Parquet file", dictionary_columns=[
        c for a in (*schema.bitmask, *schema.bloom) for c in (a.column, a.exclude_column) if c], files=files,
        partition_types=partition_types, filesystem=filesystem)
    check_files(src, schema)
    return src


def check_files(src: ParquetInput, schema: Schema) -> None:
    """Every file of the input, in order, holds the schema's columns with usable types, each column with the
    same type in every file (the rows are read as one dataset, whose schema is the first file's): refused
    from the files' metadata, before any row is read. The single-process and the sharded build both call it."""
    first = None
    for name, types in zip(src.names, src.file_types()):
        _check_types(types, schema, name)
        if first is None:
            first = (name, types)
            continue
        for col in schema.columns():
            if _same_kind(types[col]) != _same_kind(first[1][col]):
                raise CatalogError(f"{name}: column '{col}' has type {types[col]}, where {first[0]} has "
                                   f"{first[1][col]} (every file of a catalog stores a column with one type)")


def _same_kind(t):
    """t with what only changes how a value is stored set aside (list field names and nullability, 64-bit
    offsets, dictionary encoding): types equal here are read as the same values."""
    if pa.types.is_dictionary(t):
        return _same_kind(t.value_type)
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_same_kind(t.value_type))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_same_kind(t.value_type), t.list_size)
    return t


def read_catalog(path, schema: Schema, progress: Progress = None, batch_rows: int = BATCH_ROWS,
                 check_rows=None, files=None, unique: bool = True, partition_types=None, filesystem=None) -> Catalog:
    """Stream the catalog's schema columns and validate every row (docs/design.md §3). path: a Parquet file,
    a directory of Parquet files (hive partitions too) or a glob, local or under a URL (inputs/dataset.py; filesystem:
    a pyarrow or fsspec file system the path lies in); rows in file order.
    String columns come back dictionary-encoded straight from Parquet's own dictionary pages, which saves
    materialising and re-hashing every string; an attribute's dictionary is then its strings sorted, so the
    codes depend on what the rows hold, not on their order or files.

    check_rows: optional callable(number of rows), run once the files' metadata is read and before any
    row is (a build refuses there a catalog too large for memory). files: read only these of the input's
    files (rows are then numbered from the first of them; partition_types: open_catalog). unique=False leaves
    repeated ad ids to the caller (a sharded build reads a file a task and checks them over all files, with
    check_unique on the whole input).

    Checks run file by file in input order (types of every file first, then each file's rows and domains),
    repeated ids last, so a sharded build that reports its first failing file's error gives the same line."""
    src = open_catalog(path, schema, files, partition_types, filesystem)
    attrs = [*schema.bitmask, *schema.bloom]
    total = src.num_rows
    if total == 0:
        raise CatalogError(f"{path}: the catalog has no rows")
    if check_rows is not None:
        check_rows(total)
    ad_ids = np.empty(total, np.int64)
    sids = np.empty((total, schema.sid_length), np.int32)
    allowed, excluded = [], []
    for _ in attrs:
        allowed.append(_ListBuilder({}, [], total))
        excluded.append(_ListBuilder({}, [], total))
    row0, file_end = 0, 1
    try:
        for batch, row0 in src.batches(schema.columns(), batch_rows):
            n = batch.num_rows
            if n == 0:  # an empty part (Spark and Dask write them) or row group adds nothing
                continue
            if row0 + n > total:
                raise CatalogError(f"{path}: the files' metadata says {total} rows, read more")
            f, r0 = src.where(row0)  # a batch lies in one file: problems name it and the row there
            ad_ids[row0:row0 + n] = _ad_ids(batch.column(schema.ad_id_column), schema.ad_id_column, f, r0)
            sids[row0:row0 + n] = _sid_tokens(batch.column(schema.sid_column), schema, f, r0)
            for j, a in enumerate(attrs):
                allowed[j].add(*_string_lists(batch.column(a.column), f, a.column, r0), (f, a.column, r0))
                if a.exclude_column:
                    excluded[j].add(*_string_lists(batch.column(a.exclude_column), f, a.exclude_column, r0),
                                    (f, a.exclude_column, r0))
                else:
                    excluded[j].rows += n
            row0 += n
            while file_end < len(src.starts) and src.starts[file_end] <= row0:  # a file read whole
                _check_domains(src, schema, allowed, excluded)
                file_end += 1
            report(progress, row0, total, "read")
    except (pa.ArrowException, OSError) as exc:
        f, r0 = src.where(min(row0, total - 1))
        raise CatalogError(f"{f}: cannot read rows near row {r0} ({_first_line(exc)})") from None
    if row0 != total:
        raise CatalogError(f"{path}: the files' metadata says {total} rows, read {row0}")
    if unique:
        check_unique(ad_ids, schema.ad_id_column, src)
    lists = [_shared_codes(a, e) for a, e in zip(allowed, excluded)]
    return Catalog(str(path), ad_ids, sids, [a for a, _ in lists], [e for _, e in lists])


def _is_string(t) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or (
        pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)))


def _check_types(file_types: dict, schema: Schema, path) -> None:
    """Every column the schema names exists with a usable type: refused before any row is read."""
    for col in schema.columns():
        if col not in file_types:
            raise CatalogError(f"{path}: missing column '{col}' (columns: {', '.join(sorted(file_types))})")
    t = file_types[schema.ad_id_column]
    if not pa.types.is_integer(t):
        raise CatalogError(f"{path}: column '{schema.ad_id_column}' has type {t}, expected int64")
    t = file_types[schema.sid_column]
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) \
            or not pa.types.is_integer(t.value_type):
        raise CatalogError(f"{path}: column '{schema.sid_column}' has type {t}, expected list<int> of "
                           f"{schema.sid_length} tokens")
    for a in (*schema.bitmask, *schema.bloom):
        for col in (a.column, a.exclude_column):
            t = file_types.get(col)
            if col and not (_is_string(t) or ((pa.types.is_list(t) or pa.types.is_large_list(t))
                                               and _is_string(t.value_type))):
                raise CatalogError(f"{path}: column '{col}' has type {t}, expected list<string> or string")


def _ad_ids(arr: pa.Array, col, path, row0) -> np.ndarray:
    if not pa.types.is_integer(arr.type):
        raise CatalogError(f"{path}: column '{col}' has type {arr.type}, expected int64")
    if arr.null_count:
        raise _fail(path, col, row0 + _first_true(arr.is_null().to_numpy(zero_copy_only=False)), "null ad_id")
    v = arr.to_numpy(zero_copy_only=False)
    if v.dtype == np.uint64 and np.any(v > np.iinfo(np.int64).max):
        i = _first_true(v > np.iinfo(np.int64).max)
        raise _fail(path, col, row0 + i, f"ad_id {int(v[i])} does not fit int64")
    return v.astype(np.int64, copy=False)


def _fail_at(src: ParquetInput, column, row, msg) -> CatalogError:
    """_fail at a row of the whole input, named by its file and the row there."""
    f, r = src.where(row)
    return _fail(f, column, r, msg)


def check_unique(ad_ids: np.ndarray, col, src: ParquetInput) -> None:
    s = np.sort(ad_ids)
    if not np.any(s[1:] == s[:-1]):
        return
    # Slow path, only to name the offending row.
    order = np.argsort(ad_ids, kind="stable")
    s = ad_ids[order]
    dup = np.flatnonzero(s[1:] == s[:-1])
    if len(dup):
        # Report the earliest row that repeats an id seen before it.
        later = order[dup + 1]
        k = int(np.argmin(later))
        first_file, first_row = src.where(int(order[dup[k]]))
        first = f"row {first_row}" if len(src.files) == 1 else f"{first_file} row {first_row}"
        raise _fail_at(src, col, int(later[k]), f"duplicate ad_id {int(s[dup[k]])} (first at {first})")


def _check_domains(src: ParquetInput, schema: Schema, allowed: list, excluded: list) -> None:
    """The bitmask values of the file just read lie in their domains: attribute by attribute, its allowed
    column, then its exclude column, the first offending row of the file named."""
    for j, a in enumerate(schema.bitmask):
        if a.domain is None:
            continue
        dom = set(a.domain)
        for lists, col in ((allowed[j], a.column), (excluded[j], a.exclude_column)):
            outside = np.array([s not in dom for s in lists.dictionary] + [False], bool)
            at = lists.checked_codes
            for codes in lists.codes[lists.checked_batches:]:
                bad = outside[codes] if len(codes) else np.zeros(0, bool)
                if bad.any():
                    k = _first_true(bad)
                    row = int(np.searchsorted(lists.offsets[:lists.rows + 1], at + k, side="right") - 1)
                    raise _fail_at(src, col, row, f"value {lists.dictionary[codes[k]]!r} is not in the "
                                                  f"schema's domain of '{a.name}'")
                at += len(codes)
    for lists in (*allowed, *excluded):
        lists.checked_codes += sum(len(c) for c in lists.codes[lists.checked_batches:])
        lists.checked_batches = len(lists.codes)
