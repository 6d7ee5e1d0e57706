"""Key input of the succinct trie: lists of sequences, pyarrow list arrays or (tokens, offsets) -> flat
arrays, with every check that makes a bad key a one-line GtmkitError naming the key."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pyarrow as pa

from ..errors import GtmkitError
from .files import short_repr

MAX_TOKEN = 2**31 - 1


def _int_array(a, what: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        raise GtmkitError(f"keys: {what} must be integers, got dtype {a.dtype}")
    return a


def _from_arrow(arr) -> tuple:
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    typ = arr.type
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ)):
        raise GtmkitError(f"keys: need a pyarrow list array of integers, got type {typ}")
    if not pa.types.is_integer(typ.value_type):
        raise GtmkitError(f"keys: tokens must be integers, got pyarrow type {typ.value_type}")
    toks, lens, base = [], [], 0
    for ch in chunks:
        if ch.null_count:
            i = int(np.flatnonzero(ch.is_null().to_numpy(zero_copy_only=False))[0])
            raise GtmkitError(f"keys: key {base + i} is null")
        if pa.types.is_fixed_size_list(typ):
            lengths = np.full(len(ch), typ.list_size, np.int64)
        else:
            off = ch.offsets.to_numpy()
            lengths = np.diff(off).astype(np.int64)
        flat = ch.flatten()
        if flat.null_count:
            j = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
            i = int(np.searchsorted(np.cumsum(lengths), j, side="right"))
            raise GtmkitError(f"keys: key {base + i} has a null token")
        toks.append(flat.to_numpy())
        lens.append(lengths)
        base += len(ch)
    tokens = np.concatenate(toks) if toks else np.zeros(0, np.int64)
    lengths = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return tokens, offsets


def _from_sequences(keys) -> tuple:
    lengths = np.empty(len(keys), np.int64)
    for i, k in enumerate(keys):
        if isinstance(k, (str, bytes)) or not hasattr(k, "__len__"):
            raise GtmkitError(f"keys: key {i} is not a sequence of integers ({type(k).__name__})")
        lengths[i] = len(k)
    flat = list(itertools.chain.from_iterable(keys))
    try:
        tokens = np.asarray(flat) if flat else np.zeros(0, np.int64)
    except (ValueError, TypeError, OverflowError):  # nested sequences of different lengths
        tokens = None
    if tokens is None or tokens.dtype.kind not in "iu" or tokens.ndim != 1:
        _name_bad_token(keys)
        raise GtmkitError(f"keys: tokens must be integers, got {'mixed' if tokens is None else tokens.dtype} values")
    offsets = np.zeros(len(keys) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return tokens, offsets


def _name_bad_token(keys) -> None:
    """Raise naming the first token that is not an integer in [0, 2^31-1] (slow: errors only)."""
    for i, k in enumerate(keys):
        for j, x in enumerate(k):
            if not isinstance(x, (int, np.integer)) or isinstance(x, bool):
                raise GtmkitError(f"keys: tokens must be integers: key {i} has {short_repr(x)} at position {j}")
            if not 0 <= x <= MAX_TOKEN:
                what = "negative token" if x < 0 else "token above 2^31-1"
                raise GtmkitError(f"keys: key {i} has {what} {int(x)} at position {j}")


def key_arrays(keys, check: bool = True) -> tuple:
    """Normalise build input to (tokens int32 [N], offsets int64 [m+1]); key i is
    tokens[offsets[i]:offsets[i+1]].

    Accepts: a list (or non-pair tuple) of integer sequences; a 2-D integer numpy array (one key per
    row); a pyarrow list / large_list / fixed_size_list array of integers, chunked or not; a tuple
    ``(tokens, offsets)`` of two numpy arrays. Raises GtmkitError for anything else, for no keys, an
    empty key, a null, a negative token or a token > 2^31-1, naming the key. With check=False (query
    keys) empty keys are allowed and tokens come back as int64 clipped to [-1, 2^31]: they match nothing."""
    if isinstance(keys, (pa.Array, pa.ChunkedArray)):
        tokens, offsets = _from_arrow(keys)
    elif isinstance(keys, tuple) and len(keys) == 2 and all(isinstance(k, np.ndarray) for k in keys):
        tokens = _int_array(keys[0], "tokens").reshape(-1)
        offsets = _int_array(keys[1], "offsets").astype(np.int64).reshape(-1)
        if len(offsets) < 1 or offsets[0] < 0 or offsets[-1] > len(tokens) or np.any(np.diff(offsets) < 0):
            raise GtmkitError(f"keys: offsets must be non-decreasing within [0, {len(tokens)}] "
                              f"(tokens has {len(tokens)} values)")
        tokens, offsets = tokens[offsets[0]:offsets[-1]], offsets - offsets[0]
    elif isinstance(keys, np.ndarray):
        if keys.ndim != 2:
            raise GtmkitError(f"keys: a numpy array of keys must be 2-D (one key per row), got {keys.ndim}-D")
        keys = _int_array(keys, "tokens")
        offsets = np.arange(keys.shape[0] + 1, dtype=np.int64) * keys.shape[1]
        tokens = keys.reshape(-1)
    elif isinstance(keys, (list, tuple)):
        tokens, offsets = _from_sequences(keys)
    else:
        raise GtmkitError(f"keys: expected a list of integer sequences, a pyarrow list array or a "
                          f"(tokens, offsets) tuple, got {type(keys).__name__}")
    if not check:
        return clip_tokens(tokens), np.ascontiguousarray(offsets, dtype=np.int64)
    return _checked(tokens, offsets)


def clip_tokens(tokens: np.ndarray) -> np.ndarray:
    """Query tokens as int64, clipped to [-1, 2^31]: values no key holds stay values no key holds."""
    if tokens.dtype == np.uint64:
        tokens = np.minimum(tokens, np.uint64(MAX_TOKEN + 1))
    return np.clip(tokens.astype(np.int64), -1, MAX_TOKEN + 1)


def _checked(tokens: np.ndarray, offsets: np.ndarray) -> tuple:
    m = len(offsets) - 1
    if m == 0:
        raise GtmkitError("keys: no keys")
    lengths = np.diff(offsets)
    if lengths.min() == 0:
        raise GtmkitError(f"keys: key {int(np.argmin(lengths))} is empty")
    if len(tokens):
        lo, hi = tokens.min(), tokens.max()
        if lo < 0 or hi > MAX_TOKEN:
            j = int(np.argmax(tokens < 0) if lo < 0 else np.argmax(tokens > MAX_TOKEN))
            i = int(np.searchsorted(offsets, j, side="right") - 1)
            what = "negative token" if lo < 0 else "token above 2^31-1"
            raise GtmkitError(f"keys: key {i} has {what} {int(tokens[j])} at position {j - int(offsets[i])}")
    return np.ascontiguousarray(tokens, dtype=np.int32), np.ascontiguousarray(offsets, dtype=np.int64)


def key_error_at(exc: GtmkitError, src, column: str) -> GtmkitError:
    """A key error of key_arrays ("keys: key 7 is empty") as the input's: "F: column 'key': row 7 is empty", F the
    file that row is in and 7 its row there (src: the keys' ParquetInput)."""
    m = re.match(r"^keys: key (\d+)(.*)$", str(exc))
    if not m:
        msg = str(exc)
        return GtmkitError(f"{src.path}: column {column!r}: {msg[len('keys: '):] if msg.startswith('keys: ') else msg}")
    f, row = src.where(int(m.group(1)))
    return GtmkitError(f"{f}: column {column!r}: row {row}{m.group(2)}")


def read_key_column(path, column: str, files=None, filesystem=None):
    """(the key column of a Parquet file, folder or glob, local or under a URL, read whole; its ParquetInput).
    files: only these; filesystem: a pyarrow or fsspec one the path lies in."""
    from .dataset import ParquetInput

    src = ParquetInput(path, GtmkitError, "Parquet file", files=files, filesystem=filesystem)  # a FIFO would block the open: refused
    names = src.schema.names
    if column not in names:
        raise GtmkitError(f"{path}: no column {column!r} (columns: {', '.join(names)})")
    try:
        return src.dataset.to_table(columns=[column], use_threads=True).column(column), src
    except Exception as exc:  # pyarrow raises several types for unreadable files
        text = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
        raise GtmkitError(f"{path}: cannot read column {column!r} ({why})") from None
