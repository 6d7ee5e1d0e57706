"""calibrate_windows: the fused step's first GTM window per step from the pass rates a search saw; per_step_setting:
GraphedBeamSearch's per-step options."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmkit.matcher.cuda.params import FUSED_FIRST_WIN
from gtmkit.matcher.cuda.windows import WINDOW_MARGIN, calibrate_windows


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 1024), st.lists(st.tuples(st.integers(0, 10**6), st.floats(0, 1)), min_size=1, max_size=8))
def test_window_covers_the_lowest_rate_within_bounds(k, reqs):
    cd = np.array([c for c, _ in reqs], np.int64)
    passed = np.floor(cd * np.array([r for _, r in reqs])).astype(np.int64)
    (w,) = calibrate_windows([(cd, passed)], [1, k])
    assert isinstance(w, int) and k <= w <= FUSED_FIRST_WIN * k
    big = cd > k
    if not big.any():
        assert w == k  # every request is tested whole in one round
        return
    rate = (passed[big] / cd[big]).min()
    if rate <= 0:
        assert w == FUSED_FIRST_WIN * k  # nothing to go by: the default
    else:
        # the window holds the k passers the lowest rate needs, with the margin, unless capped
        assert w == FUSED_FIRST_WIN * k or w * rate >= WINDOW_MARGIN * k * (1 - 1e-12)
        # and is no wider than it needs to be
        assert w == k or w - 1 < WINDOW_MARGIN * k / rate


def test_requests_with_at_most_k_candidates_do_not_count():
    # request 1 passes nothing but has only k candidates: it is tested whole anyway
    cd, passed = np.array([5000, 64]), np.array([5000, 0])
    assert calibrate_windows([(cd, passed)], [1, 64]) == [80]  # 1.25 x 64 at a pass rate of 1
    assert calibrate_windows([(cd, np.array([2500, 0]))], [1, 64]) == [160]
    assert calibrate_windows([(np.array([10, 20]), np.array([0, 0]))], [1, 64]) == [64]


def test_each_step_uses_its_own_k():
    counts = [(np.array([512]), np.array([512])), (np.array([90000]), np.array([90000])),
              (np.array([86000]), np.array([30000]))]
    assert calibrate_windows(counts, [1, 512, 1024]) == [512, 1280, 3670]


def test_pass_counts_runs_the_step_without_and_with_gtm():
    from gtmkit.matcher.cuda.windows import pass_counts

    calls = []

    class Backend:  # records each step's (gtm, count_all) and returns a count naming the call
        def step(self, *args, **kw):
            gtm, count_all = args[8], args[9]
            calls.append((gtm, count_all, kw))
            return (None,) * 4 + (np.array([10 + gtm]),)

    cd, passed = pass_counts(Backend(), "n", "lp", 0, "bs", "rr", "qr", "q", 7, 9, rows_best_first=True)
    assert (cd[0], passed[0]) == (10, 11)
    assert calls == [(False, False, {"rows_best_first": True}), (True, True, {"rows_best_first": True})]


def test_per_step_settings():
    from gtmkit.errors import GtmkitError
    from gtmkit.matcher.cuda.windows import per_step_setting

    assert per_step_setting("gtm_windows", "auto", 3, 0, 0) == [0, 0, 0]
    assert per_step_setting("gtm_windows", None, 2, 0, 0) == [0, 0]
    assert per_step_setting("gtm_windows", (5, 0, np.int64(7)), 3, 0, 0) == [5, 0, 7]
    assert per_step_setting("x", [-1, 2], 2, -1, -1) == [-1, 2]
    for bad in ("fast", [1, 2], [-1, 0, 0], 4096, ["a"] * 3, np.zeros(3) - 1):
        with pytest.raises(GtmkitError, match="gtm_windows must be 'auto', None or 3 ints >= 0"):
            per_step_setting("gtm_windows", bad, 3, 0, 0)
