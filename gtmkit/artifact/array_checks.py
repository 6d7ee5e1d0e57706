"""Vectorised invariant tests shared by the index and trie loaders (index_checks.py, artifact/trie_checks.py).

Each returns None when the invariant holds, else one line (without the file it concerns) naming the
first offending entry. No Python loop runs over the arrays' entries."""

from __future__ import annotations

import numpy as np


class FieldError(Exception):
    """A manifest field is missing or malformed; the message names it."""


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def offsets_problem(off, n_rows: int, total: int, min_step: int = 0) -> str | None:
    """CSR offsets: n_rows + 1 entries from 0 to total, each step >= min_step."""
    off = np.asarray(off)
    if len(off) != n_rows + 1:
        return f"has {len(off)} entries, expected {n_rows + 1}"
    if int(off[0]) != 0 or int(off[-1]) != total:
        return f"runs from {int(off[0])} to {int(off[-1])}, expected 0 to {total}"
    step = np.diff(off.astype(np.int64))
    if np.any(step < min_step):
        i = _first(step < min_step)
        rel = "decreases" if step[i] < 0 else "does not increase"
        return f"{rel} at entry {i + 1} ({int(off[i])} -> {int(off[i + 1])})"
    return None


def range_problem(values, lo: int, hi: int) -> str | None:
    """Every value in [lo, hi)."""
    values = np.asarray(values)
    if values.size == 0:
        return None
    vmin, vmax = int(values.min()), int(values.max())
    if vmin >= lo and vmax < hi:
        return None
    bad = (values < lo) | (values >= hi)
    i = np.unravel_index(_first(bad.reshape(-1)), values.shape)
    where = ", ".join(map(str, i))
    return f"entry [{where}] = {int(values[i])} outside [{lo}, {hi})"


def increasing_within(values, off) -> str | None:
    """values strictly increasing inside each segment off[i] .. off[i+1]-1 (off: checked CSR offsets)."""
    values = np.asarray(values).astype(np.int64, copy=False)
    if len(values) < 2:
        return None
    bad = np.diff(values) <= 0
    starts = np.asarray(off, np.int64)[1:-1]
    starts = starts[(starts > 0) & (starts < len(values))]
    bad[starts - 1] = False  # a segment's first value has no predecessor inside it
    if bad.any():
        i = _first(bad)
        seg = int(np.searchsorted(np.asarray(off), i + 1, side="right")) - 1
        return f"not strictly increasing within segment {seg} (entry {i}: {int(values[i])}, entry {i + 1}: {int(values[i + 1])})"
    return None


def field(obj, key: str, where: str, kind=int, lo=None, hi=None):
    """obj[key], checked: present, of type kind (bool is no int), and for ints within [lo, hi]."""
    name = f"{where}.{key}" if where else key
    if not isinstance(obj, dict) or key not in obj:
        raise FieldError(f"missing key '{name}'")
    v = obj[key]
    ok = (type(v) is int) if kind is int else isinstance(v, kind)
    if not ok:
        raise FieldError(f"'{name}' is {type(v).__name__} {v!r}, expected {getattr(kind, '__name__', kind)}")
    if kind is int and ((lo is not None and v < lo) or (hi is not None and v > hi)):
        raise FieldError(f"'{name}' = {v} outside [{lo}, {hi if hi is not None else 'inf'}]")
    return v


def int_list(obj, key: str, where: str, length: int, lo=None) -> list:
    """obj[key]: a list of `length` ints, each >= lo."""
    v = field(obj, key, where, list)
    if len(v) != length or any(type(x) is not int or (lo is not None and x < lo) for x in v):
        raise FieldError(f"'{where}.{key}' = {v!r}, expected {length} integers"
                         + (f" >= {lo}" if lo is not None else ""))
    return v
