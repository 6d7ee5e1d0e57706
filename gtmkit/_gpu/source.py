"""The source text NVRTC compiles for a .cu file: its local headers (#include "x.cuh") inlined.

Why: CuPy keys its on-disk kernel cache on the source string and the options, not on the headers NVRTC reads
through -I, so a changed header under an unchanged .cu would be served the old binary. Inlined, the string is
the whole program."""

from __future__ import annotations

import re
from pathlib import Path

SHARED_KERNELS = Path(__file__).with_name("kernels")  # headers both wings include (cluster.cuh)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*(?://.*)?$', re.M)
_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*$", re.M)


def kernel_source(path) -> str:
    """The text of `path` with every quoted include replaced by that file's text (found beside the including
    file, else in SHARED_KERNELS), recursively. Each inlined header sits inside an include guard of its own, which
    does what its #pragma once did: it is compiled once, at the first include the preprocessor reaches."""

    def expand(p: Path, stack: tuple) -> str:
        def sub(m):
            name = m.group(1)
            for d in (p.parent, SHARED_KERNELS):
                h = (d / name).resolve()
                if h.is_file():
                    break
            else:
                raise FileNotFoundError(f"{p}: #include \"{name}\" not found beside it or in {SHARED_KERNELS}")
            if h in stack:
                raise ValueError(f"{p}: #include \"{name}\" includes itself")
            guard = "GTMKIT_INLINED_" + re.sub(r"\W", "_", name).upper()
            body = _ONCE.sub("", expand(h, stack + (h,)))
            return f"#ifndef {guard}  // {name}, inlined\n#define {guard}\n{body}\n#endif  // {name}"
        return _INCLUDE.sub(sub, p.read_text())

    path = Path(path).resolve()
    return expand(path, (path,))
