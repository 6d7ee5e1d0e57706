"""The flat-step probe's kernels (benchmarks/kernels/flat_probe.cu) on the CUDA emulation: their histograms count
every candidate once, flat_plan's window bins are the first to reach the window, and the top k of the passers
they test equals the CPU matcher's step wherever the window settled the request. The probe's GPU timings
(benchmarks/probe_flat_step.py) are only worth reading if this holds."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from gtmkit.matcher.kernel_params import request_params, trie_params
from gtmkit.matcher.matcher import Matcher
from gtmkit.matcher.sparse_req import sparse_images

from catalogs import random_user
from cuda_emu import build_emulator, launch
from step_cases import step_case
from test_build import _build

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))
from flat_probe_host import FB, complete, decode, window_bin  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
CFG = dict(GTMKIT_EMU=1, NT=64, EU=2, TEU=2, TMINB=1, SNT=64, SCAN_PER=4, PNT=256, RNT=128)


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    return build_emulator(tmp_path_factory.mktemp("flat"), BENCH / "kernels" / "flat_probe.cu", CFG)


def run_flat(emu, m, node_ids, lp, bs, rr, reqs, k, win, blocks):
    lib, sigs = emu
    t, q = m.arrays, m.batch(reqs)
    tarr = {n: np.ascontiguousarray(getattr(t, n)) for n in t._fields if n != "jagged"}
    qarr = {n: np.ascontiguousarray(getattr(q, n)) for n in q._fields}
    qarr["sparse"] = sparse_images(q).view(np.uint64)
    tp = trie_params(t, lambda n: tarr[n].ctypes.data)
    qp = request_params(q, lambda n: qarr[n].ctypes.data)
    R, B, D = len(node_ids), q.size, int(max(m.index.max_degree))
    req_rows = np.searchsorted(rr, np.arange(B + 1)).astype(np.int64)
    row_start, row_j0 = np.zeros(R + 1, np.uint32), np.zeros(R, np.int64)
    cand, child = np.zeros(R * D + 1, np.uint64), np.zeros(R * D + 1, np.int32)
    ghist, thr = np.zeros(B * FB, np.uint32), np.zeros(B, np.int32)  # (flat_rank leaves ghist zeroed)
    cap = R * D + 1
    work, nwork = np.zeros(B * cap, np.uint32), np.zeros(B, np.uint32)
    passed, npass = np.zeros(B * cap, np.uint64), np.zeros(B, np.uint32)
    topk, out_n = np.zeros(B * k, np.uint64), np.zeros(B, np.int32)
    bs = np.ascontiguousarray(bs, np.float32)
    launch(lib, sigs, "flat_scan", 1, CFG["SNT"], (tp, node_ids, np.int64(R), row_start, row_j0))
    launch(lib, sigs, "flat_expand", blocks, CFG["NT"], (tp, lp, np.int32(lp.shape[1]), bs, req_rows, np.int32(B),
                                                         np.int64(R), np.int32(D), row_start, row_j0, cand, child,
                                                         ghist))
    nwork[:] = npass[:] = 7  # flat_plan zeroes them
    launch(lib, sigs, "flat_plan", B, CFG["PNT"], (ghist, np.int32(win), thr, nwork, npass))
    launch(lib, sigs, "flat_list", blocks, CFG["NT"], (req_rows, np.int32(B), row_start, cand, thr, bs, work,
                                                       np.int64(cap), nwork))
    launch(lib, sigs, "flat_test", blocks, CFG["NT"], (tp, qp, np.int32(B), work, np.int64(cap), nwork, cand, child,
                                                       passed, np.int64(cap), npass))
    hist = ghist.reshape(B, FB).copy()
    launch(lib, sigs, "flat_rank", B, CFG["RNT"], (passed, np.int64(cap), npass, np.int32(k), topk, out_n, ghist))
    assert not ghist.any()  # zeroed for the next step
    return dict(req_rows=req_rows, row_start=row_start, row_j0=row_j0, hist=hist, thr=thr,
                nwork=nwork.astype(np.int64), npass=npass.astype(np.int64), topk=topk.reshape(B, k), out_n=out_n, D=D)


@pytest.mark.parametrize("mode,kw", [("static", {"k": [2, 3, 2]}), ("dynamic", {"target_fill": 0.3, "k_max": 4})])
def test_flat_probe_equals_cpu(tmp_path, emu, mode, kw):
    idx, _, _ = _build(tmp_path, 80, mode, kw, n_ads=300, L=3, V=9)
    m = Matcher(idx, "cpu")
    rng = np.random.default_rng(3)
    B = 3
    reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
    settled = unsettled = 0
    for depth in range(idx.sid_length):
        # every candidate in the window, k above them all (the last bin output too); ties; NaN and -inf
        for per_req, k, kind, win, blocks in ((9, 40, "wide", 10**9, 5), (20, 6, "ties", 6, 3),
                                             (12, 3, "normal", 1, 7)):
            nodes, rr, lp, bs = step_case(idx, rng, B, per_req, depth, kind)
            want = m.step(nodes, lp, bs, rr, reqs, k)
            got = run_flat(emu, m, nodes.astype(np.int64), lp, bs, rr, reqs, k, win, blocks)
            rs, rq = got["row_start"].astype(np.int64), got["req_rows"]
            degree = np.where(nodes >= 0, np.diff(idx.node_offsets)[np.maximum(nodes, 0)], 0)
            assert rs[-1] == degree.sum() and (np.diff(rs) == degree).all()
            assert (got["hist"].sum(1) == rs[rq[1:]] - rs[rq[:-1]]).all()
            assert (got["thr"] == window_bin(got["hist"], win)).all()
            assert (got["nwork"] == [got["hist"][b, :got["thr"][b] + 1].sum() for b in range(B)]).all()
            for b in range(B):
                if not complete(got["hist"][b], got["thr"][b], got["npass"][b], k):
                    unsettled += 1
                    continue
                n = int((want.nodes[b] >= 0).sum())  # outputs: min(k, passers), then -1 padding
                assert got["out_n"][b] == n, (depth, kind, b)
                node, score = decode(got["topk"][b, :n], got["D"], rq[b], got["row_j0"])
                assert np.array_equal(node, want.nodes[b, :n]), (depth, kind, b)
                assert np.array_equal(score, want.scores[b, :n], equal_nan=True), (depth, kind, b)
                settled += 1
    assert settled > 0 and unsettled > 0, (settled, unsettled)  # both kinds of window were reached
