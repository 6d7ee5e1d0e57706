"""kernel_source: the text NVRTC compiles, headers inlined (CuPy's disk cache keys on that string only)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import gtmkit
from gtmkit._gpu.source import SHARED_KERNELS, kernel_source

SOURCES = sorted(Path(gtmkit.__file__).parent.rglob("*.cu"))


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_no_local_include_left(src):
    text = kernel_source(src)
    assert not re.search(r'^\s*#\s*include\s*"', text, re.M)
    for h in re.findall(r'^\s*#\s*include\s*"([^"]+)"', src.read_text(), re.M):
        header = src.parent / h if (src.parent / h).is_file() else SHARED_KERNELS / h
        assert header.read_text().strip().splitlines()[-1] in text  # its text is there


def test_headers_follow_pragma_once_across_branches(tmp_path):
    """A header met first in a branch the preprocessor skips is still compiled where it is reached, once."""
    (tmp_path / "h.cuh").write_text("#pragma once\nint twice_would_fail = 1;\n")
    (tmp_path / "k.cu").write_text('#if 0\n#include "h.cuh"\n#endif\n#include "h.cuh"\n#include "h.cuh"\nint main() { return twice_would_fail - 1; }\n')
    text = kernel_source(tmp_path / "k.cu")
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    (tmp_path / "flat.cpp").write_text(text)
    r = subprocess.run(["g++", "-E", str(tmp_path / "flat.cpp")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("int twice_would_fail = 1;") == 1


def test_missing_and_recursive_includes(tmp_path):
    (tmp_path / "a.cu").write_text('#include "nope.cuh"\n')
    with pytest.raises(FileNotFoundError, match="nope.cuh"):
        kernel_source(tmp_path / "a.cu")
    (tmp_path / "r.cuh").write_text('#include "r.cuh"\n')
    (tmp_path / "b.cu").write_text('#include "r.cuh"\n')
    with pytest.raises(ValueError, match="includes itself"):
        kernel_source(tmp_path / "b.cu")


@pytest.mark.slow  # nvcc compiles each source twice
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_inlined_source_compiles_to_the_same_ptx(src, tmp_path):
    flat = tmp_path / src.name
    flat.write_text(kernel_source(src))
    outs = []
    for path, extra in ((flat, []), (src, [f"-I{SHARED_KERNELS}"])):
        out = tmp_path / f"{len(outs)}.ptx"
        r = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "--std=c++14", *extra, str(path), "-o", str(out)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        outs.append([ln for ln in out.read_text().splitlines() if not ln.startswith("//")])
    assert outs[0] == outs[1]
