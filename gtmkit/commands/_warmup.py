"""The demo's first run, shortened: while the demo synthesizes and builds its catalog on one core, a second
process compiles the kernels its evaluation and match use (numba caches them per user, gtmkit/_cache.py), on a
tiny index shipped with the package: data/warmup-index, built like the demo's (its schema and static
partition), so that the kernels' argument types, and so the cached machine code, are the ones the demo needs.

`python -m gtmkit.commands._warmup` is that process; `--make DIR` rebuilds the tiny index (after a format change)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

WARMUP_INDEX = Path(__file__).with_name("data") / "warmup-index"
BEAMS = (1, 512, 1024, 1024)  # the demo's


def start():
    """The warm-up process, or None when there is nothing to warm (no shipped index) or it cannot start."""
    if not WARMUP_INDEX.is_dir():
        return None
    try:
        return subprocess.Popen([sys.executable, "-m", "gtmkit.commands._warmup"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    except OSError:  # no process to spare: the demo compiles what it needs itself
        return None


def finish(proc, timeout: float = 300) -> None:
    """Wait for the warm-up (what it compiled is then in the cache); a warm-up that failed changes nothing."""
    if proc is None:
        return
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def stopping(proc):
    """Ends the warm-up with the block: a demo that fails leaves no process compiling behind it."""
    try:
        yield proc
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


def warm() -> None:
    """What the demo's evaluation and match run, once, on the tiny index (CPU kernels)."""
    from ..evaluate import evaluate
    from ..index import load_index
    from ..synth import synth_users
    from .match import match_user

    with load_index(WARMUP_INDEX) as index:
        users = synth_users(index.manifest["schema"], 3, 0)
        evaluate(index, users[:2], beams=BEAMS, device="cpu")
        match_user(index, users[-1], BEAMS, device="cpu", top=5)


def make(path) -> None:
    """Build the tiny index the warm-up runs on (as the demo builds its own)."""
    from ..indexer.build import build_index
    from ..synth import write_catalog

    with tempfile.TemporaryDirectory() as tmp:
        catalog, _ = write_catalog(Path(tmp) / "catalog.parquet", 300, seed=7)
        build_index(catalog, path, partition="static", k=[1, 4, 4, 2], overwrite=True).close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--make"]:
        make(sys.argv[2])
    else:
        warm()
