"""The fused step's first GTM window per step, sized from pass rates a search saw (GraphedBeamSearch's
gtm_windows="auto"), and its hot bins, sized from the windows' last bins (hot_bins="auto"). The window only sets
how lazily the step tests GTM: too small costs a request a second round (~10-20 us on an H200), too large tests
candidates the answer does not need (depth 2 of the 10M-SID benchmark passes ~100% of its candidates, so 1.25k
tests do where the default tests 4k). The hot bins only set where a round lists its candidates from: the short
list the expand keeps of the bins <= hot_bin, or every candidate again when a window reaches past them."""

from __future__ import annotations

import numpy as np

from ..errors import GtmkitError

from .beam import as_numpy
from .kernel_params import FUSED_BINS, FUSED_FIRST_WIN

WINDOW_MARGIN = 1.25  # first window = this x k over the lowest pass rate, so that rates a little lower still fit
HOT_MARGIN = 1.5      # hot bins = this x the bins the widest first window reached (bins are linear in the score)


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


def calibrate_hot_bins(first_his) -> list:
    """first_his: per step, the last bin of each request's first GTM window (the fused step's first_hi output) ->
    the hot bin of each step: HOT_MARGIN x the widest window's bins. A window that reached the last bin (every
    candidate, or none) does not count; when no request's window stops short of it, every bin is hot (a block
    whose candidates do not fit the hot list lists them all, as without one)."""
    out = []
    for his in first_his:
        his = as_numpy(his).astype(np.int64)
        inner = his[(his >= 0) & (his < FUSED_BINS - 1)]
        if not inner.size:
            out.append(FUSED_BINS - 1)
            continue
        out.append(int(min(FUSED_BINS - 1, np.ceil(HOT_MARGIN * (int(inner.max()) + 1)) - 1)))
    return out


def per_step_setting(name: str, value, L: int, low: int, unset: int) -> list:
    """GraphedBeamSearch's gtm_windows / hot_bins: "auto" or None -> L x `unset` (auto is calibrated by the
    warm-up); else L ints >= low; anything else is one clear error."""
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
