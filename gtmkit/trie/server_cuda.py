"""A resident GPU trie search for serving NAR queries one at a time with no kernel launch a query.

`trie_beam_search(device="cuda")` replays a CUDA graph per call: at b=1 the launch and the wait for it are
a fixed cost beside a short search (benchmarks/results/trie_h200.md: graph against resident server). A TrieSearchServer
launches kernels/trie_search.cu's serve_kernel once: one thread block cluster stays resident (CL SMs) and
waits for requests in pinned host memory. `search` writes the proposals into the pinned staging, bumps
the request number and spins until the kernel marks it done; results are the same as
`trie_beam_search`'s for the same settings.

While a server runs, a device-wide synchronize (cupy.cuda.Device().synchronize()) waits for it forever:
close the server first (or use it as a context manager). It holds its own buffers and stream."""

from __future__ import annotations

import math
import time

import numpy as np

from ..errors import GtmkitError
from .search_cpu import _beam_width, _float, length_factors
from .search_cuda import (CL, FAC_CAP, _Buffers, _check_size, _checked, _fill_host, _trie_params, check_cluster, cuda_device, search_smem)

SERVE_STOP = 0xFFFFFFFF  # kernels/trie_search.cu


class TrieSearchServer:
    """b=1 NAR searches of `steps` proposal rows of K tokens each, with fixed beam width and settings, on a
    resident cluster. `search(tokens, logp)` takes [T, K] or [1, T, K] proposals and returns
    (key_ids int64 [1, BW], scores float32 [1, BW]) as trie_beam_search does. cluster: the thread blocks (SMs)
    the server holds, 1 to 8 (default 8; 1 before sm_90), as trie_beam_search's."""

    def __init__(self, trie, beam_width: int, steps: int, k: int, theta_tok: float = -math.inf,
                 theta_sent: float = -math.inf, alpha: float = 0.0, device=None, timeout: float = 10.0,
                 cluster: int = CL):
        what = "TrieSearchServer"
        cluster = check_cluster(cluster, what)
        self._dev = dev = device if device is not None else cuda_device(cluster)
        self.beam_width, self.steps, self.k = _beam_width(beam_width), int(steps), int(k)
        if not 1 <= self.steps <= FAC_CAP:
            raise GtmkitError(f"{what}: steps must be 1 to {FAC_CAP}, got {steps}")
        if not 1 <= self.k <= min(dev.nt, dev.sort_cap // 2):
            raise GtmkitError(f"{what}: K must be 1 to {min(dev.nt, dev.sort_cap // 2)}, got {k}")
        _check_size(self.beam_width, self.k, what)
        self._tt = np.float32(_float(theta_tok, "theta_tok"))
        self._ts = np.float32(_float(theta_sent, "theta_sent"))
        self._timeout = float(timeout)
        self._tp = _trie_params(dev, trie, what)
        nf = self.steps + 1
        self._buf = buf = _Buffers(dev, 1, self.beam_width, self.steps, self.k, nf)  # its own: the kernel keeps them
        buf.host[:8 * nf].view(np.float64)[:] = length_factors(_float(alpha, "alpha"), self.steps)
        self._ctl = dev.pinned(16).view(np.uint32)  # [0] request number (host), [1] last done (kernel)
        self._ctl[:] = 0
        self._seq = 0
        self._open = True
        if not getattr(dev, "synchronous", False):  # (the CPU emulation launches once a request instead)
            self._launch(0)

    def _launch(self, max_req: int) -> None:
        dev, buf = self._dev, self._buf
        n = self.steps * self.k
        args = (self._tp.table, buf.sp, buf.ptok, buf.plp, buf.pcnt, np.int32(self.steps), np.int32(self.k), self._ts,
                dev.host_ptr(buf.host[:8 * buf.nf].view(np.float64)), dev.host_ptr(buf.host_ids),
                dev.host_ptr(buf.host_scores), dev.host_ptr(buf.host[8 * buf.nf:8 * buf.nf + 8 * n].view(np.int32)),
                self._tt, dev.host_ptr(self._ctl), np.int32(max_req))
        if getattr(dev, "synchronous", False):  # the CPU emulation: a launch runs to its end, one request
            dev.launch("serve_kernel", dev.cl, args, smem=search_smem(dev), layout=self._tp.layout)
            return
        self._stream = dev.cp.cuda.Stream(non_blocking=True)
        with self._stream:
            dev.launch("serve_kernel", dev.cl, args, smem=search_smem(dev), layout=self._tp.layout)

    def search(self, tokens, logp) -> tuple:
        if not self._open:
            raise GtmkitError("TrieSearchServer.search: the server is closed")
        tokens, logp = np.asarray(tokens), np.asarray(logp)
        if tokens.ndim == 2 and logp.ndim == 2:  # one query's [T, K]
            tokens, logp = tokens[None], logp[None]
        tokens, logp = _checked(self._dev, tokens, logp, "TrieSearchServer.search", "T")
        if tokens.shape != (1, self.steps, self.k):
            raise GtmkitError(f"TrieSearchServer.search: proposals must be [1, {self.steps}, {self.k}] (or "
                              f"[{self.steps}, {self.k}]), got {list(tokens.shape)}")
        _fill_host(self._buf, tokens, logp, self.steps)
        self._seq = self._seq + 1 if self._seq + 1 < SERVE_STOP else 1
        ctl, seq = self._ctl, self._seq
        ctl[0] = seq  # after the staging (x86 stores stay in order; the kernel reads with acquire)
        if getattr(self._dev, "synchronous", False):
            self._launch(1)
        spins, start = 0, None
        while ctl[1] != seq:
            spins += 1
            if spins & 4095 == 0:
                start = start if start is not None else time.perf_counter()
                if time.perf_counter() - start > self._timeout:
                    self._open = False
                    raise GtmkitError(f"TrieSearchServer.search: no answer from the GPU in {self._timeout} s "
                                      "(the server kernel is not running)")
        return self._buf.host_ids.copy(), self._buf.host_scores.copy()

    def close(self) -> None:
        """Stop the kernel and wait for it (its buffers are then free)."""
        if not self._open:
            return
        self._open = False
        self._ctl[0] = SERVE_STOP
        stream = getattr(self, "_stream", None)
        start = time.perf_counter()
        while stream is not None and not stream.done:
            if time.perf_counter() - start > self._timeout:
                raise GtmkitError(f"TrieSearchServer.close: the server kernel did not stop in {self._timeout} s")
            time.sleep(1e-4)

    def __enter__(self) -> "TrieSearchServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to stop
            pass
