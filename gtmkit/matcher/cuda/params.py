"""The int64 tables of pointers and sizes the CD+GTM kernels receive (TP, QP in kernels/gtm_common.cuh),
and the fused step's scratch size, built the same way for the GPU (cuda/backend.py) and for the CPU
emulation of the kernels (tests/cuda/test_fused_emu.py). No CuPy here: `ptr(name)` gives the device address of
the array a table entry points to."""

from __future__ import annotations

import numpy as np

from ..arrays import RequestBatch, TrieArrays

CUDA_STEPS = ("auto", "fused", "multi")
FUSED_CLUSTER = 6              # blocks per request (CL in gtm_fused.cu)
FUSED_THREADS = 1024           # threads per block (NT in gtm_fused.cu)
FUSED_THREAD_CHOICES = (256, 512, 1024)  # NT >= 256 dividing the 2048 score bins (static_assert in gtm_fused.cu)
MAX_CLUSTER = 8                # the portable thread block cluster size
FUSED_SMEM = 64 * 1024         # dynamic shared memory per block, >= sizeof(Smem) (static_assert there)
FUSED_PROF_W = 64              # profile slots a request (PROF_W in gtm_fused.cu)
FUSED_FIRST_WIN = 4            # the first GTM window by default, in multiples of k (FIRST_WIN in gtm_fused.cu)


def trie_params(t: TrieArrays, ptr) -> np.ndarray:
    """TP: load_trie()'s order in gtm_common.cuh (node_live and live: the paused-ad state, TrieArrays)."""
    return np.array([
        ptr("node_offsets"), ptr("child_tokens"), ptr("level_offsets"), len(t.level_offsets), int(t.jagged),
        ptr("level_base"), ptr("level_width"), ptr("part_offsets"), ptr("part_bitmask"), ptr("part_bloom"),
        t.part_bloom.shape[1], ptr("bitmask_table"), t.bitmask_table.shape[1], ptr("bloom_table"),
        t.bloom_table.shape[1], ptr("bloom_base"), len(t.node_offsets) - 1, ptr("node_live"), ptr("live")], np.int64)


def request_params(q: RequestBatch, ptr) -> np.ndarray:
    """QP: load_req()'s order in gtm_common.cuh; "sparse" is the batch's sparse_req.sparse_images."""
    return np.array([ptr("bitmask"), q.bitmask.shape[1], ptr("sig_off"), ptr("sigs"), ptr("code_off"),
                     ptr("codes"), ptr("sparse")], np.int64)


def fused_scratch_slots(R: int, B: int, D: int, cluster: int) -> int:
    """Slots of each fused-step scratch array: request b's start at (first row + 2 * CL * b) * D rounded
    up to 32 (gtm_fused.cu's scratch layout), so every block region fits."""
    return (R + 2 * cluster * B) * (-(-D // 32) * 32)

