"""Fused-step variants side by side on one recorded search (Hopper GPU): compile-time defines, cluster size,
block size and the cluster scheduling policy. Every variant must return the committed kernel's exact
outputs at every step; then each step alone as a CUDA graph and the whole graphed search (GTM +
post-filter) are timed in interleaved rounds, with ratios against the first variant, plus the in-kernel
span (first cluster start to last cluster end) and the SMs the blocks ran on.

    python benchmarks/gpu_fused_variants.py --index IDX --variant base: --variant cl16:CL=16 \
        --variant lb:@sched=2 --variant rowbs:ROWBS

A variant is NAME:TOKENS, tokens comma-separated: NAME or NAME=VALUE (a -D define; CL and NT also set the
launch), @sched=N (CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: 1 spread, 2 load balancing),
@win=auto|none|W1/W2/... (GraphedBeamSearch's gtm_windows; default auto; the single-step graphs and the
spans use the windows the whole graph took).
Clusters above 8 blocks are allowed through CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gtmkit.matcher.cuda.backend as bc  # noqa: E402
from gtmkit.matcher.cuda.graph import GraphedBeamSearch  # noqa: E402
from gtmkit.matcher.cuda.params import FUSED_PROF_W  # noqa: E402
from step_gpu import capture_step, cuda_time, variant_run  # noqa: E402

NON_PORTABLE, SCHED = 14, 15  # CUfunction_attribute values (cuda.h)


def set_attr(fn, attr, value):
    try:
        cp.cuda.driver.funcSetAttribute(fn.kernel.ptr, attr, value)
    except (AttributeError, TypeError):  # CuPy without this wrapper: the driver call through ctypes
        rc = ctypes.CDLL("libcuda.so.1").cuFuncSetAttribute(ctypes.c_void_p(fn.kernel.ptr), attr, value)
        if rc:
            raise RuntimeError(f"cuFuncSetAttribute({attr}, {value}) failed: {rc}")


class Variant:
    def __init__(self, spec):
        self.name, _, toks = spec.partition(":")
        self.defines, self.cl, self.nt, self.sched = [], bc.FUSED_CLUSTER, bc.FUSED_THREADS, None
        self.win = "auto"
        for tok in filter(None, toks.split(",")):
            if tok.startswith("@win="):
                w = tok.split("=")[1]
                self.win = None if w == "none" else w if w == "auto" else [int(x) for x in w.split("/")]
                continue
            if tok.startswith("@sched="):
                self.sched = int(tok.split("=")[1])
                continue
            self.defines.append(tok)
            if tok.startswith("CL="):
                self.cl = int(tok[3:])
            if tok.startswith("NT="):
                self.nt = int(tok[3:])
        fn = bc.load_module(bc.FUSED_FILE, tuple(self.defines)).get_function("fused_step_kernel")
        fn.max_dynamic_shared_size_bytes = bc.FUSED_SMEM
        if self.cl > 8:
            set_attr(fn, NON_PORTABLE, 1)
        if self.sched is not None:
            set_attr(fn, SCHED, self.sched)
        self.fn = fn

    def use(self, be):
        be.k_fused, be.fused_cluster, be.fused_threads = self.fn, self.cl, self.nt


def main():
    args, r = variant_run(5, __doc__)
    m, steps, q, B, sizes, recorded = r["m"], r["steps"], r["q"], r["B"], r["sizes"], r["recorded"]
    be = m.cuda
    variants, ref, ref_graph, timed = [], None, None, []
    for spec in args.variant:
        try:
            v = Variant(spec)
            v.use(be)
            outs = [[cp.asnumpy(a) for a in be.step(s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"],
                                                     s["req_rows"], q, s["k"], True, False, s["max_children"],
                                                     rows_best_first=True)[:4]]
                    for s in steps]
        except Exception as exc:  # a variant that does not compile or launch is reported, not fatal
            print(f"{spec}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        if ref is None:
            ref = outs
        same = all(all(np.array_equal(a, b) for a, b in zip(o, r)) for o, r in zip(outs, ref))
        print(f"{v.name}: defines {v.defines}, CL {v.cl}, NT {v.nt}, sched {v.sched}, windows {v.win}: "
              f"outputs equal the first variant's: {same}", flush=True)
        if not same:
            continue
        whole = GraphedBeamSearch(m, q, lambda step, prev, parents: recorded[step], sizes, gtm=True, postfilter=True,
                                  gtm_windows=v.win)
        graphs = [capture_step(be, s, q, B, w) for s, w in zip(steps, whole.windows)]
        gr = whole.replay()  # the graphed search (its windows) must give the first variant's answer too
        got = (cp.asnumpy(gr.sids), cp.asnumpy(gr.scores))
        ref_graph = ref_graph or got
        same_graph = all(np.array_equal(a, b) for a, b in zip(got, ref_graph))
        print(f"{v.name}: first GTM windows {whole.windows}; graphed search equals the first "
              f"variant's: {same_graph}", flush=True)
        if not same_graph:
            continue
        # in-kernel span and SM placement (eager, profile on)
        be.profile = cp.zeros((B, FUSED_PROF_W), cp.int64)
        spans = []
        for s in steps:
            be.step(s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q, s["k"], True,
                    False, s["max_children"], rows_best_first=True, first_window=whole.windows[len(spans)])
            p = cp.asnumpy(be.profile).astype(np.float64)
            sms = p[:, 20:20 + min(v.cl, 8)].astype(int).ravel()
            spans.append(((p[:, 12].max() - p[:, 0].min()) / 1e3, (p[:, 0].max() - p[:, 0].min()) / 1e3,
                          np.median(p[:, 12] - p[:, 0]) / 1e3, len(set(sms.tolist())), len(sms)))
        be.profile = None
        variants.append(v)
        timed.append(dict(graphs=graphs, whole=whole, spans=spans, steps=[[] for _ in steps], all=[]))
    for _ in range(args.rounds):  # interleaved: every variant sees the same machine state
        for t in timed:
            for i, (g, st) in enumerate(t["graphs"]):
                t["steps"][i].append(cuda_time(lambda: g.launch(st), reps=20, stream=st))
            t["all"].append(cuda_time(t["whole"].launch, reps=20, stream=t["whole"].stream))
    base = None
    print("\nvariant | step graph us (1, 2, 3, 4) | whole graph + post-filter us | ratio to first (whole) | "
          "span us per step | start skew us per step | median request us per step | SMs distinct / blocks (rank < 8)")
    for v, t in zip(variants, timed):
        st = [1e3 * float(np.median(x)) for x in t["steps"]]
        w = 1e3 * float(np.median(t["all"]))
        base = base or w
        print(f"{v.name} | {', '.join(f'{x:.1f}' for x in st)} | {w:.1f} | {base / w:.3f} | "
              f"{', '.join(f'{s[0]:.1f}' for s in t['spans'])} | {', '.join(f'{s[1]:.1f}' for s in t['spans'])} | "
              f"{', '.join(f'{s[2]:.1f}' for s in t['spans'])} | {t['spans'][0][3]} / {t['spans'][0][4]}")


if __name__ == "__main__":
    main()
