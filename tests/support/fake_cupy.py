"""A CPU stand-in for the parts of CuPy that gtmkit's CUDA backend uses, so that Matcher(index, "cuda") runs
its real host code (cuda/backend.py, matcher.py) with NumPy arrays as device memory and every RawModule
kernel on the CUDA emulation of cuda_emu.py. `installed()` puts it in sys.modules["cupy"] for a block.

The fake device reports 2 multiprocessors (small grids) and compute capability 8.0 (the multi-kernel step of
gtm_step.cu) or, on request, 9.0 (the fused step, with small clusters: installed(fused_cluster=...))."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import shutil
import sys
import tempfile
import threading
import types
from pathlib import Path

import numpy as np

from gtmkit.matcher.options import CudaOptions
from support.cuda_emu import build_emulator, garbage, launch


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
    return _dev(garbage(shape, dtype, _rng))


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


# One emulated launch at a time, as a device runs a queue's kernels in turn (the emulation's barriers and shared
# memory are process-wide); host threads interleave between launches.
_launch_lock = threading.Lock()


class _Function:
    def __init__(self, module, name):
        self.module, self.name = module, name
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid, block, args, shared_mem=0):
        if shared_mem > 48 * 1024 and shared_mem > self.max_dynamic_shared_size_bytes:
            raise RuntimeError(f"{self.name}: {shared_mem} B of dynamic shared memory without opting in "
                               "(CUDA_ERROR_INVALID_VALUE on a device)")
        lib, sigs = self.module.compiled()
        with _launch_lock:
            launch(lib, sigs, self.name, grid, int(block[0]), tuple(args), cluster=self.module.cluster,
                   smem=int(shared_mem))


class RawModule:
    """The .cu text compiled once for the emulation (cached by its hash and -D options). A file whose kernels
    declare __cluster_dims__(CL, 1, 1) launches clusters of CL blocks (8 unless -DCL= says otherwise)."""

    _built = {}

    def __init__(self, code: str, options=()):
        self.code = code
        self.defines = {"GTMKIT_EMU": "1"}
        for o in options:
            if o.startswith("-D"):
                name, _, value = o[2:].partition("=")
                self.defines[name] = value or "1"
        self.cluster = int(self.defines.get("CL", 8)) if "__cluster_dims__(CL" in code else 1

    def compiled(self):
        key = hashlib.sha1((self.code + repr(sorted(self.defines.items()))).encode()).hexdigest()[:16]
        if key not in RawModule._built:
            work = Path(tempfile.mkdtemp(prefix="fake_cupy_"))
            atexit.register(shutil.rmtree, work, True)  # the library stays loaded after its file is gone
            src = work / "kernel.cu"
            src.write_text(self.code)
            RawModule._built[key] = build_emulator(work, src, self.defines)
        return RawModule._built[key]

    def get_function(self, name):
        return _Function(self, name)


class _Device:
    id = 0
    compute_capability = "80"  # installed(..., fused_cluster=n) makes it 90
    attributes = {"MultiProcessorCount": 2}

    def synchronize(self):
        pass


_NULL_STREAM = types.SimpleNamespace(ptr=0, synchronize=lambda: None)
_current = threading.local()


class Stream:
    """A stream handle (a distinct ptr); `with stream:` makes it the thread's current one, as in CuPy. Kernels run
    at launch, so nothing is ordered by it: the backend's per-stream scratch buffers are what it tests."""

    _count = 0

    def __init__(self, non_blocking=False):
        Stream._count += 1
        self.ptr = 0x1000 + 16 * Stream._count

    def __enter__(self):
        _current.stack = getattr(_current, "stack", []) + [self]
        return self

    def __exit__(self, *exc):
        _current.stack = _current.stack[:-1]

    def synchronize(self):
        pass


def get_current_stream():
    stack = getattr(_current, "stack", None)
    return stack[-1] if stack else _NULL_STREAM


def _numpy_on_device(name):
    """NumPy's function of that name, its array results as device arrays."""
    f = getattr(np, name)
    if not callable(f):
        raise AttributeError(name)

    def on_device(*a, **kw):
        r = f(*a, **kw)
        return _dev(r) if isinstance(r, np.ndarray) else r
    return on_device


def _module():
    m = types.ModuleType("cupy")
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
                 "float64", "bool_", "ndarray"):
        setattr(m, name, getattr(np, name))
    for f in (empty, zeros, asarray, ascontiguousarray, arange, searchsorted, asnumpy):
        setattr(m, f.__name__, f)
    m.RawModule = RawModule
    m.__getattr__ = _numpy_on_device  # the array functions the host code uses (beam_search: full, repeat, where...)
    m.from_dlpack = lambda x: _dev(np.from_dlpack(x))
    cuda = types.ModuleType("cupy.cuda")
    cuda.Device = _Device
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
    cuda.get_current_stream = get_current_stream
    cuda.Stream = Stream
    m.cuda = cuda
    return m


@contextlib.contextmanager
def installed(monkeypatch, fused_cluster: int = 0):
    """sys.modules["cupy"] is the fake inside the block; gtmkit's CUDA backend module is reloaded on it. Yields
    the Matcher keyword arguments of the step to test: with fused_cluster, the device reports compute capability
    9.0 and they ask for the fused step with clusters of that many blocks of 256 threads (emulated threads are CPU
    threads: blocks stay small); else for the multi-kernel step."""
    m = _module()
    if fused_cluster:
        m.cuda.Device = type("_Hopper", (_Device,), {"compute_capability": "90"})
        step = dict(options=CudaOptions(step="fused", cluster=fused_cluster, threads=256))
    else:
        step = dict(options=CudaOptions(step="multi"))
    monkeypatch.setitem(sys.modules, "cupy", m)
    monkeypatch.setitem(sys.modules, "cupy.cuda", m.cuda)
    monkeypatch.delitem(sys.modules, "gtmkit.matcher.cuda.backend", raising=False)
    yield step
    sys.modules.pop("gtmkit.matcher.cuda.backend", None)  # no later import may see the fake-backed module
