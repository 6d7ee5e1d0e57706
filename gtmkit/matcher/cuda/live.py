"""Paused ads on the GPU (docs/design.md §9): the active flags and the live counts per node are kept on the device
only, and a pause or resume runs there (kernels/live.cu): the ids are looked up in the sorted ad ids uploaded at
the first pause, and each flipped row's path counted with atomics. The host form (matcher/live.py) walks every
changed row on the CPU, tens of milliseconds for 100k ads; here it is two launches and two 8-byte reads."""

from __future__ import annotations

import threading

import cupy as cp
import numpy as np

from ...errors import RequestError
from ...index import int64_ids
from ..live import subtree_ad_counts
from .backend import KERNEL_DIR, _ptr
from ..._gpu import load_module

LIVE_FILE = KERNEL_DIR / "live.cu"
THREADS = 256
NONE = 2**64 - 1  # no unknown id


class DeviceLiveAds:
    """The paused-ad state of one CudaBackend, made at the first pause: node_live and ad_active replace the
    placeholders its pointer tables point to, and its live flag is set, so kernels and captured graphs read them
    from their next launch."""

    def __init__(self, backend, index):
        d = backend.d
        self.index, self.backend = index, backend
        N = index.num_ads
        counts = subtree_ad_counts(np.asarray(index.node_offsets, np.int64), np.asarray(index.sid_ad_offsets, np.int64),
                                   index.first_leaf, index.num_nodes)
        # the flags flip by a compare-and-swap of their aligned 4-byte word: the buffer ends on a word
        flags = cp.ones(-(-N // 4) * 4, cp.uint8)
        self.sorted_ids = cp.asarray(np.asarray(index.ad_ids_sorted, np.int64))
        self.rows_by_id = cp.asarray(np.asarray(index.ad_rows_by_id, np.int32))
        d["node_live"], d["ad_active"] = cp.asarray(counts), flags[:N]
        self._flags = flags
        self._mod = load_module(LIVE_FILE)
        self.k_rows = self._mod.get_function("live_rows_kernel")
        self.k_set = self._mod.get_function("live_set_kernel")
        self._scalars = cp.zeros(2, cp.uint64)  # first unknown id's position, rows flipped
        backend.params[17] = _ptr(d["node_live"])
        backend.ad_params[11] = _ptr(d["ad_active"])
        backend.nbytes += int(d["node_live"].nbytes + flags.nbytes + self.sorted_ids.nbytes + self.rows_by_id.nbytes)
        d["live"].fill(1)  # last: a kernel that sees the flag sees the arrays
        cp.cuda.get_current_stream().synchronize()
        self.num_paused = 0
        self.version = 0  # changes made (what a cached mask keys on)
        self._lock = threading.Lock()

    def set_active(self, ad_ids, active: bool) -> int:
        """Resume (active) or pause the ads with these ids; an unknown id is refused (RequestError naming it)
        before any change. Waits for the device, so the next call on any stream sees the change. -> ads whose
        state changed."""
        ids = int64_ids(ad_ids, "ad id")
        if ids.size == 0:
            return 0
        idx, d = self.index, self.backend.d
        n = len(ids)
        grid = (min(-(-n // THREADS), 65535),)
        with self._lock:
            dev_ids = cp.asarray(ids)
            rows = cp.empty(n, cp.int64)
            self._scalars[0], self._scalars[1] = np.uint64(NONE), np.uint64(0)
            self.k_rows(grid, (THREADS,), (dev_ids, np.int64(n), self.sorted_ids, self.rows_by_id,
                                           np.int64(len(self.sorted_ids)), rows, self._scalars))
            bad = int(self._scalars.get()[0])
            if bad != NONE:
                raise RequestError(f"unknown ad id {int(ids[bad])}")
            self.k_set(grid, (THREADS,), (rows, np.int64(n), d["node_offsets"], np.int64(d["node_offsets"].shape[0] - 1),
                                          d["sid_ad_offsets"], np.int64(idx.num_sids), np.int64(idx.first_leaf),
                                          d["ad_active"], d["node_live"], np.int32(bool(active)), self._scalars[1:]))
            changed = int(self._scalars.get()[1])  # waits for the kernel
            self.num_paused += -changed if active else changed
            self.version += 1
        return changed

    def paused_ids(self) -> np.ndarray:
        """int64: ids of the paused ads, ascending."""
        rows = cp.flatnonzero(self.backend.d["ad_active"] == 0).get()
        return np.sort(np.asarray(self.index.sid_ad_ids, np.int64)[rows])
