"""One Matcher (one Index, one SuccinctTrie) called from several threads at once: every answer equals the
same call made from one thread, under the re-entrant layer gtmkit picks and under workqueue (serialised)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gtmkit import threads
from gtmkit.trie.trie import SuccinctTrie

from support.indexes import _build
from support.thread_work import run_threaded, work_items

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("threads")
    idx, _, _ = _build(tmp, 31, "dynamic", {"target_fill": 0.3, "k_max": 3}, n_ads=400, L=3, V=10)
    rng = np.random.default_rng(5)
    keys = [[int(x) for x in rng.integers(0, 9, size=rng.integers(1, 5))] for _ in range(300)]
    return idx, SuccinctTrie.build(keys), tmp


@pytest.mark.parametrize("selection", ["band", "buckets"])  # both top-k selections of the CPU step
def test_threads_share_one_matcher(served, selection):
    idx, trie, _ = served
    m, items = work_items(idx, trie, selection)
    assert run_threaded(items) == []


def test_layer_is_reentrant_or_serialised(served):
    """gtmkit asked for a re-entrant layer where one loads; launches are serialised only under workqueue."""
    idx, trie, _ = served
    work_items(idx, trie)[1][0]()  # a parallel kernel has run: the layer is known
    layer = threads.threading_layer()
    if "NUMBA_THREADING_LAYER" not in os.environ:
        assert layer in ("tbb", "omp") or not (threads._loads("tbb") or threads._loads("omp"))
    assert threads.serialised() == (layer == "workqueue")


def _serve_in_subprocess(layer: str, script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_THREADING_LAYER=layer, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow  # a child process with its own threading layer
def test_workqueue_launches_are_serialised(served):
    """workqueue aborts the process on concurrent parallel launches: under it gtmkit takes its lock, so
    the threaded run answers like a single thread and the process lives."""
    idx, _, _ = served
    script = (
        "import gtmkit, numba, numpy as np\n"
        "from gtmkit.trie.trie import SuccinctTrie\n"
        "from support import thread_work as T\n"
        f"idx = gtmkit.load_index({str(idx.path)!r})\n"
        "rng = np.random.default_rng(5)\n"
        "keys = [[int(x) for x in rng.integers(0, 9, size=rng.integers(1, 5))] for _ in range(300)]\n"
        "m, items = T.work_items(idx, SuccinctTrie.build(keys), seed=1)\n"
        "bad = T.run_threaded(items, rounds=2)\n"
        "print(numba.threading_layer(), gtmkit.threads.serialised(), bad)\n")
    out = _serve_in_subprocess("workqueue", script)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["workqueue", "True", "[]"], out.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_after_gnu_openmp_is_refused_in_one_line(served):
    """A child forked after GNU OpenMP ran cannot run a parallel kernel (numba would kill it with
    SIGTERM): gtmkit refuses with ThreadingLayerError; serial calls still work there."""
    idx, trie, _ = served
    m, items = work_items(idx, trie)
    items[0]()
    if threads.threading_layer() != "omp":
        pytest.skip("the layer here is not OpenMP")
    from numba.np.ufunc import omppool
    if omppool.openmp_vendor != "GNU":
        pytest.skip("OpenMP here is not GNU's")
    pid = os.fork()
    if pid == 0:  # the child: exit status says what happened
        code = 3
        try:
            items[0]()
            code = 1
        except threads.ThreadingLayerError as exc:
            ok = "forked after GNU OpenMP" in str(exc) and "\n" not in str(exc)
            code = 0 if ok and SuccinctTrie.lookup(trie, [0]) is not None else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_every_cpu_kernel_releases_the_gil_and_parallel_ones_take_the_guard():
    """A parallel kernel built with plain njit would skip the workqueue lock and the fork check, and one
    without nogil would hold the GIL, so threads could not overlap."""
    import re
    bad = []
    for path in sorted((ROOT / "gtmkit").rglob("*.py")):
        if path.name in ("threads.py", "trie/search_cuda.py"):  # the guard itself; the GPU trie host code
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"\s*@(?:numba\.)?njit\b(.*)", line)
            if m and ("parallel=True" in m.group(1) or "nogil=True" not in m.group(1)):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert bad == []
