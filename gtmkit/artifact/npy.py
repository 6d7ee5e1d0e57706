"""Reading .npy files without numpy's header parser: np.load reads the header's dict literal with
ast.literal_eval, which fails now and then when threads load at once (CPython gh-106905).

The format (numpy.lib.format): the magic b"\\x93NUMPY", a major and a minor version byte (1.0, 2.0 or 3.0), the
header's length (uint16 little-endian in 1.0, uint32 after), then the header: a Python dict literal
{'descr': ..., 'fortran_order': ..., 'shape': (...)} (latin-1 before 3.0, UTF-8 in it) padded with spaces and
a newline, then the data. Only arrays of one plain dtype are read; structured and object arrays are refused."""

from __future__ import annotations

import os
import re
from typing import NamedTuple

import numpy as np

from ..errors import ArtifactError

MAGIC = b"\x93NUMPY"
# (bytes of the header length, its encoding) by version
VERSIONS = {(1, 0): (2, "latin1"), (2, 0): (4, "latin1"), (3, 0): (4, "utf8")}
MAX_HEADER = 10_000  # numpy's own limit without allow_pickle; a plain array's header is ~100 bytes
KINDS = "biufcmMSU"  # bool, ints, floats, complex, dates and times, fixed-width strings: no pickle, no fields
_DESCR = re.compile(r"[<>|=]?[A-Za-z?][0-9]*(\[[A-Za-z0-9]+\])?")
_DEPTH = 8  # nesting a header may use; a plain one has a tuple in a dict
_ATOM = re.compile(r"[+-]?[0-9]+|True\b|False\b|None\b")


class NpyError(ArtifactError):
    """A .npy file whose header this reader refuses (the message names no file: the caller's does)."""


class Header(NamedTuple):
    """A .npy header: shape (tuple of int), fortran_order, dtype, offset (bytes before the data), version."""
    shape: tuple
    fortran_order: bool
    dtype: np.dtype
    offset: int
    version: tuple

    @property
    def count(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


def _short(v, limit: int = 60) -> str:
    r = repr(v)
    return r if len(r) <= limit else r[:limit - 3] + "..."


class _Literal:
    """A recursive-descent reader of the Python literals a .npy header holds: dicts, tuples, lists, quoted
    strings without escapes, integers, True, False, None."""

    def __init__(self, text: str):
        self.s, self.i = text, 0

    def fail(self, why: str):
        raise NpyError(f"the .npy header is not a dict literal ({why} at character {self.i})")

    def skip(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def peek(self) -> str:
        self.skip()
        return self.s[self.i] if self.i < len(self.s) else ""

    def expect(self, c: str) -> None:
        if self.peek() != c:
            self.fail(f"expected {c!r}")
        self.i += 1

    def value(self, depth: int = 0):
        if depth > _DEPTH:
            self.fail("nested too deeply")
        c = self.peek()
        if c == "{":
            return self.items("}", depth, pairs=True)
        if c == "(":
            return self.items(")", depth)
        if c == "[":
            return list(self.items("]", depth, tuple_=False))
        if c in "'\"":
            end = self.s.find(c, self.i + 1)
            if end < 0:
                self.fail("a string not closed")
            text = self.s[self.i + 1:end]
            if "\\" in text or "\n" in text:
                self.fail("a string with an escape")
            self.i = end + 1
            return text
        m = _ATOM.match(self.s, self.i)
        if not m:
            self.fail("an unexpected character" if c else "the end")
        self.i = m.end()
        word = m.group()
        if word in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[word]
        digits = word.lstrip("+-")
        if len(digits) > 20 or (len(digits) > 1 and digits[0] == "0"):  # Python refuses 007; no dimension is longer
            self.fail(f"the number {word[:24]}")
        return int(word)

    def items(self, close: str, depth: int, pairs: bool = False, tuple_: bool = True):
        """A bracketed sequence: {k: v, ...} as a dict, (a, ...) as a tuple ((a) is a itself), [...] as a list."""
        self.i += 1
        out, commas = [], 0
        while self.peek() != close:
            key = self.value(depth + 1)
            if pairs:
                self.expect(":")
                out.append((key, self.value(depth + 1)))
            else:
                out.append(key)
            if self.peek() != ",":
                break
            self.i += 1
            commas += 1
        self.expect(close)
        if pairs:
            d = {}
            for k, v in out:
                if not isinstance(k, str):
                    self.fail(f"a key {_short(k)}")
                if k in d:
                    self.fail(f"the key {k!r} twice")
                d[k] = v
            return d
        if tuple_ and len(out) == 1 and not commas:
            return out[0]
        return tuple(out)

    def whole(self):
        v = self.value()
        if self.peek():
            self.fail("text after the literal")
        return v


def parse_header(text: str) -> tuple:
    """(shape, fortran_order, dtype) of a .npy header's dict literal, checked as numpy checks it."""
    d = _Literal(text).whole()
    if not isinstance(d, dict):
        raise NpyError(f"the .npy header is not a dictionary: {_short(d)}")
    if set(d) != {"descr", "fortran_order", "shape"}:
        raise NpyError(f"the .npy header has the keys {sorted(d)}, expected descr, fortran_order, shape")
    shape, fortran, descr = d["shape"], d["fortran_order"], d["descr"]
    if not isinstance(shape, tuple) or not all(type(x) is int and x >= 0 for x in shape) or len(shape) > 64:
        raise NpyError(f"the .npy header's shape is not valid: {_short(shape)}")
    if not isinstance(fortran, bool):
        raise NpyError(f"the .npy header's fortran_order is not a bool: {_short(fortran)}")
    return shape, fortran, descr_dtype(descr)


def descr_dtype(descr) -> np.dtype:
    """The dtype of a plain descr string ('<u8', '|u1', '<f4'); structured and object dtypes are refused."""
    if not isinstance(descr, str):
        raise NpyError(f"the .npy header's descr {_short(descr)} is a structured dtype (only plain dtypes are read)")
    if not _DESCR.fullmatch(descr):
        raise NpyError(f"the .npy header's descr {_short(descr)} is not a plain dtype")
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError):
        raise NpyError(f"the .npy header's descr {_short(descr)} is not a dtype") from None
    if dtype.kind not in KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise NpyError(f"the .npy header's descr {descr!r} is a dtype of kind {dtype.kind!r} (an object, void or "
                       f"structured dtype is not read)")
    if dtype.itemsize == 0:
        raise NpyError(f"the .npy header's descr {descr!r} is a dtype of no size")
    return dtype


def _read(f, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise NpyError(f"the .npy file ends inside its {what} ({len(data)} of {n} bytes)")
    return data


def read_header(f) -> Header:
    """The header of the .npy file open in binary mode at f (read from its current position, which is left
    at the data)."""
    start = _read(f, len(MAGIC) + 2, "magic string")
    if start[:len(MAGIC)] != MAGIC:
        raise NpyError(f"not a .npy file (it starts {start[:len(MAGIC)]!r}, not {MAGIC!r})")
    version = (start[-2], start[-1])
    if version not in VERSIONS:
        raise NpyError(f"unsupported .npy version {version[0]}.{version[1]} (1.0, 2.0 and 3.0 are read)")
    width, encoding = VERSIONS[version]
    length = int.from_bytes(_read(f, width, "header length"), "little")
    if length > MAX_HEADER:
        raise NpyError(f"the .npy header is {length} bytes, more than the {MAX_HEADER} a plain array needs")
    try:
        text = _read(f, length, "header").decode(encoding)
    except UnicodeDecodeError as exc:
        raise NpyError(f"the .npy header is not {encoding} text (byte {exc.start})") from None
    shape, fortran, dtype = parse_header(text)
    return Header(shape, fortran, dtype, len(start) + width + length, version)


def load(path, mmap_mode: str | None = None) -> np.ndarray:
    """The array of a .npy file, as np.load(path, mmap_mode, allow_pickle=False) gives it: a np.memmap for
    mmap_mode 'r', 'c' or 'r+', else read into memory. The file must hold at least the data its header says."""
    if mmap_mode not in (None, "r", "c", "r+"):
        raise ValueError(f"mmap_mode must be None, 'r', 'c' or 'r+', got {mmap_mode!r}")
    with open(path, "r+b" if mmap_mode == "r+" else "rb") as f:
        h = read_header(f)
        size = os.fstat(f.fileno()).st_size
        if size - h.offset < h.nbytes:
            raise NpyError(f"the .npy data is {size - h.offset} bytes, its header says {h.nbytes}")
        order = "F" if h.fortran_order else "C"
        if mmap_mode is not None:
            try:
                return np.memmap(f, h.dtype, mmap_mode, h.offset, h.shape, order)
            except ValueError:  # an empty array whose data starts on a page boundary maps nothing
                if h.nbytes:
                    raise
        count = h.count
        flat = np.fromfile(f, h.dtype, count) if count else np.zeros(0, h.dtype)
        if len(flat) != count:
            raise NpyError(f"the .npy data ends after {len(flat)} of {count} values")
    arr = flat.reshape(h.shape, order=order)
    if mmap_mode == "r":
        arr.flags.writeable = False  # a map of nothing is as read-only as the map it stands for
    return arr
