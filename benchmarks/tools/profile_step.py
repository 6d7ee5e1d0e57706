"""Where the fused GPU step spends its time: the step kernel built with -DPROFILE stamps %globaltimer at its
phase ends (block 0 of each request's cluster; each block's expand and first test round; the SM each block
ran on), per step of a recorded beam search (step_gpu.py's inputs). Prints tables; with --out also writes
them to <out>/profile_step_<host>.md.

    python benchmarks/tools/profile_step.py --index IDX                     # a Hopper GPU
    python benchmarks/tools/profile_step.py --index IDX --variant old@HEAD~1   # another build, profiled alike
    ncu --profile-from-start off -k regex:fused_step -c 1 -o step \\
        python benchmarks/tools/profile_step.py --index IDX --ncu-step 3      # the shipped build under ncu

--variant NAME[@SRC][:DEF=V,...] as in ab_gpu.py (tools/_kernels.py); PROFILE is always added, except with
--ncu-step, which runs the build as shipped (or the variant as given) once inside cudaProfilerStart/Stop.
--cubin runs an nvcc-built cubin instead (build it with -DPROFILE, and -lineinfo for ncu's source view)."""
import argparse
import datetime
import io
import sys
from contextlib import redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))

from _kernels import Variant, use_fused  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True, help="a built index (gtmkit build)")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--variant", default="", metavar="NAME[@SRC][:DEF=V,...]", help="the build to profile")
    ap.add_argument("--cubin", help="run this nvcc-built cubin of gtm_fused.cu instead")
    ap.add_argument("--windows", default="auto", help="first GTM window a step: auto (calibrated from the recorded "
                    "search's pass rates, as GraphedBeamSearch does), none (the kernel's default) or W1/W2/W3/W4")
    ap.add_argument("--ncu-step", type=int, default=0, help="only run this step (1-based) once inside "
                    "cudaProfilerStart/Stop, without PROFILE (run under ncu --profile-from-start off)")
    ap.add_argument("--out", help="also write the tables to <out>/profile_step_<host>.md")
    ap.add_argument("--host", help="host kind in the file name (default: the GPU's model, e.g. h200)")
    args = ap.parse_args()
    from step_gpu import need_cuda, recorded_search
    need_cuda()
    import cupy as cp

    import gtmkit.matcher.cuda.backend as bc
    r = recorded_search(args.index, args.requests)
    steps, q, B, be = r["steps"], r["q"], r["B"], r["m"].cuda
    if not be.fused:
        raise SystemExit("the fused step needs thread block clusters (sm_90+)")
    v = Variant.parse(args.variant or "shipped")
    if args.cubin:  # (launched with the backend's cluster and block sizes)
        be.k_fused = cp.RawModule(path=args.cubin).get_function("fused_step_kernel")
        be.k_fused.max_dynamic_shared_size_bytes = bc.FUSED_SMEM
        label = f"cubin {args.cubin}"
    elif args.variant or not args.ncu_step:
        use_fused(be, v, () if args.ncu_step else ("PROFILE",))
        label = v.label() + ("" if args.ncu_step else " -DPROFILE")
    else:
        label = "shipped build"
    if args.ncu_step:
        s = steps[args.ncu_step - 1]
        for prof in (False, True):  # a warm-up, then the profiled launch
            if prof:
                cp.cuda.profiler.start()
            be.step(s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q, s["k"], True,
                    False, s["max_children"], rows_best_first=True)
            cp.cuda.Device().synchronize()
        cp.cuda.profiler.stop()
        return
    text = io.StringIO()
    with redirect_stdout(text):
        report(be, steps, q, B, windows(be, steps, q, r["sizes"], args.windows), label)
    print(text.getvalue(), end="")
    if args.out:
        from _common import gpu_name, result_paths
        _, md = result_paths(args.out, "profile_step", args.host, gpu_name())
        md.write_text(f"# Fused step: time per phase inside the kernel ({gpu_name()}, "
                      f"{datetime.date.today().isoformat()})\n\nCommand: `python {' '.join(sys.argv)}`. Index "
                      f"{args.index}: {r['m'].index.num_sids:,} SIDs; B={B}, beams {r['sizes']}.\n\n```\n"
                      f"{text.getvalue()}```\n")


def windows(be, steps, q, sizes, how: str) -> list:
    """The first GTM window of each step (0: the kernel's default)."""
    if how == "auto":
        from gtmkit.matcher.cuda.windows import calibrate_windows, pass_counts
        counts = [pass_counts(be, s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q,
                              s["k"], s["max_children"]) for s in steps]
        return calibrate_windows(counts, sizes)
    return [0] * len(steps) if how == "none" else [int(x) for x in how.split("/")]


def report(be, steps, q, B, wins, label) -> None:
    """The phase tables of one profiled run of every step (three launches a step, the last one's stamps)."""
    import cupy as cp
    import numpy as np

    from gtmkit.matcher.cuda.params import FUSED_PROF_W
    print(f"build: {label}; first GTM windows {wins} (0: the kernel's default)")
    be.profile = cp.zeros((B, FUSED_PROF_W), cp.int64)
    tails = []
    print("step | top us | expand+hist us | rounds | round us (each) | round 1: list, test, merge us | group us | "
          "rank us | total us | crowded")
    for t, s in enumerate(steps):
        for _ in range(3):  # recorded rows come best first, as the graphed search tells the kernel
            be.step(s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q, s["k"], True,
                    False, s["max_children"], rows_best_first=True, first_window=wins[t])
        cp.cuda.Device().synchronize()
        p = cp.asnumpy(be.profile).astype(np.float64)
        n = p[:, 13].astype(int)
        d = lambda a, b: np.median(p[:, b] - p[:, a]) / 1e3  # noqa: E731
        rounds = [np.median(p[n > r, 3 + r] - p[n > r, 2 + r]) / 1e3 for r in range(min(int(n.max()), 8))]
        last = np.array([p[i, 2 + min(n[i], 8)] for i in range(B)])
        print(f"{t + 1} | {d(0, 1):.1f} | {d(1, 2):.1f} | {np.median(n):.0f} (max {n.max()}) | "
              f"{', '.join(f'{x:.1f}' for x in rounds)} | {d(2, 16):.1f}, {d(16, 17):.1f}, {d(17, 18):.1f} | "
              f"{np.median(p[:, 11] - last) / 1e3:.1f} | {d(11, 12):.1f} | {d(0, 12):.1f} | {int(p[:, 14].sum())}")
        tails.append((t + 1, p, n))
    be.profile = None
    # a graphed step waits for the slowest cluster: where its time goes, against the median request
    print("\nstep | span us (first start to last end) | start skew us (max) | total us median / max | slowest: "
          "start offset, top, expand+hist, rounds, rounds us, group+rank us")
    nb = min(8, be.fused_cluster)
    for t, p, n in tails:
        tot = p[:, 12] - p[:, 0]
        i = int(np.argmax(p[:, 12]))
        last = p[i, 2 + min(n[i], 8)]
        print(f"{t} | {(p[:, 12].max() - p[:, 0].min()) / 1e3:.1f} | {(p[:, 0].max() - p[:, 0].min()) / 1e3:.1f} | "
              f"{np.median(tot) / 1e3:.1f} / {tot.max() / 1e3:.1f} | {(p[i, 0] - p[:, 0].min()) / 1e3:.1f}, "
              f"{(p[i, 1] - p[i, 0]) / 1e3:.1f}, {(p[i, 2] - p[i, 1]) / 1e3:.1f}, {n[i]}, {(last - p[i, 2]) / 1e3:.1f}, "
              f"{(p[i, 12] - last) / 1e3:.1f}")
        blk = p[:, 32:32 + 4 * nb].reshape(len(p), nb, 4)  # each block (rank < 8): expand end, round-1 test
        ex, ts, te, nw = blk[..., 0], blk[..., 1], blk[..., 2], blk[..., 3]
        print(f"   blocks: expand end spread us median {np.median(ex.max(1) - ex.min(1)) / 1e3:.1f} max "
              f"{(ex.max(1) - ex.min(1)).max() / 1e3:.1f}; round-1 test us median {np.median(te - ts) / 1e3:.1f} max "
              f"{(te - ts).max() / 1e3:.1f}; work list median {np.median(nw):.0f} max {nw.max():.0f}")
        sms = p[:, 20:20 + nb].astype(int)
        shared = [r for r in range(len(p)) if np.isin(sms[r], np.delete(sms, r, axis=0)).any()]
        print(f"   candidates: slowest request {int(p[i, 15])}, median {int(np.median(p[:, 15]))}, "
              f"max {int(p[:, 15].max())}; SMs: {len(np.unique(sms))} distinct for {sms.size} blocks, requests "
              f"sharing an SM: {shared}")


if __name__ == "__main__":
    main()
