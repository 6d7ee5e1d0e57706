"""The fused step's first GTM window per step, sized from pass rates a search saw (GraphedBeamSearch's
gtm_windows="auto"). The window only sets how lazily the step tests GTM: too small costs a request a second
round, too large tests candidates the answer does not need (depth 2 of the 10M-SID benchmark passes ~100% of
its candidates, so 1.25k tests do where the default tests 4k)."""

from __future__ import annotations

import numpy as np

from ...errors import GtmkitError
from ..beam import as_numpy
from .params import FUSED_FIRST_WIN

WINDOW_MARGIN = 1.25  # first window = this x k over the lowest pass rate, so that rates a little lower still fit


def pass_counts(backend, node_ids, logprobs, lp_dtype, beam_scores, row_req, req_rows, q, k, max_children, **kw):
    """-> (candidates, candidates passing GTM) of each request at one step, as device arrays: the step run without
    GTM (its count is every candidate) and with GTM counting every bin (count_all). `backend` is a CudaBackend."""
    return tuple(backend.step(node_ids, logprobs, lp_dtype, beam_scores, row_req, req_rows, q, k, g, g, max_children,
                              **kw)[4] for g in (False, True))


def calibrate_window(cd, passed, k: int) -> int:
    """cd, passed: candidates and candidates passing GTM of each request at one step -> its first GTM window, in
    candidates: WINDOW_MARGIN x k over the lowest pass rate among the requests with more than k candidates,
    between k and FIRST_WIN x k (a request with fewer is tested whole in one round anyway)."""
    cd, passed = as_numpy(cd).astype(np.float64), as_numpy(passed).astype(np.float64)
    big = cd > k
    if not big.any():
        return int(k)
    rate = float((passed[big] / cd[big]).min())
    cap = FUSED_FIRST_WIN * k
    return cap if rate <= 0 else int(min(cap, max(k, np.ceil(WINDOW_MARGIN * k / rate))))


def calibrate_windows(counts, sizes) -> list:
    """counts: per step, (candidates, candidates passing GTM) of each request (numpy or CuPy) -> each step's
    calibrate_window, with that step's k (the next beam size; the last for the last step)."""
    L = len(sizes)
    return [calibrate_window(cd, passed, int(sizes[t + 1] if t + 1 < L else sizes[-1]))
            for t, (cd, passed) in enumerate(counts)]


def per_step_setting(name: str, value, L: int, low: int, unset: int) -> list:
    """A GraphedBeamSearch option given per step (gtm_windows): "auto" or None -> L x `unset` (auto is calibrated
    by the warm-up); else L ints >= low; anything else is one clear error."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return [unset] * L
    what = f"{name} must be 'auto', None or {L} ints >= {low}"
    if isinstance(value, str):
        raise GtmkitError(f"{what}, got {value!r}")
    try:
        out = [int(w) for w in value]
    except (TypeError, ValueError):
        raise GtmkitError(f"{what}, got {value!r}") from None
    if len(out) != L or min(out) < low:
        raise GtmkitError(f"{what}, got {tuple(value)}")
    return out
