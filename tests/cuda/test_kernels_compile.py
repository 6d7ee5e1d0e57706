"""Every CUDA source compiles for sm_90 with nvcc wherever nvcc exists (no GPU needed)."""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "gtmkit" / "matcher" / "cuda" / "kernels"
SHARED = ROOT / "gtmkit" / "_gpu" / "kernels"  # the headers both wings include (cluster.cuh)
SOURCES = sorted(ROOT.joinpath("gtmkit").rglob("*.cu")) + sorted(ROOT.joinpath("benchmarks").rglob("*.cu"))


@functools.lru_cache(maxsize=None)
def _sm90(src: Path) -> subprocess.CompletedProcess:
    """src compiled for sm_90 with ptxas's report of each kernel (its spill stores): once a source, shared by the
    compile test and the spill budgets."""
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run(["nvcc", "-arch=sm_90", "-Xptxas", "-v", f"-I{KERNELS}", f"-I{SHARED}", "-c", str(src),
                               "-o", str(Path(tmp) / "k.o")], capture_output=True, text=True)


def _warnings(stderr: str) -> list:
    """nvcc's and ptxas's warnings (ptxas -v reports each kernel on "ptxas info" lines)."""
    return [ln for ln in stderr.splitlines() if "warning" in ln.lower()]


@pytest.mark.slow  # nvcc compiles, seconds a source
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_cu_compiles_for_sm90(src):
    r = _sm90(src)
    assert r.returncode == 0, r.stderr
    assert not _warnings(r.stderr), r.stderr


@pytest.mark.slow  # nvcc compiles, seconds a source
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_trie_search_compiles_without_clusters(tmp_path):
    """GPUs before sm_90 get the trie search with one block a query (CL=1): no cluster PTX."""
    src = next(p for p in SOURCES if p.name == "trie_search.cu")
    r = subprocess.run(["nvcc", "-arch=sm_80", "-DCL=1", f"-I{KERNELS}", f"-I{SHARED}", "-c", str(src), "-o", str(tmp_path / "k.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr


@pytest.mark.slow  # nvcc compiles, seconds a source
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", ["gtm_fused.cu", "trie_search.cu"])
def test_profile_builds_compile(name, tmp_path):
    """The profiling tools' builds (-DPROFILE=1: phase timestamps) compile for sm_90 without warnings."""
    src = next(p for p in SOURCES if p.name == name)
    r = subprocess.run(["nvcc", "-arch=sm_90", "-DPROFILE=1", f"-I{KERNELS}", f"-I{SHARED}", "-c", str(src), "-o",
                        str(tmp_path / "k.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr


def test_sources_found():
    assert any(p.name == "gtm_step.cu" for p in SOURCES)


# Spill budgets (bytes of spill stores, ptxas -v for sm_90, CUDA 13) of the latency-bound kernels: spills cost them
# speed (benchmarks/results/kernel_choices.md); a change that needs more must say why and be measured.
SPILL_BUDGET = {("gtm_fused.cu", "fused_step_kernel"): 16, ("trie_search.cu", "search_kernel"): 160,
                ("trie_search.cu", "serve_kernel"): 64, ("gtm_step.cu", "round_kernel"): 0,
                ("gtm_step.cu", "mask_kernel"): 0}


def _nvcc_release() -> str:
    if shutil.which("nvcc") is None:
        return ""
    import re

    m = re.search(r"release (\d+)\.", subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout)
    return m.group(1) if m else ""


@pytest.mark.slow  # nvcc compiles, seconds a source
@pytest.mark.skipif(_nvcc_release() != "13", reason="the budgets are ptxas figures of CUDA 13")
@pytest.mark.parametrize("name,kernel", sorted(SPILL_BUDGET), ids=lambda x: x)
def test_hot_kernels_stay_within_their_spill_budget(name, kernel):
    import re

    r = _sm90(next(p for p in SOURCES if p.name == name))
    assert r.returncode == 0, r.stderr
    # ptxas prints "Compiling entry function 'NAME'", then its properties with "N bytes spill stores"
    block = r.stderr.split(f"Compiling entry function '{kernel}'")[1].split("Compiling entry function")[0]
    spills = int(re.search(r"(\d+) bytes spill stores", block).group(1))
    assert spills <= SPILL_BUDGET[(name, kernel)], (kernel, spills)


# A trie label layout's kernels (search_cuda.trie_layout: each define compiled in where the trie has that layout)
# read their labels through a rank or a level table, and may spill this much more than format 2's (default) build.
LAYOUT_SPILL_EXTRA = 32


@functools.lru_cache(maxsize=None)
def _layout_build(defines: tuple) -> subprocess.CompletedProcess:
    src = next(p for p in SOURCES if p.name == "trie_search.cu")
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run(["nvcc", "-arch=sm_90", "-Xptxas", "-v", f"-I{KERNELS}", f"-I{SHARED}",
                               *(f"-D{d}" for d in defines), "-c", str(src), "-o", str(Path(tmp) / "k.o")],
                              capture_output=True, text=True)


@pytest.mark.slow  # nvcc compiles, seconds a layout
@pytest.mark.skipif(_nvcc_release() != "13", reason="the budgets are ptxas figures of CUDA 13")
@pytest.mark.parametrize("defines", [("TRIE_TAILS=1",), ("TRIE_LOW8=1", "TRIE_CONST=1"),
                                     ("TRIE_TAILS=1", "TRIE_LOW8=1", "TRIE_CONST=1")], ids="+".join)
def test_label_layout_builds_stay_within_their_spill_budget(defines):
    import re

    r = _layout_build(defines)
    assert r.returncode == 0 and not _warnings(r.stderr), r.stderr
    for kernel in ("search_kernel", "serve_kernel"):
        block = r.stderr.split(f"Compiling entry function '{kernel}'")[1].split("Compiling entry function")[0]
        spills = int(re.search(r"(\d+) bytes spill stores", block).group(1))
        assert spills <= SPILL_BUDGET[("trie_search.cu", kernel)] + LAYOUT_SPILL_EXTRA, (kernel, spills)

