"""The fused GPU step without a GPU: kernels/gtm_fused.cu (thread block clusters, distributed shared
memory) runs on the CPU through the CUDA emulation of tests/support/cuda_emu.py, fed the same pointer tables as
on the device (gtmkit/matcher/cuda/params.py), and must equal the CPU matcher's step exactly. The
configurations shrink the cluster and block (CL, NT) and the direct-ranking cap (GT_CAP, so that a
crowded bin goes through the radix select on small inputs)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from gtmkit.matcher.cuda.params import FUSED_PROF_W, FUSED_SMEM, fused_scratch_slots, request_params, trie_params
from gtmkit.matcher.matcher import Matcher
from gtmkit.matcher.cuda.sparse_req import Caps, sparse_images

from support.catalogs import random_user
from support.cuda_emu import KERNEL_DIR, build_emulator, garbage, launch
from support.step_cases import step_case
from support.indexes import MODES, _build

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")

CONFIGS = {
    # a first GTM window of k candidates, so that small inputs take later rounds; the profile's counts (PROFILE:
    # the rounds a request took, which the tests read). Here and in "crowded" every row's out-degree is below
    # WEXP_MIN_DEG: the expand finds each candidate's row by binary search
    "cl2": dict(GTMKIT_EMU=1, CL=2, NT=256, EU=2, FIRST_WIN=1, PROFILE=1),
    # sparse request lists too short for some requests, which take the full GTM test; built as shipped (no
    # profile)
    "crowded": dict(GTMKIT_EMU=1, CL=4, NT=256, GT_CAP=4, SP_P=3, SP_S=2, SP_Q=9),
    # expand a warp per row for any batch (the device does so for wide rows only); a cluster size that does
    # not divide the bin count
    "warp3": dict(GTMKIT_EMU=1, CL=3, NT=256, EU=2, WEXP_MIN_DEG=1, WEXP_MIN_ROWS=1, PROFILE=1),
}


class FusedEmu:
    """Matcher.step's arguments -> the emulated fused kernel's Step arrays (parent, token, node, score,
    count), the buffers filled with garbage first as the device's would be."""

    def __init__(self, name, lib, sigs, cfg):
        self.name, self.lib, self.sigs, self.cl, self.nt = name, lib, sigs, cfg["CL"], cfg["NT"]
        self.profiled = bool(cfg.get("PROFILE"))
        self.caps = Caps(*(cfg.get(f"SP_{n}", d) for n, d in zip(("A", "P", "NB", "S", "Q"), Caps())))
        self.rng = np.random.default_rng(0)
        self.rounds = []

    def _garbage(self, shape, dtype):
        return garbage(shape, dtype, self.rng)

    def step(self, m: Matcher, node_ids, logprobs, beam_scores, row_request, requests, k, gtm=True, count=False,
             lp_dtype=0, first_win=None):
        t, q = m.arrays, m.batch(requests)
        tarr = {n: np.ascontiguousarray(getattr(t, n)) for n in t._fields if n != "jagged"}
        qarr = {n: np.ascontiguousarray(getattr(q, n)) for n in q._fields}
        qarr["sparse"] = sparse_images(q, self.caps).view(np.uint64)  # at this configuration's capacities
        tp = trie_params(t, lambda n: tarr[n].ctypes.data)
        qp = request_params(q, lambda n: qarr[n].ctypes.data)
        R, B = len(node_ids), q.size
        D = int(max(m.index.max_degree))
        slots = fused_scratch_slots(R, B, D, self.cl)
        scratch = [self._garbage(slots, np.uint64), self._garbage(slots, np.int32), self._garbage(slots, np.uint64),
                   self._garbage(slots, np.uint64), self._garbage((B, k), np.uint64)]
        out = [self._garbage((B, k), np.int32) for _ in range(3)] + [self._garbage((B, k), np.float32),
                                                                      self._garbage(B, np.int64)]
        nid64 = node_ids.dtype == np.int64
        prof = np.zeros((B, FUSED_PROF_W), np.int64)
        self.n_launch = getattr(self, "n_launch", 0) + 1
        # the graphed search's token history, written by the step on every other launch (t = 2 earlier tokens)
        hist = (self.rng.integers(-1, 50, size=(R, 2)).astype(np.int32), np.int32(2),
                self._garbage((B * k, 3), np.int32)) if self.n_launch // 2 % 2 else (None, np.int32(0), None)
        # each request's first row, as a fixed beam schedule passes them; every other launch finds them itself
        req_rows = np.searchsorted(np.asarray(row_request), np.arange(B + 1)).astype(np.int64) \
            if self.n_launch % 2 else None
        # every third launch says its rows come best first whether they do or not: the top it then takes from
        # the first row (low, high or a dead row's) must not change the answer
        best_first = np.int32(self.n_launch % 3 == 0)
        # the caller's first GTM window (0: the build's FIRST_WIN x k; None: one at random): any size must give the
        # same answer
        first_win = np.int32(self.rng.choice([0, 0, 1, k, 3 * k]) if first_win is None else first_win)
        launch(self.lib, self.sigs, "fused_step_kernel", B * self.cl, self.nt,
               (tp, qp, np.ascontiguousarray(node_ids), np.int32(nid64), np.ascontiguousarray(logprobs),
                np.int32(lp_dtype), np.int32(m.vocab_size), np.ascontiguousarray(beam_scores, np.float32),
                np.ascontiguousarray(row_request, np.int64), np.int64(R), np.int32(D), np.int32(k), np.int32(gtm),
                np.int32(count), *scratch, *out, prof, req_rows, *hist, best_first, first_win), cluster=self.cl,
               smem=FUSED_SMEM)
        if self.profiled:
            self.rounds.extend(int(x) for x in prof[:, 13])  # GTM rounds a request took (the kernel's profile slot)
        if hist[2] is not None:  # each output row: its parent's history row (-1s for padding), then its token
            parent, token = out[0].reshape(-1), out[1].reshape(-1)
            want = np.where(parent[:, None] >= 0, hist[0][np.maximum(parent, 0)], -1)
            assert np.array_equal(hist[2], np.column_stack([want, token])), "token history"
        return out


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def emu(request, tmp_path_factory):
    cfg = CONFIGS[request.param]
    lib, sigs = build_emulator(tmp_path_factory.mktemp("fused_" + request.param), KERNEL_DIR / "gtm_fused.cu", cfg)
    return FusedEmu(request.param, lib, sigs, cfg)


def _same(got, want):
    for name, x, y in zip(want._fields, want, got):
        assert np.array_equal(x, y), (name, x, y)


@pytest.mark.parametrize("mode,kw", MODES)
def test_step_equals_cpu(tmp_path, emu, mode, kw):
    """Every depth, dead rows, NaN and -inf, ties, scores over every bin, k above the candidates, with and
    without GTM and counts; the crowded configuration runs the static mode only (a launch costs ~0.5 s)."""
    if emu.name == "crowded" and mode != "static":
        pytest.skip("the crowded configuration runs the static mode only")
    idx, _, _ = _build(tmp_path, 70, mode, kw, n_ads=300, L=3, V=9)
    m = Matcher(idx, "cpu")
    rng = np.random.default_rng(1)
    B = 3
    reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
    cases = [(9, 40, "ties"), (9, 60, "wide")]
    if emu.name != "crowded":
        cases += [(6, 5, "normal"), (1, 1, "normal")]
    flags = [(True, False), (False, False), (True, True)]  # (gtm, count) in turn
    n = 0
    for depth in range(idx.sid_length):
        for per_req, k, kind in cases:
            nodes, rr, lp, bs = step_case(idx, rng, B, per_req, depth, kind)
            gtm, count = flags[n % len(flags)]
            n += 1
            want = m.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=count)
            _same(emu.step(m, nodes.astype(np.int64), lp, bs, rr, reqs, k, gtm, count), want)


def test_int32_nodes_half_precision_and_uneven_requests(tmp_path, emu):
    idx, _, _ = _build(tmp_path, 71, "static", {"k": [2, 3, 2]}, n_ads=300, L=3, V=9)
    m = Matcher(idx, "cpu")
    rng = np.random.default_rng(2)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
    depth = 1
    lo, hi = idx.level_offsets[depth], idx.level_offsets[depth + 1]
    rr = np.array([0, 0, 0, 0, 0, 2, 2], np.int64)  # request 1 has no rows
    nodes = rng.integers(lo, hi, size=len(rr))
    lp32 = np.round(rng.normal(size=(len(rr), idx.vocab_size)), 2).astype(np.float32)
    bs = np.round(rng.normal(size=len(rr)), 1).astype(np.float32)
    for lp_dtype, bits in [(1, lp32.astype(np.float16)), (2, (lp32.view(np.uint32) >> 16).astype(np.uint16))]:
        lp = bits.astype(np.float32) if lp_dtype == 1 else (bits.astype(np.uint32) << 16).view(np.float32)
        want = m.step(nodes, lp, bs, rr, reqs, 7, count_candidates=True)
        got = emu.step(m, nodes.astype(np.int32), bits.view(np.uint16), bs, rr, reqs, 7, True, True, lp_dtype)
        _same(got, want)


def test_later_gtm_rounds(tmp_path, emu):
    """Distinct scores and the deepest level's low pass rates with a small k: requests take second and later
    GTM rounds (in the cl2 configuration, whose first window is k); results as on the CPU."""
    idx, _, _ = _build(tmp_path, 74, "dynamic", {"target_fill": 0.3, "k_max": 4}, n_ads=300, L=3, V=9)
    m = Matcher(idx, "cpu")
    rng = np.random.default_rng(5)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
    emu.rounds.clear()
    for depth in (1, 2):
        for k in (1, 2, 3, 6):
            nodes, rr, _, _ = step_case(idx, rng, 3, 9, depth)
            lp = rng.uniform(-8, 0, size=(len(nodes), idx.vocab_size)).astype(np.float32)
            bs = rng.uniform(-3, 0, size=len(nodes)).astype(np.float32)
            want = m.step(nodes, lp, bs, rr, reqs, k)
            _same(emu.step(m, nodes.astype(np.int64), lp, bs, rr, reqs, k, first_win=0), want)
    if emu.name == "cl2":
        assert max(emu.rounds) >= 3, emu.rounds


def test_many_rows_small_window(tmp_path, emu):
    """Many rows a block and a small k: a round's window holds a few of a block's candidates, spread over the
    block's warps as the listing finds them, and rows straddle warps' 32-slot spans. Same results as on the CPU.
    The warp3 configuration only (its expand takes a warp a row for any batch, as the device does for wide ones)."""
    if emu.name != "warp3":
        pytest.skip("the warp3 configuration only")
    idx, _, _ = _build(tmp_path, 75, "static", {"k": [2, 3, 2]}, n_ads=300, L=3, V=9)
    m = Matcher(idx, "cpu")
    rng = np.random.default_rng(6)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(2)]
    for depth in (1, 2):
        # without GTM the window is the k best candidates, and every one of them is output: a candidate the
        # listing loses changes the answer
        for k, kind, gtm in ((1, "normal", True), (12, "normal", False), (6, "wide", False)):
            nodes, rr, lp, bs = step_case(idx, rng, 2, 90, depth, kind)
            want = m.step(nodes, lp, bs, rr, reqs, k, gtm=gtm)
            _same(emu.step(m, nodes.astype(np.int64), lp, bs, rr, reqs, k, gtm), want)


def test_caller_first_window(tmp_path, emu):
    """The caller's first window (GraphedBeamSearch's gtm_windows) sets the first GTM round: a window of one
    candidate takes more rounds than the build's default, a window of every candidate one round; all three
    give the CPU's answer (rounds counted where the build has the profile)."""
    idx, _, _ = _build(tmp_path, 76, "static", {"k": [2, 3, 2]}, n_ads=300, L=3, V=9)
    m = Matcher(idx, "cpu")
    rng = np.random.default_rng(7)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(2)]
    nodes, rr, lp, bs = step_case(idx, rng, 2, 9, 2, "wide")
    want = m.step(nodes, lp, bs, rr, reqs, 6)
    rounds = {}
    for win in (0, 1, 10**6):
        emu.rounds.clear()
        _same(emu.step(m, nodes.astype(np.int64), lp, bs, rr, reqs, 6, first_win=win), want)
        rounds[win] = list(emu.rounds)
    if emu.profiled:
        assert sum(rounds[1]) > sum(rounds[0]), rounds
        assert max(rounds[10**6]) == 1, rounds


def _edge_scores(top: float, bins) -> np.ndarray:
    """For each bin b: the lowest float32 score in bins <= b and the highest in bins > b, as the kernels bin them
    (bin = floor((top - s) * FB / SPAN), in float32): the scores a round's window bounds fall between."""
    c = np.float32(2048 / 64.0)
    def bin_of(x):
        return np.floor((np.float32(top) - np.float32(x)) * c)
    out = []
    for b in bins:
        x = np.float32(top - (b + 1) / c)
        while bin_of(x) <= b:
            x = np.nextafter(x, np.float32(-np.inf))
        while bin_of(x) > b:
            x = np.nextafter(x, np.float32(np.inf))
        out += [x, np.nextafter(x, np.float32(-np.inf))]  # in bin <= b, and the next score down in a bin > b
    return np.array(out, np.float32)


def test_scores_on_bin_edges(tmp_path, emu):
    """Every candidate's score on one side or the other of a bin edge, and a first window of one candidate: each
    round's window starts and ends between two adjacent floats, so a candidate binned differently by the expand and
    by a round's listing is tested twice or never. Results as on the CPU."""
    idx, _, _ = _build(tmp_path, 77, "static", {"k": [2, 3, 2]}, n_ads=300, L=3, V=9)
    m = Matcher(idx, "cpu")
    rng = np.random.default_rng(8)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(2)]
    edges = _edge_scores(0.0, range(0, 40))
    for depth in (1, 2):
        nodes, rr, _, _ = step_case(idx, rng, 2, 9, depth)
        nodes[::9] = idx.level_offsets[depth]  # each request's first row live: its beam score (0) is the top
        lp = rng.choice(edges, size=(len(nodes), idx.vocab_size)).astype(np.float32)
        bs = np.zeros(len(nodes), np.float32)
        for k in (3, 7):
            want = m.step(nodes, lp, bs, rr, reqs, k, gtm=False)
            _same(emu.step(m, nodes.astype(np.int64), lp, bs, rr, reqs, k, False, first_win=1), want)
            want = m.step(nodes, lp, bs, rr, reqs, k)
            _same(emu.step(m, nodes.astype(np.int64), lp, bs, rr, reqs, k, first_win=1), want)
