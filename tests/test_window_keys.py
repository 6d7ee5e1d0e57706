"""window_keys.cuh's warp_first_key on the CUDA emulation: the smallest score key in [a, z) whose bin is at most a
given bin, checked against the bins numpy computes for the answer and the key below it (gtm_common.cuh's bin_of
in float32: floor((top - s) * 2048 / 64), clamped to the bins, -inf and below -3e38 in the last)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from cuda_emu import build_emulator, launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")

FB = 2048
K_NEG_INF, K_POS_INF = 0x007FFFFF, 0xFF800000  # sortable(-inf), sortable(+inf)


def unsortable(k: np.ndarray) -> np.ndarray:
    k = k.astype(np.uint32)
    return np.where(k & 0x80000000, k & 0x7FFFFFFF, ~k).astype(np.uint32).view(np.float32)


def bins_of(keys, top: np.float32) -> np.ndarray:
    s = unsortable(np.asarray(keys, np.uint64).astype(np.uint32))
    with np.errstate(invalid="ignore", over="ignore"):
        x = (np.float32(top) - s) * np.float32(FB / 64.0)
        b = np.where(x > 0, np.where(x < FB - 1, np.floor(np.where(np.isfinite(x), x, 0)), FB - 1), 0)
    return np.where(s > np.float32(-3.0e38), b, FB - 1).astype(np.int64)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    src = Path(__file__).with_name("kernels") / "window_keys_probe.cu"
    return build_emulator(tmp_path_factory.mktemp("window_keys"), src, {"GTMKIT_EMU": 1})


def test_first_key_is_the_bin_boundary(probe):
    lib, sigs = probe
    rng = np.random.default_rng(0)
    n = 400
    tops = np.concatenate([[0.0, -0.0, -1.5, 3.0, -60.0], rng.uniform(-80, 5, n - 5)]).astype(np.float32)
    bins = rng.integers(-1, FB + 1, n).astype(np.int32)
    lo = np.full(n, K_NEG_INF, np.uint32)
    hi = np.full(n, K_POS_INF + 1, np.uint32)
    # some narrower ranges, one of a single key and one empty
    sub = rng.random(n) < 0.3
    a = rng.integers(K_NEG_INF, K_POS_INF, n, dtype=np.uint64)
    b = np.minimum(a + rng.integers(0, 1 << 20, n, dtype=np.uint64), K_POS_INF + 1)
    lo[sub], hi[sub] = a[sub].astype(np.uint32), b[sub].astype(np.uint32)
    lo[-1], hi[-1] = hi[-1], hi[-1]
    lo[-2], hi[-2] = 0x80000000, 0x80000001
    out = np.zeros(n, np.uint32)
    launch(lib, sigs, "first_key_probe", (n * 32 + 127) // 128, 128, (tops, bins, lo, hi, out, np.int32(n)))
    for i in range(n):
        r, a_, z_ = int(out[i]), int(lo[i]), int(hi[i])
        assert a_ <= r <= max(a_, z_), i
        if r < z_:
            assert bins_of([r], tops[i])[0] <= bins[i], i  # inside
        if r > a_:
            assert bins_of([r - 1], tops[i])[0] > bins[i], i  # the key below is outside
    # every answer that is not the range's end lies on a bin edge somewhere: not all cases end at the range
    assert (out != hi).sum() > n // 4


def test_bins_fall_with_the_key():
    """What the search relies on: over the keys of non-NaN scores, a larger key never has a larger bin."""
    rng = np.random.default_rng(1)
    keys = np.sort(rng.integers(K_NEG_INF, K_POS_INF + 1, 200000, dtype=np.uint64))
    for top in (0.0, -3.25, 2.0, -70.0):
        assert (np.diff(bins_of(keys, np.float32(top))) <= 0).all()
