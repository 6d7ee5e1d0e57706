"""`CudaOptions`: how the GPU runs the CD+GTM step and the captured search, in one frozen value checked when it
is made. Answers never depend on these; only speed does. The defaults are what the kernels are tuned for."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields, replace

import numpy as np

from ..errors import GtmkitError
from .cuda.params import CUDA_STEPS, FUSED_CLUSTER, FUSED_THREAD_CHOICES, FUSED_THREADS, MAX_CLUSTER

# the keyword arguments these options replace, and the field each one sets
_OLD_KEYWORDS = {"cuda_step": "step", "fused_cluster": "cluster", "fused_threads": "threads", "pdl": "pdl",
                 "gtm_windows": "gtm_windows"}


@dataclass(frozen=True)
class CudaOptions:
    """step: "auto" (default: the fused single-launch step on compute capability 9.0 and newer, the multi-kernel
    pipeline before), "fused" (refused before 9.0) or "multi".
    cluster: the fused step's thread blocks a request, 1 to 8 (default 6).
    threads: the fused step's threads a block, 256, 512 or 1024 (default 1024). A cluster or block size other
    than the default compiles a kernel of its own at the first Matcher that uses it.
    pdl: GraphedBeamSearch launches its steps and post-filter with programmatic dependent launch. None
    (default): where the fused step runs and the driver has cuLaunchKernelEx; True: required (an error where
    it cannot); False: plain launches.
    gtm_windows: candidates the fused step's first GTM round tests, per step of a GraphedBeamSearch. "auto"
    (default): sized from the pass rates its warm-up search sees; None: 4 x k at every step; or one int per
    step (0: 4 x k)."""

    step: str = "auto"
    cluster: int = FUSED_CLUSTER
    threads: int = FUSED_THREADS
    pdl: bool | None = None
    gtm_windows: object = "auto"

    def __post_init__(self):
        if not isinstance(self.step, str) or self.step not in CUDA_STEPS:
            raise GtmkitError(f"CudaOptions.step must be 'auto', 'fused' or 'multi', got {self.step!r}")
        object.__setattr__(self, "cluster", _int(self.cluster, "cluster", range(1, MAX_CLUSTER + 1), "1 to 8"))
        object.__setattr__(self, "threads", _int(self.threads, "threads", FUSED_THREAD_CHOICES, "256, 512 or 1024"))
        if self.pdl is not None and not isinstance(self.pdl, (bool, np.bool_)):
            raise GtmkitError(f"CudaOptions.pdl must be None, True or False, got {self.pdl!r}")
        object.__setattr__(self, "gtm_windows", _windows(self.gtm_windows))


def _int(x, name: str, allowed, say: str) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or int(x) not in allowed:
        raise GtmkitError(f"CudaOptions.{name} must be an integer, {say}, got {x!r}")
    return int(x)


def _windows(w):
    if w is None or (isinstance(w, str) and w == "auto"):
        return w
    what = f"CudaOptions.gtm_windows must be 'auto', None or one int >= 0 a step, got {w!r}"
    if isinstance(w, (str, bytes)) or not hasattr(w, "__iter__"):
        raise GtmkitError(what)
    out = tuple(w)
    if not out or any(isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < 0 for x in out):
        raise GtmkitError(what)
    return tuple(int(x) for x in out)


def resolve(options, old: dict, where: str) -> CudaOptions:
    """The CudaOptions a constructor runs with: `options` (None: the defaults) with the keyword arguments these
    options replace (cuda_step=, fused_cluster=, ...) applied on top, each with a DeprecationWarning."""
    if options is None:
        options = CudaOptions()
    elif not isinstance(options, CudaOptions):
        raise GtmkitError(f"{where}: options must be a gtmkit.CudaOptions, got {type(options).__name__}")
    unknown = sorted(set(old) - set(_OLD_KEYWORDS))
    if unknown:
        raise GtmkitError(f"{where}: unknown argument {unknown[0]!r}")
    if not old:
        return options
    names = ", ".join(f"{k}= -> CudaOptions({_OLD_KEYWORDS[k]}=)" for k in old)
    warnings.warn(f"{where}: {names}; the keyword arguments go in the next release", DeprecationWarning, stacklevel=3)
    return replace(options, **{_OLD_KEYWORDS[k]: v for k, v in old.items()})


FIELDS = tuple(f.name for f in fields(CudaOptions))
