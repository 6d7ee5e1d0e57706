"""Where a GTMLogitsProcessor call's time goes on the GPU: the one-launch path (mask_scores_kernel) against the
three launches (node recovery, mask, write) on the same rows, per depth, without a model around them.

For each depth and row count: prefixes of real SIDs (every beam of a request on its own SID), float32 scores
on the GPU; per path the host's enqueue time (the call, no wait) and the device time (CUDA events after a
synchronize, so that only this call's work lies between them); the paths' masked scores must be equal.

    python benchmarks/tools/profile_mask_gpu.py --index /tmp/idx --rows 1024,16384"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--rows", default="1024,16384", help="rows a call (16 requests x beams)")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()

    import cupy as cp
    import torch

    import gtmkit
    from gtmkit.integrations.transformers import GTMLogitsProcessor, SidTokenLayout
    from gtmkit.synth import synth_users

    index = gtmkit.load_index(args.index, verify=False)
    V, L, B = index.vocab_size, index.sid_length, args.requests
    m = gtmkit.Matcher(index, device="cuda")
    reqs = [index.encode_request(u) for u in synth_users(index.manifest["schema"], B, seed=1)]
    layout = SidTokenLayout(3, 3 + V)
    rng = np.random.default_rng(0)
    fits = m.cuda.mask_scores_fits
    print("rows depth path host_us device_us")
    for R in (int(x) for x in args.rows.split(",")):
        beams = R // B
        leaves = rng.integers(index.first_leaf, index.num_nodes, R)
        sids = np.array([index.leaf_sid(int(x)) for x in leaves], np.int64)
        for depth in range(L + 1):
            m.cuda.mask_scores_fits = fits
            ids = torch.from_numpy(np.concatenate([np.zeros((R, 1), np.int64), sids[:, :depth] + 3], axis=1)).cuda()
            base = torch.randn(R, 3 + V, device="cuda").log_softmax(-1)
            out = {}
            for path, fused in (("one launch", True), ("three launches", False)):
                m.cuda.mask_scores_fits = fits if fused else (lambda: False)
                proc = GTMLogitsProcessor(m, reqs, beams, layout, prompt_len=1)
                host, dev = [], []
                for _ in range(args.reps):
                    scores = base.clone()
                    torch.cuda.synchronize()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    t0 = time.perf_counter()
                    proc(ids, scores)
                    host.append(1e6 * (time.perf_counter() - t0))
                    e.record()
                    torch.cuda.synchronize()
                    dev.append(1e3 * s.elapsed_time(e))
                out[path] = scores
                print(R, depth, path, round(statistics.median(host)), round(statistics.median(dev)), flush=True)
            assert torch.equal(out["one launch"], out["three launches"]), (R, depth)
    m.cuda.mask_scores_fits = fits
    cp.cuda.Device().synchronize()
    # where the host's time goes in the one-launch path: the largest row count, depth 2
    import cProfile
    import pstats
    ids = torch.from_numpy(np.concatenate([np.zeros((R, 1), np.int64), sids[:, :2] + 3], axis=1)).cuda()
    scores = torch.randn(R, 3 + V, device="cuda")
    proc = GTMLogitsProcessor(m, reqs, R // B, layout, prompt_len=1)
    proc(ids, scores)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.reps):
        proc(ids, scores)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
