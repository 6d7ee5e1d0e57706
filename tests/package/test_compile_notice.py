"""A Python user's first call that compiles gtmkit's CPU kernels says so once (gtmkit.CompileNotice), and a call
that loads them from the cache says nothing; GTMKIT_COMPILE_NOTICE=0 silences it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE = """
import warnings, gtmkit
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    gtmkit.SuccinctTrie.build([[1, 2], [1, 3], [4]])
print(sum(issubclass(w.category, gtmkit.CompileNotice) for w in seen))
"""


def _notices(cache, **env) -> int:
    base = {k: v for k, v in os.environ.items() if k != "GTMKIT_COMPILE_NOTICE"}  # (a CLI run in this process sets it)
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env=dict(base, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), **env))
    assert r.returncode == 0, r.stderr[-2000:]
    return int(r.stdout.split()[-1])


@pytest.mark.slow
def test_a_cold_first_call_says_it_compiles_once(tmp_path):
    assert _notices(tmp_path / "cold") == 1  # several kernels compile: one notice
    assert _notices(tmp_path / "cold") == 0  # now cached
    assert _notices(tmp_path / "quiet", GTMKIT_COMPILE_NOTICE="0") == 0
