"""Checks of the values a caller hands the online API: one-line GtmkitErrors naming the argument, and the
conversions the kernels rely on (C-contiguous arrays of the dtype they read)."""

from __future__ import annotations

import os

import numpy as np

from .errors import GtmkitError, RequestError

INT64_MAX = np.iinfo(np.int64).max


def int_arg(x, name: str, lo: int = 1) -> int:
    """A Python or numpy integer >= lo (bools refused: True is no beam width)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise GtmkitError(f"{name} must be an integer, got {x!r}")
    if x < lo:
        raise GtmkitError(f"{name} must be >= {lo}, got {x!r}")
    return int(x)


def beam_sizes_arg(beam_sizes, L: int) -> list:
    """L positive integer beam sizes, one a step."""
    try:
        sizes = [int_arg(x, "beam_sizes") for x in beam_sizes]
    except (GtmkitError, TypeError):
        sizes = []
    if len(sizes) != L:
        raise GtmkitError(f"beam_sizes must hold {L} positive integer sizes, got {beam_sizes!r}")
    return sizes


def bool_arg(x, name: str) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise GtmkitError(f"{name} must be True or False, got {x!r}")
    return bool(x)


def _dtype(x):
    return getattr(x, "dtype", None)


def check_kind(x, name: str, kinds: str, what: str) -> None:
    """O(1) dtype check of an array of any module (numpy, CuPy, torch): kinds as numpy's dtype.kind."""
    dt = _dtype(x)
    if dt is None:
        return
    try:
        kind = np.dtype(dt).kind
    except TypeError:  # torch dtypes: only their names are portable
        s = str(dt)
        kind = "b" if "bool" in s else "f" if ("float" in s or "bfloat" in s) else "c" if "complex" in s else "i"
    if kind not in kinds:
        raise GtmkitError(f"{name} must be {what}, got dtype {dt}")


def host_array(x, name: str) -> np.ndarray:
    try:
        return np.asarray(x)
    except (TypeError, ValueError, OverflowError) as e:
        raise RequestError(f"{name}: not an array ({e})") from None
    except MemoryError:
        raise GtmkitError(f"{name}: its array does not fit in memory ({available_bytes() / 2**30:.1f} GiB "
                          "available)") from None


def _converted(a: np.ndarray, dtype, name: str) -> np.ndarray:
    """a as C-contiguous dtype; a copy that cannot fit is refused with its size, not numpy's traceback."""
    try:
        return np.ascontiguousarray(a, dtype)
    except MemoryError:
        check_memory(a.size * np.dtype(dtype).itemsize, f"{name} as {np.dtype(dtype).name}")
        raise GtmkitError(f"{name}: no memory for a {np.dtype(dtype).name} copy of {a.size} values") from None


def ids(x, name: str, ndim: int = 1) -> np.ndarray:
    """Ids as C-contiguous int64 of rank ndim. Integers of any width are taken; a uint64 above the int64
    range becomes INT64_MAX (the kernels treat every id outside their table as absent); floats, bools, objects
    (Python ints beyond 64 bits) and strings are refused."""
    a = host_array(x, name)
    if a.ndim != ndim:
        raise RequestError(f"{name} must be a {ndim}-d array of integers, got shape {list(a.shape)}")
    if a.dtype.kind not in "iu":
        raise RequestError(f"{name} must be integers (int32/int64), got dtype {a.dtype}")
    if a.dtype == np.uint64:
        a = np.minimum(a, np.uint64(INT64_MAX))  # past every table: absent
    return _converted(a, np.int64, name)


def floats(x, name: str, ndim: int) -> np.ndarray:
    """Scores as C-contiguous float32 of rank ndim (integer inputs converted; float64 beyond the float32
    range becomes +-inf, which the selection ranks as documented)."""
    a = host_array(x, name)
    if a.ndim != ndim:
        raise GtmkitError(f"{name} must be a {ndim}-d array of floats, got shape {list(a.shape)}")
    if a.dtype.kind not in "fiu":
        raise GtmkitError(f"{name} must be floats, got dtype {a.dtype}")
    if a.dtype != np.float32:
        with np.errstate(over="ignore"):
            a = _converted(a, np.float32, name)
    return np.ascontiguousarray(a)


def available_bytes() -> int:
    """Memory the OS could give this process now (Linux MemAvailable; else physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def check_memory(need: int, what: str) -> None:
    """Refuse an allocation that cannot fit, with the size it would need."""
    have = available_bytes()
    if need > have:
        raise GtmkitError(f"{what} would need {need / 2**30:.1f} GiB, {have / 2**30:.1f} GiB available")


def check_search_memory(B: int, sizes: list, V: int) -> None:
    """Refuse a host beam search whose largest step cannot fit: the decoder's float32 log-probs [rows, V], the
    step's converted inputs (20 bytes a row), its [B, k] outputs and the token histories (the old, the gathered and
    the new one, 4 bytes a token each)."""
    L, need = len(sizes), 0
    for t in range(L):
        rows = B * (sizes[t] if t else 1)
        k = sizes[t + 1] if t + 1 < L else sizes[-1]
        need = max(need, rows * (4 * V + 20) + B * k * (16 + 12 * (t + 1)))
    if need > 1 << 28:  # reading the OS's figures costs more than a small search
        check_memory(need, f"beam_sizes {tuple(sizes)} for {B} requests")
