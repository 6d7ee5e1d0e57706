"""The decoder's fused GPU kernels (kernels/decoder_ops.cu) on torch tensors, launched on torch's current stream
(inside a torch.cuda.graph capture, the capturing one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .._gpu import load_module

KERNEL = Path(__file__).with_name("kernels") / "decoder_ops.cu"
DEFINES = {torch.bfloat16: ("ELEM_BF16=1",), torch.float16: ("ELEM_F16=1",), torch.float32: ()}
ATTN_THREADS = 256  # 8 warps a block, a warp a (row, head)
NORM_THREADS = 256  # NORM_THREADS in the kernel
LOGP_THREADS = 256  # LOGP_THREADS in the kernel
MAX_D = 4096        # d_model: MAX_NORM_GROUPS x 4 x NORM_THREADS
MAX_DK = 256        # d_kv: MAX_DK_LANE x 32
MAX_POS = 8         # SID positions: MAX_POS in the kernel


def _p(t) -> np.uint64:
    return np.uint64(0 if t is None else t.data_ptr())


class CudaOps:
    """residual: the residual stream's dtype (float32, or the element type itself)."""

    def __init__(self, dtype: torch.dtype, residual: torch.dtype = torch.float32):
        import cupy as cp
        self.cp = cp
        defines = DEFINES[dtype] + (("RES_ELEM=1",) if residual != torch.float32 else ())
        mod = load_module(KERNEL, defines)
        self.k_attn = mod.get_function("prefix_attention")
        self.k_norm = mod.get_function("add_rms_norm")
        self.k_logp = mod.get_function("log_probs")

    def _stream(self):
        s = torch.cuda.current_stream().cuda_stream
        from_external = getattr(self.cp.cuda.Stream, "from_external", None)
        return from_external(torch.cuda.current_stream()) if from_external else self.cp.cuda.ExternalStream(s)

    def prefix_attention(self, qkv, anc, bias, out, heads: int, d_kv: int) -> None:
        R, S = anc.shape
        warps = R * heads
        grid = (warps + ATTN_THREADS // 32 - 1) // (ATTN_THREADS // 32)
        with self._stream():
            self.k_attn((grid,), (ATTN_THREADS,), (_p(qkv), _p(anc), _p(bias), _p(out), np.int64(R), np.int32(heads),
                                                   np.int32(d_kv), np.int32(S)))

    def log_probs(self, logits, V: int, off: int, vocab: int, out) -> None:
        """out [R, vocab] fp32 = logits[:, off:off + vocab] - logsumexp(logits[:, :V]) (logits [R, >= V], rows
        contiguous)."""
        R = logits.shape[0]
        with self._stream():
            self.k_logp((R,), (LOGP_THREADS,), (_p(logits), np.int64(logits.stride(0)), np.int32(V), np.int32(off),
                                                np.int32(vocab), _p(out)))

    def add_rms_norm(self, x, y, w, out, eps: float, scale: float = 1.0, tokens=None) -> None:
        """x [R, D] (the residual) += y (or x = y[tokens]), out = T5 norm of x, times w and scale."""
        R, D = x.shape
        with self._stream():
            self.k_norm((R,), (NORM_THREADS,), (_p(x), _p(y), np.int64(y.stride(0) if y is not None else 0),
                                                 _p(tokens), _p(w), _p(out), np.int32(D), np.float32(eps),
                                                 np.float32(scale)))
