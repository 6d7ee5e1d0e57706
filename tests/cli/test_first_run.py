"""First run: numba's cache lands in the per-user folder (or NUMBA_CACHE_DIR), never inside the package,
and the CLI announces the first compile once."""

import os
import subprocess
import sys
from pathlib import Path

import gtmkit
import pytest

PKG = Path(gtmkit.__file__).resolve().parent
ROOT = PKG.parent
# a small cached kernel: compiles in about a second
SCRIPT = ("import numpy as np, gtmkit; from gtmkit.matcher.cpu.select import _kth_smallest; "
          "_kth_smallest(np.arange(5, dtype=np.float32), np.int64(5), np.int64(2))")


def _run(env, *args):
    env = {**{k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")},
           "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=240)


def _cache_files(folder):
    return [p for p in Path(folder).rglob("*") if p.suffix in (".nbi", ".nbc")]


@pytest.mark.slow  # a child process with its own cache folder compiles
def test_cache_goes_to_xdg_cache_home(tmp_path):
    before = set(_cache_files(PKG))
    r = _run({"XDG_CACHE_HOME": str(tmp_path)}, "-c", SCRIPT)
    assert r.returncode == 0, r.stderr
    v = sys.version_info
    assert _cache_files(tmp_path / "gtmkit" / f"numba-{gtmkit.__version__}-py{v[0]}{v[1]}")
    assert set(_cache_files(PKG)) == before  # nothing new inside the package


@pytest.mark.slow  # a child process with its own cache folder compiles
def test_numba_cache_dir_is_honoured(tmp_path):
    r = _run({"NUMBA_CACHE_DIR": str(tmp_path / "nb"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}, "-c", SCRIPT)
    assert r.returncode == 0, r.stderr
    assert _cache_files(tmp_path / "nb") and not (tmp_path / "xdg").exists()


@pytest.mark.slow  # a child process with its own cache folder compiles
def test_numba_imported_first_still_uses_the_user_cache(tmp_path):
    r = _run({"XDG_CACHE_HOME": str(tmp_path)}, "-c", "import numba; " + SCRIPT)
    assert r.returncode == 0, r.stderr
    assert _cache_files(tmp_path / "gtmkit")


@pytest.mark.slow  # child processes: a first compile, then a warm run
def test_cli_announces_the_first_compile_once(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "nb")}
    cli = ("-m", "gtmkit.cli")
    r = _run(env, *cli, "synth", "keys", "-n", "300", "--vocab", "1000", "-o", str(tmp_path / "k.parquet"))
    assert r.returncode == 0 and "compiling kernels" not in r.stderr, r.stderr  # compiles nothing
    r = _run(env, *cli, "trie", "build", str(tmp_path / "k.parquet"), "-o", str(tmp_path / "t"), "-s")
    assert r.returncode == 0, r.stderr
    args = (*cli, "synth", "proposals", "--trie", str(tmp_path / "t"), "-b", "1", "-T", "3", "-K", "5", "-o")
    first = _run(env, *args, str(tmp_path / "p1.npz"))
    assert first.returncode == 0, first.stderr
    assert "compiling kernels, once per install, ~" in first.stderr
    second = _run(env, *args, str(tmp_path / "p2.npz"))
    assert second.returncode == 0 and "compiling kernels" not in second.stderr, second.stderr
    help_run = _run({"NUMBA_CACHE_DIR": str(tmp_path / "other")}, *cli, "demo", "--help")
    assert help_run.returncode == 0 and "compiling kernels" not in help_run.stderr


def test_warmup_index_is_the_demos_layout():
    """The tiny index the demo's first run warms up on loads as any artifact does, with the demo's partition."""
    from gtmkit.commands._warmup import WARMUP_INDEX

    with gtmkit.load_index(WARMUP_INDEX) as index:
        assert index.partition_layout["kind"] == "fixed" and index.sid_length == 4 and index.vocab_size == 512
        part = index.stats()["partition"]
        assert (part["mode"], part["k"]) == ("static", [1, 4, 4, 2])


# After the warm-up process, a demo-like evaluation and match compile nothing: every kernel they use is a cache
# hit, so the warm-up compiled the types the demo needs (a mismatch would compile again, in the demo).
EVAL_AFTER_WARMUP = """
import json, tempfile
import gtmkit
from gtmkit.commands.match import match_user
from gtmkit.evaluate import evaluate
from gtmkit.matcher.cpu import step
from gtmkit import evaluate as ev_mod
from gtmkit.synth import synth_users, write_catalog
tmp = tempfile.mkdtemp()
catalog, _ = write_catalog(tmp + "/catalog.parquet", 2000, seed=3)
index = gtmkit.build_index(catalog, tmp + "/index", partition="static", k=[1, 4, 4, 2])
users = synth_users(index.manifest["schema"], 3, 1)
evaluate(index, users[:2], device="cpu")
match_user(index, users[-1], (1, 512, 1024, 1024), device="cpu", top=5)
kernels = {"step": step.step_kernel, "postfilter": step.postfilter_kernel, "recall": ev_mod._recall}
print(json.dumps({k: [len(f.stats.cache_hits), sum(f.stats.cache_misses.values())] for k, f in kernels.items()}))
"""


@pytest.mark.slow  # the warm-up's whole first compile, in a child process
def test_warmup_compiles_what_the_demo_runs(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "nb")}
    r = _run(env, "-m", "gtmkit.commands._warmup")
    assert r.returncode == 0, r.stderr
    r = _run(env, "-c", EVAL_AFTER_WARMUP)
    assert r.returncode == 0, r.stderr
    import json
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    assert all(hits >= 1 and misses == 0 for hits, misses in stats.values()), stats
