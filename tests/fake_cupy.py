"""A CPU stand-in for the parts of CuPy that gtmkit's CUDA backend uses, so that Matcher(index, "cuda") runs
its real host code (backend_cuda.py, matcher.py) with NumPy arrays as device memory and every RawModule
kernel on the CUDA emulation of cuda_emu.py. `installed()` puts it in sys.modules["cupy"] for a block.

The fake device reports compute capability 8.0 (so the backend takes the multi-kernel step of gtm_step.cu;
the fused step has its own emulation test with smaller clusters) and 2 multiprocessors (small grids)."""

from __future__ import annotations

import contextlib
import hashlib
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

from cuda_emu import build_emulator, launch


class DevArray(np.ndarray):
    """A NumPy array that answers like a CuPy one where the backend asks: .data.ptr and .get()."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def get(self):
        return np.array(self)


def _dev(a):
    return np.asarray(a).view(DevArray)


_rng = np.random.default_rng(0)


def empty(shape, dtype=np.float64):
    a = np.empty(shape, dtype)
    a.view(np.uint8).reshape(-1)[:] = _rng.integers(0, 256, a.nbytes, dtype=np.uint8)  # garbage, as on a GPU
    return _dev(a)


def zeros(shape, dtype=np.float64):
    return _dev(np.zeros(shape, dtype))


def asarray(a, dtype=None):
    return _dev(np.array(a, dtype=dtype, copy=True) if not isinstance(a, DevArray) else np.asarray(a, dtype))


def ascontiguousarray(a, dtype=None):
    return _dev(np.ascontiguousarray(a, dtype))


def arange(*a, **kw):
    return _dev(np.arange(*a, **kw))


def searchsorted(a, v, side="left"):
    return _dev(np.searchsorted(np.asarray(a), np.asarray(v), side))


def asnumpy(a):
    return np.array(a)


class _Function:
    def __init__(self, module, name):
        self.module, self.name = module, name
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid, block, args, shared_mem=0):
        lib, sigs = self.module.compiled()
        launch(lib, sigs, self.name, grid, int(block[0]), tuple(args), smem=int(shared_mem))


class RawModule:
    """The .cu text compiled once for the emulation (cached by its hash)."""

    _built = {}

    def __init__(self, code: str, options=()):
        self.code = code

    def compiled(self):
        key = hashlib.sha1(self.code.encode()).hexdigest()[:16]
        if key not in RawModule._built:
            work = Path(tempfile.mkdtemp(prefix="fake_cupy_"))
            src = work / "kernel.cu"
            src.write_text(self.code)
            RawModule._built[key] = build_emulator(work, src, {"GTMKIT_EMU": 1})
        return RawModule._built[key]

    def get_function(self, name):
        return _Function(self, name)


class _Device:
    id = 0
    compute_capability = "80"
    attributes = {"MultiProcessorCount": 2}

    def synchronize(self):
        pass


def _module():
    m = types.ModuleType("cupy")
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
                 "float64", "bool_", "ndarray"):
        setattr(m, name, getattr(np, name))
    for f in (empty, zeros, asarray, ascontiguousarray, arange, searchsorted, asnumpy):
        setattr(m, f.__name__, f)
    m.RawModule = RawModule
    m.from_dlpack = lambda x: _dev(np.from_dlpack(x))
    cuda = types.ModuleType("cupy.cuda")
    cuda.Device = _Device
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
    m.cuda = cuda
    return m


@contextlib.contextmanager
def installed(monkeypatch):
    """sys.modules["cupy"] is the fake inside the block; gtmkit's CUDA backend module is reloaded on it."""
    monkeypatch.setitem(sys.modules, "cupy", _module())
    monkeypatch.setitem(sys.modules, "cupy.cuda", sys.modules["cupy"].cuda)
    monkeypatch.delitem(sys.modules, "gtmkit.matcher.backend_cuda", raising=False)
    monkeypatch.setenv("GTMKIT_CUDA_STEP", "multi")
    yield
    sys.modules.pop("gtmkit.matcher.backend_cuda", None)  # no later import may see the fake-backed module
