"""The GPU as both wings use it: whether CuPy sees a device, and a .cu file compiled for it. CuPy is imported
only when a kernel is loaded."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from .source import SHARED_KERNELS, kernel_source

log = logging.getLogger("gtmkit")

_modules = {}
_modules_lock = threading.Lock()


def cuda_available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device: all mean "no GPU"
        return False


def load_module(path: Path, defines: tuple = ()):
    """A cupy.RawModule of the .cu file compiled for the current device (NVRTC, once per device, file and
    defines ("NAME=VALUE"); CuPy caches to disk)."""
    import cupy as cp

    path = Path(path)
    device = cp.cuda.Device().id
    key = (device, str(path), tuple(defines))
    with _modules_lock:
        if key not in _modules:
            # the headers inlined (kernel_source: CuPy's disk cache keys on this string); the folders stay on the
            # include path all the same
            options = ("--std=c++14", f"-I{path.parent}", f"-I{SHARED_KERNELS}") + tuple(f"-D{d}" for d in defines)
            log.debug("gtmkit: loading %s%s for CUDA device %d", path.name,
                      f" ({', '.join(defines)})" if defines else "", device)
            _modules[key] = cp.RawModule(code=kernel_source(path), options=options)
        return _modules[key]
