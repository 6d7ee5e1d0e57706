"""Where the fused GPU step spends its time: phase timestamps from inside the kernel (one cluster per
request; %globaltimer at phase ends, block 0 of each cluster), per step of a recorded beam search.

    python benchmarks/gpu_fused_profile.py --index IDX     # on a Hopper GPU; prints a table
"""
import argparse
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import gtmkit  # noqa: E402
from gtmkit.synth import synth_users  # noqa: E402
from gtmkit.matcher.cuda.params import FUSED_PROF_W  # noqa: E402
from step_gpu import record_inputs  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--index", required=True)
ap.add_argument("--requests", type=int, default=16)
ap.add_argument("--ncu-step", type=int, default=0, help="only run this step (1-based) once inside "
                "cudaProfilerStart/Stop (run under ncu --profile-from-start off)")
ap.add_argument("--sub", action="append", default=[], metavar="OLD=>NEW",
                help="profile a variant of gtm_fused.cu with this text replaced (repeatable)")
ap.add_argument("--define", action="append", default=[], metavar="NAME=VALUE",
                help="profile gtm_fused.cu built with this define (repeatable), as gpu_fused_variants.py builds it")
ap.add_argument("--cubin", help="run this nvcc-built cubin of gtm_fused.cu (e.g. with -lineinfo, for ncu's source view)")
ap.add_argument("--windows", default="none", help="first GTM window a step: none (FIRST_WIN x k), auto (calibrated "
                "from the recorded search's pass rates, as GraphedBeamSearch does) or W1/W2/W3/W4")
args = ap.parse_args()
idx = gtmkit.load_index(args.index, verify=False)
users = synth_users(idx.manifest["schema"], args.requests, seed=11)
m = gtmkit.Matcher(idx, "cuda")
steps, _, q, B = record_inputs(m, [idx.encode_request(u) for u in users], users, (1, 512, 1024, 1024))
be = m.cuda
if args.sub or args.define or args.cubin:
    from gtmkit.matcher.cuda.backend import FUSED_FILE, FUSED_SMEM, KERNEL_DIR, load_module
    from gtmkit.matcher.cuda.source import kernel_source
    if args.cubin:
        mod, label = cp.RawModule(path=args.cubin), f"cubin: {args.cubin}"
    elif args.sub:
        src = kernel_source(FUSED_FILE)
        for sub in args.sub:
            old, new = sub.split("=>")
            assert old in src, old
            src = src.replace(old, new)
        mod = cp.RawModule(code=src, options=("--std=c++14", f"-I{KERNEL_DIR}"))
        label = "variant: " + "; ".join(args.sub)
    else:
        mod, label = load_module(FUSED_FILE, tuple(args.define)), "defines: " + ", ".join(args.define)
    be.k_fused = mod.get_function("fused_step_kernel")
    be.k_fused.max_dynamic_shared_size_bytes = FUSED_SMEM
    print(label)
if args.ncu_step:
    s = steps[args.ncu_step - 1]
    for prof in (False, True):
        if prof:
            cp.cuda.profiler.start()
        be.step(s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], None, q, s["k"], True, False,
                s["max_children"])
        cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()
    sys.exit(0)
if args.windows == "auto":
    from gtmkit.matcher.cuda.windows import calibrate_windows, pass_counts
    counts = [pass_counts(be, s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q, s["k"],
                          s["max_children"]) for s in steps]
    windows = calibrate_windows(counts, (1, 512, 1024, 1024))
else:
    windows = [0] * len(steps) if args.windows == "none" else [int(x) for x in args.windows.split("/")]
print(f"first GTM windows: {windows} (0: FIRST_WIN x k)")
be.profile = cp.zeros((B, FUSED_PROF_W), cp.int64)
tails = []
print("(rows from the caller's req_rows, as in the graphed search)")
print("step | top us | expand+hist us | rounds | round us (each) | round 1: list, test, merge us | group us | rank us | total us | crowded")
for t, s in enumerate(steps):
    for _ in range(3):  # (recorded rows come best first, as the graphed search tells the kernel)
        be.step(s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q, s["k"], True,
                False, s["max_children"], rows_best_first=True, first_window=windows[t])
    cp.cuda.Device().synchronize()
    p = cp.asnumpy(be.profile).astype(np.float64)
    n = p[:, 13].astype(int)
    d = lambda a, b: np.median(p[:, b] - p[:, a]) / 1e3  # noqa: E731
    rounds = [np.median(p[n > r, 3 + r] - p[n > r, 2 + r]) / 1e3 for r in range(min(int(n.max()), 8))]
    last = np.array([p[i, 2 + min(n[i], 8)] for i in range(B)])
    print(f"{t + 1} | {d(0, 1):.1f} | {d(1, 2):.1f} | {np.median(n):.0f} (max {n.max()}) | "
          f"{', '.join(f'{x:.1f}' for x in rounds)} | {d(2, 16):.1f}, {d(16, 17):.1f}, {d(17, 18):.1f} | "
          f"{np.median(p[:, 11] - last) / 1e3:.1f} | {d(11, 12):.1f} | "
          f"{d(0, 12):.1f} | {int(p[:, 14].sum())}")
    tails.append((t + 1, p, n))
be.profile = None
# The graph step waits for the slowest cluster: where its time goes, against the median request.
print("\nstep | span us (first start to last end) | start skew us (max) | total us median / max | slowest: "
      "start offset, top, expand+hist, rounds, rounds us, group+rank us")
for t, p, n in tails:
    tot = p[:, 12] - p[:, 0]
    i = int(np.argmax(p[:, 12]))
    last = p[i, 2 + min(n[i], 8)]
    print(f"{t} | {(p[:, 12].max() - p[:, 0].min()) / 1e3:.1f} | {(p[:, 0].max() - p[:, 0].min()) / 1e3:.1f} | "
          f"{np.median(tot) / 1e3:.1f} / {tot.max() / 1e3:.1f} | {(p[i, 0] - p[:, 0].min()) / 1e3:.1f}, "
          f"{(p[i, 1] - p[i, 0]) / 1e3:.1f}, {(p[i, 2] - p[i, 1]) / 1e3:.1f}, {n[i]}, {(last - p[i, 2]) / 1e3:.1f}, "
          f"{(p[i, 12] - last) / 1e3:.1f}")
    # the cluster's blocks (rank < 8): expand ends and first-round tests, each against the request's block 0
    nb = min(8, be.fused_cluster)
    blk = p[:, 32:32 + 4 * nb].reshape(len(p), nb, 4)
    ex, ts, te, nw = blk[..., 0], blk[..., 1], blk[..., 2], blk[..., 3]
    print(f"   blocks: expand end spread us median {np.median(ex.max(1) - ex.min(1)) / 1e3:.1f} max "
          f"{(ex.max(1) - ex.min(1)).max() / 1e3:.1f}; round-1 test us median {np.median(te - ts) / 1e3:.1f} max "
          f"{(te - ts).max() / 1e3:.1f}; test end spread us median {np.median(te.max(1) - te.min(1)) / 1e3:.1f} max "
          f"{(te.max(1) - te.min(1)).max() / 1e3:.1f}; work list median {np.median(nw):.0f} max {nw.max():.0f}; "
          f"slowest request's lists {nw[i].astype(int).tolist()}, tests us "
          f"{', '.join(f'{x:.1f}' for x in (te[i] - ts[i]) / 1e3)}")
    sms = p[:, 20:20 + min(8, be.fused_cluster)].astype(int)
    shared = [r for r in range(len(p)) if np.isin(sms[r], np.delete(sms, r, axis=0)).any()]
    print(f"   candidates: slowest request {int(p[i, 15])}, median {int(np.median(p[:, 15]))}, max {int(p[:, 15].max())}")
    print(f"   SMs: {len(np.unique(sms))} distinct for {sms.size} blocks; requests sharing an SM with another: "
          f"{shared}; slowest request {i}")
