"""Reading a user's input files safely: regular files only (a FIFO or a device would block or never
end), UTF-8 text and JSON whose every problem is one line of the caller's error class."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import GtmkitError


def regular_file(path, error: type = GtmkitError, what: str = "file") -> Path:
    """The path if it names a regular file (symlinks followed); else one-line `error`. Never opens it."""
    if not isinstance(path, (str, os.PathLike)):
        raise error(f"a {what} path must be a string or a path, got {type(path).__name__}")
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise error(f"{path}: cannot read {what} ({getattr(exc, 'strerror', None) or exc})") from None
    if stat.S_ISDIR(mode):
        raise error(f"{path}: is a directory, expected a {what}")
    if not stat.S_ISREG(mode):
        raise error(f"{path}: not a regular file (a FIFO, socket or device), expected a {what}")
    return p


def read_text(path, error: type = GtmkitError, what: str = "file") -> str:
    """A regular file's content decoded as UTF-8."""
    p = regular_file(path, error, what)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def _no_duplicates(pairs: list) -> dict:
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"key {k!r} appears twice in one object")
        d[k] = v
    return d


def parse_json(text: str, error: type = GtmkitError, where: str = "input") -> Any:
    """json.loads with every failure (syntax, a key given twice, nesting too deep, an integer too long
    to convert) as one line naming `where`."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise error(f"{where}: not valid JSON (nested too deeply)") from None
    except ValueError as exc:
        raise error(f"{where}: not valid JSON ({str(exc).splitlines()[0]})") from None


def utf8_problem(s: str) -> str | None:
    """Why s cannot be written as UTF-8 (a lone surrogate such as '\\ud800'), or None."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds a lone surrogate {s[exc.start]!r} at position {exc.start}, which UTF-8 cannot encode"
    return None


def short_repr(v: Any, limit: int = 60) -> str:
    """A one-line repr of a value a user gave, cut to `limit` characters (values may be huge or deep)."""
    try:
        r = repr(v)
    except (ValueError, RecursionError):  # an int past the str-conversion limit; nesting past the stack
        return f"a {type(v).__name__} too large to print"
    return r if len(r) <= limit else r[:limit - 3] + "..."
