"""The synthetic decoder (logits.py) on the GPU: CuPy arrays, no host synchronisation, capturable in a
CUDA graph (matcher/cuda/graph.py)."""

from __future__ import annotations

from pathlib import Path

import cupy as cp
import numpy as np

from .._gpu import load_module
from .logits import DEFAULT_PEAK, SyntheticDecoder

DECODER_KERNELS = Path(__file__).with_name("kernels") / "decoder.cu"


class GpuSyntheticDecoder:
    """gtmkit.synth.logits.SyntheticDecoder on the GPU (same hash and boosts; log/exp in device precision).

    Keeps one buffer set per step, so after the first search it allocates nothing (graph-safe)."""

    def __init__(self, users, vocab: int, kind: str = "peaked", seed: int = 0, peak: float = DEFAULT_PEAK,
                 scale: float = 1.0):
        host = SyntheticDecoder(users, vocab, kind, seed, peak, scale)
        self.vocab, self.scale = int(vocab), float(scale)
        self.user_keys = cp.asarray(host.user_keys)
        self.boosts = cp.asarray(host.boosts)
        mod = load_module(DECODER_KERNELS)
        self.k_extend = mod.get_function("extend_keys")
        self.k_logits = mod.get_function("synthetic_logits")
        self._bufs = {}
        self._keys = None

    def __call__(self, step, prev_tokens, parent_rows):
        R = int(parent_rows.shape[0])
        bufs = self._bufs.get(step)
        if bufs is None or bufs[0].shape[0] != R:
            bufs = (cp.empty(R, cp.uint64), cp.empty(R, cp.int64), cp.empty((R, self.vocab), cp.float32))
            self._bufs[step] = bufs
        keys, boost_row, out = bufs
        old = self._keys if self._keys is not None else self.user_keys
        grid = ((R + 255) // 256,)
        self.k_extend(grid, (256,), (old, self.user_keys, parent_rows, prev_tokens, np.int32(step), np.int64(R),
                                     keys, boost_row))
        self.k_logits((R,), (128,), (keys, boost_row, self.boosts, np.int32(self.vocab), np.float32(self.scale), out))
        self._keys = keys
        return out
