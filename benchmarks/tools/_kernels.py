"""Shared by the GPU tools: a kernel file built from the working tree, another revision or a loose file, with
-D defines, and the variant specs that name such builds.

A variant is NAME[@SRC][:DEF=V,DEF,...]: SRC is a .cu file (beside its headers) or a git revision, whose
kernel sources (every .cu / .cuh under gtmkit/) are copied into a temporary folder and compiled from there;
without SRC the working tree's file. The kernels must take the working tree's arguments (the host code is
always the working tree's)."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_trees = {}  # revision -> the folder its kernel sources were copied into


@dataclass
class Variant:
    name: str
    src: str = ""  # "" (the working tree), a .cu file or a git revision
    defines: tuple = field(default_factory=tuple)

    @classmethod
    def parse(cls, spec: str) -> "Variant":
        head, _, defs = spec.partition(":")
        name, _, src = head.partition("@")
        return cls(name, src, tuple(d for d in defs.split(",") if d))

    def value(self, define: str, default: int) -> int:
        """The integer a NAME=V define sets (default when absent): launch sizes that follow a define (CL, NT)."""
        for d in self.defines:
            key, _, v = d.partition("=")
            if key == define and v:
                return int(v)
        return default

    def label(self) -> str:
        return f"{self.name}: {self.src or 'working tree'} {' '.join('-D' + d for d in self.defines)}".rstrip()


def revision_tree(rev: str) -> Path:
    """A folder holding revision `rev`'s kernel sources (.cu, .cuh under gtmkit/), flat: each file beside the
    headers it includes, whatever folder the revision kept them in."""
    if rev not in _trees:
        names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", rev, "gtmkit"],
                               check=True, capture_output=True, text=True).stdout.split()
        out = Path(tempfile.mkdtemp(prefix=f"kernels-{rev.replace('/', '_')}-"))
        atexit.register(shutil.rmtree, out, True)
        for name in names:
            if name.endswith((".cu", ".cuh")):
                data = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{name}"], check=True,
                                      capture_output=True).stdout
                (out / Path(name).name).write_bytes(data)
        _trees[rev] = out
    return _trees[rev]


def kernel_path(current: Path, src: str) -> Path:
    """The file to compile for the working tree's kernel file `current`: itself, a loose file, or the same-named
    file of a revision."""
    if not src:
        return current
    if src.endswith((".cu", ".cuh")) or Path(src).is_file():
        return Path(src)
    path = revision_tree(src) / current.name
    if not path.is_file():
        raise SystemExit(f"revision {src} has no {current.name} under gtmkit/")
    return path


def build(current: Path, v: Variant, extra: tuple = ()):
    """A CuPy RawModule of variant v's build of the kernel file `current` (plus the `extra` defines)."""
    import cupy as cp

    from gtmkit._gpu.source import SHARED_KERNELS, kernel_source
    path = kernel_path(current, v.src)
    options = ("--std=c++14", f"-I{path.parent}", f"-I{SHARED_KERNELS}", *(f"-D{d}" for d in v.defines + tuple(extra)))
    return cp.RawModule(code=kernel_source(path), options=options)


def use_fused(be, v: Variant, extra: tuple = ()) -> None:
    """Make a CUDA matcher backend launch variant v's build of the fused step (gtm_fused.cu); a CL or NT define
    sets the launch, else the build gets the backend's (so that kernel and launch agree)."""
    import gtmkit.matcher.cuda.backend as bc
    cl, nt = v.value("CL", be.fused_cluster), v.value("NT", be.fused_threads)
    given = {d.partition("=")[0] for d in v.defines}
    launch = tuple(f"{k}={x}" for k, x in (("CL", cl), ("NT", nt)) if k not in given)
    fn = build(bc.FUSED_FILE, v, launch + tuple(extra)).get_function("fused_step_kernel")
    fn.max_dynamic_shared_size_bytes = bc.FUSED_SMEM
    be.k_fused, be.fused_cluster, be.fused_threads = fn, cl, nt


def use_multi(be, v: Variant, extra: tuple = ()) -> None:
    """Make a CUDA matcher backend launch variant v's build of the multi-kernel step (gtm_step.cu)."""
    import gtmkit.matcher.cuda.backend as bc
    mod = build(bc.KERNEL_FILE, v, extra)
    for name in bc.STEP_KERNELS:
        setattr(be, "k_" + name, mod.get_function(name + "_kernel"))
