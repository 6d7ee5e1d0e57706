"""Case functions with a known outcome, for the fuzz runner's own test (run by module:function name)."""

import ctypes
import os
import signal
import time

from gtmkit.errors import CatalogError
from gtmkit.testing.fuzz_core import OK_SAME, Wrong


def ok(rng, ctx):
    return OK_SAME


def crash(rng, ctx):
    ctx["note"] = "reads address 0"
    ctypes.string_at(0)


def abort(rng, ctx):
    os.kill(os.getpid(), signal.SIGABRT)


def hang(rng, ctx):
    while True:
        time.sleep(0.05)


def traceback(rng, ctx):
    return {}["missing"]


def multiline(rng, ctx):
    raise CatalogError("first line\nsecond line")


def refused(rng, ctx):
    raise CatalogError("catalog.parquet: column 'sid' row 3: null SID")


def wrong(rng, ctx):
    raise Wrong("answer differs")



def late_crash(rng, ctx):
    """Answers, then dies while the process winds down (as a corrupted heap does at a later free)."""
    import threading
    threading.Thread(target=lambda: (time.sleep(0.3), os.kill(os.getpid(), signal.SIGSEGV))).start()
    return OK_SAME
