"""Kernel launches with programmatic dependent launch (PDL, sm_90+), through the driver's cuLaunchKernelEx.

CuPy launches a RawModule function without launch attributes. With CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_
SERIALIZATION the kernel may start before the one ahead of it in the stream has finished: its blocks take the
SMs the earlier kernel leaves free and wait at `griddepcontrol.wait` (GRID_DEP_WAIT in kernels/gtm_common.cuh)
until it has. Inside a captured CUDA graph that hides a launch's latency and block scheduling behind the
kernel before it. Only kernels whose code waits before touching an earlier kernel's data may be launched so
(the fused step and the post-filter kernels); GraphedBeamSearch does, for its own launches only, unless
CudaOptions(pdl=False)."""

from __future__ import annotations

import ctypes

import numpy as np

from ...errors import GtmkitError

_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID (cuda.h)


class _Value(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("flag", ctypes.c_int)]


class _Attribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _Value)]


class _Config(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attribute)), ("num_attrs", ctypes.c_uint)]


_SCALARS = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.uint32): ctypes.c_uint32,
            np.dtype(np.int64): ctypes.c_int64, np.dtype(np.uint64): ctypes.c_uint64,
            np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double}
_launch_ex = None


def _driver():
    global _launch_ex
    if _launch_ex is None:
        try:
            fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
        except (OSError, AttributeError) as exc:
            raise GtmkitError(f"PDL launch: the CUDA driver has no cuLaunchKernelEx ({exc})") from None
        fn.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        fn.restype = ctypes.c_int
        _launch_ex = fn
    return _launch_ex


def unavailable() -> str:
    """Why PDL launches cannot be used here ("" when they can): a CUDA driver without cuLaunchKernelEx (before
    CUDA 12)."""
    try:
        _driver()
    except GtmkitError as exc:
        return str(exc)
    return ""


def _dims(d) -> tuple:
    d = tuple(int(x) for x in d) + (1, 1)
    return d[:3]


def _function_ptr(func) -> int:
    """The CUfunction behind a CuPy kernel: RawModule.get_function gives a RawKernel, whose .kernel is the
    loaded cupy.cuda.function.Function (.ptr); a Function itself has .ptr."""
    inner = getattr(func, "kernel", None)
    ptr = getattr(inner, "ptr", None) if inner is not None else getattr(func, "ptr", None)
    if not ptr:
        raise GtmkitError(f"PDL launch: no CUfunction handle on {type(func).__name__}")
    return int(ptr)


def launch(func, grid, block, args, shared_mem: int = 0, stream=None) -> None:
    """func(grid, block, args, shared_mem=...) as CuPy would launch it, on `stream` (default: CuPy's current
    one), allowed to start before the kernel ahead of it finishes. args: CuPy arrays and NumPy scalars."""
    vals = []
    for a in args:
        if isinstance(a, np.generic):
            ct = _SCALARS.get(a.dtype)
            if ct is None:
                raise GtmkitError(f"PDL launch: no C type for a {a.dtype} argument")
            vals.append(ct(a.item()))
        elif hasattr(a, "data") and hasattr(a.data, "ptr"):
            vals.append(ctypes.c_void_p(a.data.ptr))
        else:
            raise GtmkitError(f"PDL launch: argument of type {type(a).__name__} (CuPy arrays and NumPy scalars only)")
    params = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.addressof(v) for v in vals])
    attr = _Attribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION)
    attr.value.flag = 1
    if stream is None:
        import cupy as cp
        stream = cp.cuda.get_current_stream()
    cfg = _Config((ctypes.c_uint * 3)(*_dims(grid)), (ctypes.c_uint * 3)(*_dims(block)), int(shared_mem),
                  ctypes.c_void_p(stream.ptr), ctypes.pointer(attr), 1)
    rc = _driver()(ctypes.byref(cfg), ctypes.c_void_p(_function_ptr(func)), params, None)
    if rc != 0:
        raise GtmkitError(f"PDL launch of {getattr(func, 'name', 'a kernel')}: cuLaunchKernelEx returned CUresult {rc}")
