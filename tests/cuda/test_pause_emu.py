"""Paused ads on Matcher(index, "cuda") without a GPU (the fake CuPy and emulated kernels of test_backend_emu.py):
after each round of pauses and resumes, given to the CPU and the GPU matcher alike, the step (GTM and counts on
and off), the mask and the post-filter are equal on both, in the multi-kernel and the fused step; the device
copies hold the host's counts and flags."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from gtmkit.matcher.served import Matcher

from support.catalogs import random_user
from support.fake_cupy import installed
from support.step_cases import step_case, steps_agree
from support.indexes import _build

pytestmark = [pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed"), pytest.mark.emu]


@pytest.mark.parametrize("path", ["multi", "fused"])
def test_pauses_on_gpu_equal_cpu(tmp_path, monkeypatch, path):
    idx, table, _ = _build(tmp_path, 75, "static", {"k": [2, 3, 2]}, n_ads=300, L=3, V=9)
    ids = np.asarray(table.column("ad_id").to_numpy(), np.int64)
    with installed(monkeypatch, fused_cluster=2 if path == "fused" else 0) as step:
        cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", **step)
        rng = np.random.default_rng(6)
        B = 3
        reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
        # the SIDs' ads paused whole (dead leaves and prefixes), then a random share, then some resumed
        sid_ads = [idx.sid_ads(n) for n in range(idx.first_leaf, idx.num_nodes)]
        whole = np.concatenate([a for a in sid_ads[::2]])
        rounds = [("pause", whole), ("pause", rng.choice(ids, 120, replace=False)),
                  ("resume", rng.choice(ids, 80, replace=False)), ("resume", ids)]
        flags = [(True, False), (False, False), (True, True), (False, True)]  # (gtm, count) in turn
        n = 0
        for op, pick in rounds:
            for m in (cpu, gpu):
                getattr(m, op + "_ads")(pick)
            assert gpu.num_paused == cpu.num_paused
            assert np.array_equal(np.asarray(gpu.cuda.d["node_live"]), cpu.arrays.node_live)
            assert np.array_equal(np.asarray(gpu.cuda.d["ad_active"]), cpu.arrays.ad_active)
            n = steps_agree(cpu, gpu, idx, rng, reqs, [(6, 5, "normal"), (9, 40, "ties")], flags, n, (op,))
            for depth in range(idx.sid_length):
                nodes, rr, _, _ = step_case(idx, rng, B, 6, depth, "normal")
                for gtm in (True, False):
                    assert np.array_equal(cpu.mask(nodes, rr, reqs, gtm), np.asarray(gpu.mask(nodes, rr, reqs, gtm)))
            leaves = rng.integers(idx.first_leaf - 2, idx.num_nodes, size=(B, 12))
            for exact in (True, False):
                for (a1, r1), (a2, r2) in zip(cpu.postfilter(leaves, reqs, exact), gpu.postfilter(leaves, reqs, exact)):
                    assert np.array_equal(a1, np.asarray(a2)) and np.array_equal(r1, np.asarray(r2))
        assert cpu.num_paused == 0


def test_swap_on_gpu_serves_the_new_index(tmp_path, monkeypatch):
    """Matcher(index, "cuda").swap: the new index's tables uploaded beside the old ones; the next calls equal the
    CPU matcher of the new index, a held matcher still the old one's, each result naming its version."""
    old, _, _ = _build(tmp_path, 76, "static", {"k": [2, 3, 2]}, n_ads=200, L=3, V=9, name="a")
    new, _, _ = _build(tmp_path, 77, "static", {"k": [2, 3, 2]}, n_ads=200, L=3, V=9, name="b")
    with installed(monkeypatch) as step:
        gpu = Matcher(old, "cuda", **step)
        held = gpu.current()
        gpu.swap(new)
        assert gpu.current() is not held and held.cuda is not gpu.cuda
        rng = np.random.default_rng(8)
        for m_gpu, idx in ((gpu, new), (held, old)):
            cpu = Matcher(idx, "cpu")
            reqs = [idx.encode_request(random_user(rng)) for _ in range(2)]
            nodes, rr, lp, bs = step_case(idx, rng, 2, 5, 1, "normal")
            a, b = cpu.step(nodes, lp, bs, rr, reqs, 7), m_gpu.step(nodes, lp, bs, rr, reqs, 7)
            assert b.version == idx.version == a.version
            for name, x, y in zip(a._fields[:5], a, b):
                assert np.array_equal(x, np.asarray(y)), name
            leaves = rng.integers(idx.first_leaf, idx.num_nodes, size=(2, 6))
            for (a1, r1), (a2, r2) in zip(cpu.postfilter(leaves, reqs), m_gpu.postfilter(leaves, reqs)):
                assert np.array_equal(a1, np.asarray(a2)) and np.array_equal(r1, np.asarray(r2))
