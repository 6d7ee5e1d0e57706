"""matcher/cuda/pdl.py without a GPU: the launch structures have cuda.h's layout, and cuLaunchKernelEx (a stand-in
here) receives the grid, block, shared memory, stream, the programmatic-serialization attribute and every
argument by address with its C type."""

from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from gtmkit.errors import GtmkitError
from gtmkit.matcher.cuda import pdl


def test_layouts_match_cuda_h():
    assert ctypes.sizeof(pdl._Attribute) == 72  # id, pad[4], value (a 64-byte union)
    assert pdl._Attribute.value.offset == 8
    assert ctypes.sizeof(pdl._Config) == 56
    assert pdl._Config.stream.offset == 32 and pdl._Config.attrs.offset == 40 and pdl._Config.num_attrs.offset == 48


def test_launch_passes_everything(monkeypatch):
    seen = {}

    def fake(cfg_p, func, params, extra):
        cfg = cfg_p._obj
        seen["grid"], seen["block"] = tuple(cfg.grid), tuple(cfg.block)
        seen["smem"], seen["stream"], seen["func"] = cfg.shared_mem, cfg.stream, func.value
        a = cfg.attrs[0]
        seen["attr"] = (cfg.num_attrs, a.id, a.value.flag)
        types_ = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_uint64]
        seen["args"] = [ctypes.cast(params[i], ctypes.POINTER(t)).contents.value for i, t in enumerate(types_)]
        return 0

    monkeypatch.setattr(pdl, "_launch_ex", fake)
    arr = types.SimpleNamespace(data=types.SimpleNamespace(ptr=0xABC000))
    func = types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=0x1234), name="k")  # as CuPy's RawKernel
    pdl.launch(func, (96,), (1024,), (arr, np.int32(-7), np.int64(2**40), np.float32(1.5), np.uint64(0)), 4096,
               stream=types.SimpleNamespace(ptr=0x5000))
    assert seen["grid"] == (96, 1, 1) and seen["block"] == (1024, 1, 1) and seen["smem"] == 4096
    assert seen["stream"] == 0x5000 and seen["func"] == 0x1234
    assert seen["attr"] == (1, 6, 1)  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, on
    assert seen["args"] == [0xABC000, -7, 2**40, 1.5, 0]


def test_bad_argument_and_driver_error(monkeypatch):
    monkeypatch.setattr(pdl, "_launch_ex", lambda *a: 1)
    func = types.SimpleNamespace(ptr=1, name="k")
    s = types.SimpleNamespace(ptr=0)
    with pytest.raises(GtmkitError, match="argument of type int"):
        pdl.launch(func, (1,), (32,), (3,), stream=s)
    with pytest.raises(GtmkitError, match="no C type"):
        pdl.launch(func, (1,), (32,), (np.int8(3),), stream=s)
    with pytest.raises(GtmkitError, match="CUresult 1"):
        pdl.launch(func, (1,), (32,), (np.int32(3),), stream=s)
    with pytest.raises(GtmkitError, match="no CUfunction"):
        pdl.launch(types.SimpleNamespace(name="k"), (1,), (32,), (np.int32(3),), stream=s)


def test_unavailable_says_why(monkeypatch):
    monkeypatch.setattr(pdl, "_launch_ex", None)

    def no_driver(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(pdl.ctypes, "CDLL", no_driver)
    assert "no cuLaunchKernelEx" in pdl.unavailable()
    monkeypatch.setattr(pdl, "_launch_ex", lambda *a: 0)
    assert pdl.unavailable() == ""
