"""The one notice a Python user gets when gtmkit's CPU kernels compile (a first call after an install, or after the
numba cache was cleared): a call that would otherwise sit silent for tens of seconds says why, once a process.

Opt out with `warnings.filterwarnings("ignore", category=gtmkit.CompileNotice)` or GTMKIT_COMPILE_NOTICE=0."""

from __future__ import annotations

import os
import sys
import threading
import warnings

from numba.core import event

from ._cache import cache_dir


class CompileNotice(UserWarning):
    """gtmkit's CPU kernels are compiling (numba), once per install; later calls load them from the cache."""


_lock = threading.Lock()
_said = False


class _Listener(event.Listener):
    def on_start(self, ev):
        global _said
        fn = getattr(ev.data.get("dispatcher"), "py_func", None)
        if _said or not str(getattr(fn, "__module__", "")).startswith("gtmkit."):
            return
        with _lock:
            if _said:
                return
            _said = True
        if os.environ.get("GTMKIT_COMPILE_NOTICE", "1") != "0":
            warnings.warn(f"gtmkit: compiling its CPU kernels with numba, once per install (cached in {cache_dir()}):"
                          " this first call takes tens of seconds, later ones load them", CompileNotice,
                          stacklevel=_caller_level())

    def on_end(self, ev):
        pass


def _caller_level() -> int:
    """warnings.warn's stacklevel of the first frame outside numba and gtmkit: the user's call that compiles."""
    f, level = sys._getframe(2), 2
    while f is not None and f.f_globals.get("__name__", "").split(".")[0] in ("numba", "gtmkit", "llvmlite", "contextlib"):
        f, level = f.f_back, level + 1
    return level


event.register("numba:compile", _Listener())
