"""What a CD+GTM step flat over the whole GPU would cost (benchmarks/kernels/flat_probe.cu), side by side with the
fused step (one cluster of 6 SMs a request) on the same recorded inputs.

    python benchmarks/probe_flat_step.py --index /tmp/idx [--out DIR]

Per step of a recorded search (B=16, beams 1, 512, 1024, 1024): the fused step as a CUDA graph; the flat
kernels as graphs (the scan alone; expand, plan, list, test, rank in prefixes; the whole step) at 1 and 2 blocks of
512 threads an SM and 2 or 4 candidates a thread a pass. Its ranked output must equal the fused step's wherever the
first window held k passers (a request that would need a second round is counted, not compared). Why: to know
whether giving up one cluster per request could bring the step to 30 us (issue 4)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from flat_probe_host import FB, complete, decode, window_bin  # noqa: E402
from step_gpu import capture_step, cuda_time, recorded_search  # noqa: E402
from gtmkit.matcher.backend_cuda import load_module, step_outputs  # noqa: E402
from gtmkit.matcher.windows import calibrate_windows, pass_counts  # noqa: E402

NT = 512
# timed as graphs: the scan; then the step's kernels in prefixes (a kernel's cost is the difference: alone, plan's
# counters would not be zeroed, nor would the lists stop growing); step = expand through rank; all = scan + step
PARTS = ("scan", "expand", "to_plan", "to_list", "to_test", "step", "all")
SRC = HERE / "kernels" / "flat_probe.cu"


class Flat:
    """The probe's buffers and launches for one recorded step."""

    def __init__(self, mod, be, q, s, B, blocks, win):
        self.k = {n: mod.get_function(n) for n in ("flat_scan", "flat_expand", "flat_plan", "flat_list", "flat_test",
                                                   "flat_rank")}
        self.lp = cp.ascontiguousarray(s["logprobs"], cp.float32)
        self.bs = cp.ascontiguousarray(s["beam_scores"], cp.float32)
        self.be, self.q, self.s, self.B, self.blocks, self.win, self.kk = be, q, s, B, blocks, win, s["k"]
        R = len(s["node_ids"])
        assert R <= 1024 * 16 and B <= 64
        self.R, self.D = R, int(s["max_children"])
        self.row_start = cp.zeros(R + 1, cp.uint32)
        self.row_j0 = cp.zeros(R, cp.int64)
        self.cand = cp.zeros(R * self.D + 1, cp.uint64)
        self.child = cp.zeros(R * self.D + 1, cp.int32)
        self.ghist = cp.zeros(B * FB, cp.uint32)  # flat_rank leaves it zeroed for the next run
        self.thr = cp.zeros(B, cp.int32)
        self.cap = 4 * 1024 * 64  # listed candidates and passers a request (checked below)
        self.work, self.nwork = cp.zeros(B * self.cap, cp.uint32), cp.zeros(B, cp.uint32)
        self.passed, self.npass = cp.zeros(B * self.cap, cp.uint64), cp.zeros(B, cp.uint32)
        self.topk, self.out_n = cp.zeros(B * self.kk, cp.uint64), cp.zeros(B, cp.int32)

    def scan(self):
        self.k["flat_scan"]((1,), (1024,), (self.be.params, self.s["node_ids"], np.int64(self.R), self.row_start,
                                            self.row_j0))

    def _expand(self):
        self.k["flat_expand"]((self.blocks,), (NT,), (
            self.be.params, self.lp, np.int32(self.lp.shape[1]), self.bs, self.s["req_rows"], np.int32(self.B),
            np.int64(self.R), np.int32(self.D), self.row_start, self.row_j0, self.cand, self.child, self.ghist))

    def expand(self):  # timed alone: its histograms zeroed first
        self.ghist.fill(0)
        self._expand()

    def plan(self):
        self.k["flat_plan"]((self.B,), (1024,), (self.ghist, np.int32(self.win), self.thr, self.nwork, self.npass))

    def list(self):
        self.k["flat_list"]((self.blocks,), (NT,), (self.s["req_rows"], np.int32(self.B), self.row_start, self.cand,
                                                     self.thr, self.bs, self.work, np.int64(self.cap), self.nwork))

    def test(self):
        self.k["flat_test"]((self.blocks,), (NT,), (
            self.be.params, self.q.params, np.int32(self.B), self.work, np.int64(self.cap), self.nwork, self.cand,
            self.child, self.passed, np.int64(self.cap), self.npass))

    def rank(self):
        self.k["flat_rank"]((self.B,), (1024,), (self.passed, np.int64(self.cap), self.npass, np.int32(self.kk),
                                                 self.topk, self.out_n, self.ghist))

    def to_plan(self):
        self.expand(); self.plan()

    def to_list(self):
        self.to_plan(); self.list()

    def to_test(self):
        self.to_list(); self.test()

    def step(self):  # what a step would launch once the last step's kernels hand it row_start
        self._expand(); self.plan(); self.list(); self.test(); self.rank()

    def all(self):
        self.scan(); self.step()

    def check(self, fused_out) -> dict:
        """Exactness against the fused step's output; counts of requests compared and needing a second round."""
        s, B, D, kk = self.s, self.B, self.D, self.kk
        self.scan(); self.expand(); self.plan(); self.list(); self.test()
        hist = cp.asnumpy(self.ghist).reshape(B, FB)
        self.rank()
        rs = cp.asnumpy(self.row_start).astype(np.int64)
        rr = cp.asnumpy(s["req_rows"])
        j0 = cp.asnumpy(self.row_j0)
        per_req = rs[rr[1:]] - rs[rr[:-1]]
        assert (hist.sum(1) == per_req).all(), "histograms must count every candidate once"
        npass, nwork = cp.asnumpy(self.npass).astype(np.int64), cp.asnumpy(self.nwork).astype(np.int64)
        assert npass.max() <= self.cap and nwork.max() <= self.cap
        thr, topk, out_n = cp.asnumpy(self.thr), cp.asnumpy(self.topk).reshape(B, kk), cp.asnumpy(self.out_n)
        assert (thr == window_bin(hist, self.win)).all(), "flat_plan's window bins"
        assert (nwork == [hist[b, :thr[b] + 1].sum() for b in range(B)]).all(), "flat_list's lists"
        _, _, node, score, _ = (cp.asnumpy(a) for a in fused_out)
        compared = second = 0
        for b in range(B):
            if not complete(hist[b], thr[b], npass[b], kk):
                second += 1  # the first window held fewer than k passers: a second round would follow
                continue
            n = int((node[b] >= 0).sum())  # outputs: min(k, passers), then -1 padding
            assert out_n[b] == n, (b, out_n[b], n)
            nodes, sc = decode(topk[b, :n], D, rr[b], j0)
            assert (nodes == node[b, :n]).all(), f"request {b}: nodes differ from the fused step's"
            assert (sc == score[b, :n]).all(), f"request {b}: scores differ from the fused step's"
            compared += 1
        return dict(compared=compared, second_round=second, candidates=int(per_req.sum()), tested=int(nwork.sum()),
                    passers=int(npass.sum()), max_passers=int(npass.max()))


def graph_ms(fn) -> float:
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fn()
        stream.synchronize()
        stream.begin_capture()
        fn()
        g = stream.end_capture()
    return cuda_time(lambda: g.launch(stream), reps=50, stream=stream)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--per-sm", default="1,2", help="flat blocks of 512 threads an SM, comma-separated")
    args = ap.parse_args()
    rec = recorded_search(args.index, 16)
    m, steps, q, B, sizes = rec["m"], rec["steps"], rec["q"], rec["B"], rec["sizes"]
    be = m.cuda
    counts = [pass_counts(be, s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q,
                          s["k"], s["max_children"]) for s in steps]
    windows = calibrate_windows(counts, sizes)
    mods = {eu: load_module(SRC, (f"EU={eu}",)) for eu in (2, 4)}
    rows = []
    for t, s in enumerate(steps):
        win = windows[t] or 4 * s["k"]
        graph, stream = capture_step(be, s, q, B, windows[t])
        row = dict(step=t + 1, rows=len(s["node_ids"]), window=win,
                   fused_graph_us=1000 * cuda_time(lambda: graph.launch(stream), reps=50, stream=stream))
        kk = s["k"]
        out = step_outputs(B, kk)
        be.step(s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q, kk, True, False,
                s["max_children"], out=out, rows_best_first=True, first_window=windows[t])
        for per_sm in (int(x) for x in args.per_sm.split(",")):
            for eu, mod in mods.items():
                f = Flat(mod, be, q, s, B, per_sm * be.sms, win)
                tag = f"{per_sm}x_eu{eu}"
                row[f"check_{tag}"] = f.check(out)
                for part in PARTS:
                    row[f"{part}_{tag}_us"] = 1000 * graph_ms(getattr(f, part))
        print(json.dumps(row), flush=True)
        rows.append(row)
    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    res = dict(gpu=gpu, date=datetime.date.today().isoformat(), sms=be.sms,
               command=f"python benchmarks/probe_flat_step.py --index {args.index}", windows=windows, steps=rows)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "probe_flat_step.json").write_text(json.dumps(res, indent=1))
    tags = [k[len("all_"):-len("_us")] for k in rows[0] if k.startswith("all_")]
    lines = [f"# A step flat over the whole GPU: probe ({gpu}, {res['date']})", "",
             f"Command: `{res['command']}`. CUDA graph times, microseconds (median of 50). Flat kernels, timed in "
             "prefixes: expand; + plan; + list; + test; step = + rank (no memset: rank zeroes the histograms); "
             "all = scan + step. Every request the first window settled equals the fused step's output.", "",
             "| step | window | fused step | " + " | ".join(f"flat {tg}: scan; expand, +plan, +list, +test, **step**; "
                                                          "all" for tg in tags) + " |", "|---" * (3 + len(tags)) + "|"]
    for r in rows:
        cells = [f"{r[f'scan_{tg}_us']:.1f}; {r[f'expand_{tg}_us']:.1f}, {r[f'to_plan_{tg}_us']:.1f}, "
                 f"{r[f'to_list_{tg}_us']:.1f}, {r[f'to_test_{tg}_us']:.1f}, **{r[f'step_{tg}_us']:.1f}**; "
                 f"{r[f'all_{tg}_us']:.1f}" for tg in tags]
        lines.append(f"| {r['step']} | {r['window']} | {r['fused_graph_us']:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "Checks (requests compared with the fused output, needing a second round; candidates, listed, "
              "passers): " + "; ".join(f"step {r['step']}: {r['check_' + tags[0]]}" for r in rows)]
    (out_dir / "probe_flat_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
