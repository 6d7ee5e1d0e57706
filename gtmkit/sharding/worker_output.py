"""Preloaded into the worker processes of a build's own local cluster (cluster.start_local): their stdout and
stderr go to /dev/null, as the build's error, if any, is the driver's one line; a worker would add distributed's
log lines or a traceback (one that restarts while the cluster closes, say)."""

from __future__ import annotations

import os


def _silence() -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
    finally:
        os.close(null)


_silence()
