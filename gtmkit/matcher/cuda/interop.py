"""Arrays a GPU call is handed, from whatever library holds them: torch tensors through DLPack on the caller's
torch stream, CuPy and __cuda_array_interface__ arrays as they are, host data checked as on the CPU."""

from __future__ import annotations

from ..._args import floats, ids


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def on_device(x) -> bool:
    return hasattr(x, "__cuda_array_interface__") or (is_torch(x) and x.device.type == "cuda")


def host_ids(x, name: str, ndim: int = 1):
    """Ids a GPU call got from the host (lists, numpy, scalars): checked and converted as on the CPU, so that a
    string or an int past 64 bits is one line, not an upload's traceback; device arrays as they are."""
    return x if on_device(x) else ids(x, name, ndim)


def host_floats(x, name: str, ndim: int):
    """Scores a GPU call got without a dtype (lists, scalars): as on the CPU; arrays keep theirs (float16 stays)."""
    return floats(x, name, ndim) if getattr(x, "dtype", None) is None else x


def stream_of(x):
    """Run on the caller's torch stream when handed torch tensors, else on CuPy's current stream."""
    import contextlib

    if is_torch(x):
        import cupy as cp
        import torch
        ptr = torch.cuda.current_stream(x.device).cuda_stream
        from_external = getattr(cp.cuda.Stream, "from_external", None)
        return from_external(torch.cuda.current_stream(x.device)) if from_external else cp.cuda.ExternalStream(ptr)
    return contextlib.nullcontext()


def device_array(x, dtype):
    import cupy as cp

    if is_torch(x):
        x = cp.from_dlpack(x.detach())
    return cp.ascontiguousarray(cp.asarray(x), dtype=dtype)


def device_index(x):
    """Node ids on the device: int32 or int64 kept as they are (the fused step reads both), else int64."""
    import cupy as cp

    if is_torch(x):
        x = cp.from_dlpack(x.detach())
    x = cp.asarray(x)
    return cp.ascontiguousarray(x if x.dtype in (cp.int32, cp.int64) else x.astype(cp.int64))


def device_logprobs(x):
    """-> (contiguous device array, dtype code 0 float32 / 1 float16 / 2 bfloat16 bits)."""
    import cupy as cp

    if is_torch(x):
        import torch
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return cp.ascontiguousarray(cp.from_dlpack(x.contiguous().view(torch.int16))), 2
        x = cp.from_dlpack(x.contiguous())
    x = cp.asarray(x)
    if x.dtype == cp.float16:
        return cp.ascontiguousarray(x), 1
    return cp.ascontiguousarray(x, dtype=cp.float32), 0
