"""The fused step's first GTM window per step, sized from pass rates a search saw (GraphedBeamSearch's
gtm_windows="auto"). The window only sets how lazily the step tests GTM: too small costs a request a second
round (~10-20 us on an H200), too large tests candidates the answer does not need (depth 2 of the 10M-SID
benchmark passes ~100% of its candidates, so 1.25k tests do where the default tests 4k)."""

from __future__ import annotations

import numpy as np

from .beam import as_numpy
from .kernel_params import FUSED_FIRST_WIN

WINDOW_MARGIN = 1.25  # first window = this x k over the lowest pass rate, so that rates a little lower still fit


def pass_counts(backend, node_ids, logprobs, lp_dtype, beam_scores, row_req, req_rows, q, k, max_children, **kw):
    """-> (candidates, candidates passing GTM) of each request at one step, as device arrays: the step run without
    GTM (its count is every candidate) and with GTM counting every bin (count_all). `backend` is a CudaBackend."""
    return tuple(backend.step(node_ids, logprobs, lp_dtype, beam_scores, row_req, req_rows, q, k, g, g, max_children,
                              **kw)[4] for g in (False, True))


def calibrate_windows(counts, sizes) -> list:
    """counts: per step, (candidates, candidates passing GTM) of each request (numpy or CuPy) -> the first GTM
    window of each step, in candidates: WINDOW_MARGIN x k over the lowest pass rate among the requests with more
    than k candidates, between k and FIRST_WIN x k (a request with fewer is tested whole in one round anyway)."""
    out = []
    L = len(sizes)
    for t, (cd, passed) in enumerate(counts):
        k = int(sizes[t + 1] if t + 1 < L else sizes[-1])
        cd, passed = as_numpy(cd).astype(np.float64), as_numpy(passed).astype(np.float64)
        big = cd > k
        if not big.any():
            out.append(k)
            continue
        rate = float((passed[big] / cd[big]).min())
        cap = FUSED_FIRST_WIN * k
        out.append(cap if rate <= 0 else int(min(cap, max(k, np.ceil(WINDOW_MARGIN * k / rate)))))
    return out
