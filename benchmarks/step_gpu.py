"""GPU matcher benchmark: CD+GTM step per depth, whole 4-step search (eager and CUDA graph), post-filter,
side by side in one run with (a) the same CD+GTM step in plain PyTorch (eager, torch.compile, CUDA
graph), (b) a STATIC-style CD-only step (padded CSR gather + torch.topk), (c) the CPU matcher; plus the
bytes each step must move and that floor at the measured copy bandwidth.

    python benchmarks/step_gpu.py --index /tmp/idx10m --out benchmarks/results

B=16 requests, beams (1, 512, 1024, 1024), V=512, L=4. Step inputs are recorded from one real search
with peaked synthetic logits, then every variant is timed on exactly those inputs (CUDA events, median).
Writes <out>/step_gpu_<host>.json and .md (host: the GPU's model, e.g. h200; --host)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import gtmkit  # noqa: E402
from gtmkit.synth import synth_users  # noqa: E402

from _common import HOST_HELP, gpu_name, result_paths  # noqa: E402

try:
    import cupy as cp
    from gtmkit.matcher.cuda.backend import step_outputs
    from gtmkit.matcher.cuda.graph import GraphedBeamSearch
    from gtmkit.matcher.cuda.windows import calibrate_window, pass_counts
    from gtmkit.synth.logits_cuda import GpuSyntheticDecoder
except ImportError as exc:  # --help works without CuPy; need_cuda() says what is missing
    cp, NO_CUDA = None, exc


def need_cuda() -> None:
    """Exit with one line when CuPy (and so the GPU path) is not importable."""
    if cp is None:
        raise SystemExit(f"{Path(sys.argv[0]).name} needs CuPy and a CUDA GPU (pip install 'gtmkit[gpu]'): {NO_CUDA}")


def cuda_time(fn, reps=50, warmup=5, stream=None):
    """Median milliseconds of fn() by CUDA events recorded on the stream the work runs on."""
    stream = stream or cp.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(stream)
        fn()
        b.record(stream)
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(times))


def copy_bandwidth():
    x = cp.empty(1 << 28, cp.float32)  # 1 GiB
    y = cp.empty_like(x)
    ms = cuda_time(lambda: y.__setitem__(Ellipsis, x), reps=20)
    return 2 * x.nbytes / (ms * 1e-3)  # bytes read + written per second


def record_inputs(m, reqs, users, sizes):
    """Run one eager search and keep every step's inputs."""
    steps = []
    dec = GpuSyntheticDecoder(users, m.index.vocab_size, seed=7)
    q = m.batch(reqs)
    B = q.size

    orig = m.cuda.step

    def spy(node_ids, logprobs, lp_dtype, beam_scores, row_req, req_rows, q_, k, gtm, count_all, max_children, out=None,
            **kw):
        req_rows = cp.searchsorted(row_req, cp.arange(B + 1, dtype=cp.int64)).astype(cp.int64)
        steps.append(dict(node_ids=node_ids.astype(cp.int64), logprobs=logprobs.copy(), beam_scores=beam_scores.copy(),
                          row_req=row_req.copy(), req_rows=req_rows, k=k, max_children=max_children))
        return orig(node_ids, logprobs, lp_dtype, beam_scores, row_req, req_rows, q_, k, gtm, count_all,
                    max_children, out, **kw)

    m.cuda.step = spy
    try:
        res = gtmkit.beam_search(m, q, dec, sizes, gtm=True, postfilter=False)
    finally:
        m.cuda.step = orig
    return steps, res, q, B


def recorded_search(index_path, requests: int, sizes=(1, 512, 1024, 1024)) -> dict:
    """The tools' common start (benchmarks/tools/): the index on the GPU, `requests` synthetic users (seed 11)
    and one recorded eager search over the beam schedule -> dict(m, steps, res, q, B, sizes, recorded logits)."""
    idx = gtmkit.load_index(index_path, verify=False)
    users = synth_users(idx.manifest["schema"], requests, seed=11)
    m = gtmkit.Matcher(idx, "cuda")
    steps, res, q, B = record_inputs(m, [idx.encode_request(u) for u in users], users, sizes)
    return dict(m=m, steps=steps, res=res, q=q, B=B, sizes=sizes, recorded=[s["logprobs"] for s in steps])


class TorchStep:
    """The CD+GTM step in plain PyTorch over a padded CSR (what one writes without custom kernels)."""

    def __init__(self, index, reqs_batch, device="cuda"):
        import torch
        self.torch = torch
        t = gtmkit.matcher.arrays.trie_arrays(index)
        no = t.node_offsets
        deg = np.diff(no)
        D = int(deg.max())
        n_int = len(no) - 1
        pad_tok = np.full((n_int, D), -1, np.int64)
        idx = np.arange(D)[None, :]
        valid = idx < deg[:, None]
        ent = no[:-1, None] + idx
        pad_tok[valid] = t.child_tokens[ent[valid]]
        pad_child = np.where(valid, ent + 1, -1)
        self.D, self.n_internal = D, n_int
        dev = device
        self.pad_tok = torch.tensor(pad_tok, device=dev)
        self.pad_child = torch.tensor(pad_child, device=dev)
        # fixed partition layout per node: [nodes, P] ids (-1 pad) for bitmask and bloom
        index_parts = index.partition_ranges()
        start, end = index_parts
        P = int((end - start).max())
        n = index.num_nodes
        pid = start[:, None] + np.arange(P)[None, :]
        ok = pid < end[:, None]
        pb = np.full((n, P), -1, np.int64)
        pb[ok] = np.asarray(index.part_bitmask_ids)[pid[ok]]
        pl = np.full((n, P), -1, np.int64)
        pl[ok] = np.asarray(index.part_bloom_ids)[pid[ok], 0]
        self.P = P
        self.part_bm = torch.tensor(pb, device=dev)
        self.part_bl = torch.tensor(pl, device=dev)
        self.bm_table = torch.tensor(np.asarray(index.bitmask_table).view(np.int64), device=dev)
        self.bl_table = torch.tensor(np.asarray(index.bloom_tables[0]).view(np.int64), device=dev)
        q = reqs_batch.host
        self.req_bm = torch.tensor(q.bitmask.view(np.int64), device=dev)                 # [B, A, W]
        S = int(np.diff(q.sig_off[:, :2], axis=1).max())
        sigs = np.zeros((q.size, S, q.sigs.shape[1]), np.uint64)
        has = np.zeros((q.size, S), bool)
        for b in range(q.size):
            s0, s1 = q.sig_off[b, 0], q.sig_off[b, 1]
            sigs[b, :s1 - s0] = q.sigs[s0:s1]
            has[b, :s1 - s0] = True
        self.req_sig = torch.tensor(sigs.view(np.int64), device=dev)                   # [B, S, Wb]
        self.req_has = torch.tensor(has, device=dev)

    def __call__(self, node_ids, logprobs, beam_scores, B, M, k, gtm=True):
        torch = self.torch
        live = (node_ids >= 0) & (node_ids < self.n_internal)
        nid = torch.where(live, node_ids, torch.zeros_like(node_ids))
        tok = self.pad_tok[nid]                                        # [R, D]
        child = self.pad_child[nid]
        valid = (tok >= 0) & live[:, None]
        lp = torch.gather(logprobs, 1, tok.clamp(min=0))
        score = beam_scores[:, None] + lp
        if gtm:
            c = child.clamp(min=0)
            bm = self.bm_table[self.part_bm[c].clamp(min=0)]          # [R, D, P, W]
            rb = torch.repeat_interleave(self.req_bm, M, dim=0)        # [R, A, W]
            hit = ((bm[:, :, :, None, :] & rb[:, None, None, :, :]) != 0).any(-1).all(-1)  # [R, D, P]
            bl = self.bl_table[self.part_bl[c].clamp(min=0)]          # [R, D, P, Wb]
            sg = torch.repeat_interleave(self.req_sig, M, dim=0)       # [R, S, Wb]
            hs = torch.repeat_interleave(self.req_has, M, dim=0)       # [R, S]
            inside = ((bl[:, :, :, None, :] & sg[:, None, None, :, :]) == sg[:, None, None, :, :]).all(-1)
            inside = (inside & hs[:, None, None, :]).any(-1)           # [R, D, P]
            ok = (hit & inside & (self.part_bm[c] >= 0)).any(-1)
            valid = valid & ok
        score = torch.where(valid, score, torch.full_like(score, -float("inf")))
        flat = score.view(B, M * self.D)
        top, pos = torch.topk(flat, k, dim=1)
        return top, pos

    def static_cd(self, node_ids, logprobs, beam_scores, B, M, k):
        return self(node_ids, logprobs, beam_scores, B, M, k, gtm=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--beams", default="1,512,1024,1024")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--cpu-reps", type=int, default=3)
    ap.add_argument("--compile-steps", default="2,3", help="steps whose torch variant is also compiled (slow to compile)")
    ap.add_argument("--host", help=HOST_HELP)
    args = ap.parse_args()
    need_cuda()
    sizes = tuple(int(x) for x in args.beams.split(","))
    idx = gtmkit.load_index(args.index, verify=False)
    users = synth_users(idx.manifest["schema"], args.requests, seed=11)
    reqs = [idx.encode_request(u) for u in users]
    t0 = time.perf_counter()
    m = gtmkit.Matcher(idx, "cuda")
    upload_s = time.perf_counter() - t0
    bw = copy_bandwidth()
    steps, res, q, B = record_inputs(m, reqs, users, sizes)
    rows = []
    be = m.cuda
    cpu = gtmkit.Matcher(idx, "cpu")
    qc = cpu.batch(reqs)
    tstep = TorchStep(idx, q) if not args.no_torch else None
    for t, s in enumerate(steps):
        R = int(s["node_ids"].shape[0])
        M = R // B
        row = {"step": t + 1, "rows": R, "k": s["k"], "max_children": s["max_children"]}
        cd_cnt, cnt = pass_counts(be, s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q,
                                  s["k"], s["max_children"])
        row["candidates_per_request_gtm"] = float(cp.asnumpy(cnt).mean())
        row["candidates_per_request_cd"] = float(cp.asnumpy(cd_cnt).mean())
        # the first GTM window GraphedBeamSearch's gtm_windows="auto" takes from these pass rates
        win = row["first_window"] = calibrate_window(cd_cnt, cnt, s["k"]) if be.fused else 0
        for gtm in (False, True):
            # (the recorded rows come best first, as in the search: rows_best_first, as GraphedBeamSearch sets it)
            fn = lambda gtm=gtm: be.step(s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"],  # noqa: E731
                                         s["req_rows"], q, s["k"], gtm, False, s["max_children"], rows_best_first=True,
                                         first_window=win)
            row["gpu_ms_" + ("gtm" if gtm else "cd")] = cuda_time(fn)
        row["gpu_graph_ms_gtm"] = graph_step_ms(be, s, q, B, win)
        if be.fused:  # the same with the kernel's default window (FIRST_WIN x k), side by side
            row["gpu_graph_ms_gtm_default_window"] = graph_step_ms(be, s, q, B, 0)
        if be.fused:  # the multi-kernel pipeline (pre-Hopper path) on the same inputs, for the ratio
            be.fused = False
            try:
                row["multi_ms_gtm"] = cuda_time(lambda: be.step(s["node_ids"], s["logprobs"], 0, s["beam_scores"],
                                                                s["row_req"], s["req_rows"], q, s["k"], True, False,
                                                                s["max_children"]))
                row["multi_graph_ms_gtm"] = graph_step_ms(be, s, q, B)
            finally:
                be.fused = True
        floor_bytes = R * idx.vocab_size * 4 + R * 8 * 3 + B * s["k"] * 16
        row["floor_bytes"] = floor_bytes
        row["floor_ms"] = floor_bytes / bw * 1e3
        # (c) CPU matcher on the same inputs
        nh, lh, bh, rh = (cp.asnumpy(s[x]) for x in ("node_ids", "logprobs", "beam_scores", "row_req"))
        cpu.step(nh, lh, bh, rh, qc, s["k"])
        ts = []
        for _ in range(args.cpu_reps):
            a = time.perf_counter()
            cpu.step(nh, lh, bh, rh, qc, s["k"])
            ts.append(time.perf_counter() - a)
        row["cpu_ms_gtm"] = 1e3 * float(np.median(ts))
        rows.append(row)
        print(json.dumps(row), flush=True)
    whole = whole_search(m, q, steps, res, sizes)
    # Torch variants last: a failure inside torch.compile / torch graphs must not poison our numbers.
    for t, (s, row) in enumerate(zip(steps, rows)):
        R = int(s["node_ids"].shape[0])
        M = R // B
        if tstep is not None:
            import torch
            n_t = torch.from_dlpack(s["node_ids"])
            l_t = torch.from_dlpack(s["logprobs"])
            b_t = torch.from_dlpack(s["beam_scores"])
            k = s["k"]
            try:
                row["torch_ms_gtm"] = cuda_time(lambda: tstep(n_t, l_t, b_t, B, M, k), reps=10)
            except torch.OutOfMemoryError:
                row["torch_ms_gtm"] = None
            torch.cuda.empty_cache()
            row["static_ms_cd"] = cuda_time(lambda: tstep.static_cd(n_t, l_t, b_t, B, M, k), reps=20)
            try:
                if str(t + 1) not in args.compile_steps.split(","):
                    raise RuntimeError("not compiled for this step (--compile-steps)")
                comp = torch.compile(lambda a, b_, c: tstep(a, b_, c, B, M, k))
                comp(n_t, l_t, b_t)
                row["torch_compiled_ms_gtm"] = cuda_time(lambda: comp(n_t, l_t, b_t), reps=10)
                g = torch.cuda.CUDAGraph()
                st = torch.cuda.Stream()
                st.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(st):
                    comp(n_t, l_t, b_t)
                torch.cuda.current_stream().wait_stream(st)
                with torch.cuda.graph(g):
                    comp(n_t, l_t, b_t)
                row["torch_compiled_graph_ms_gtm"] = cuda_time(g.replay, reps=10)
            except Exception as exc:  # report, don't die: compile support varies by image
                row["torch_compiled_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            torch.cuda.empty_cache()
            print(json.dumps(row), flush=True)
    finish(args, idx, m, B, sizes, bw, upload_s, rows, whole)


def graph_step_ms(be, s, q, B, first_window=0):
    """One CD+GTM step captured alone in a CUDA graph: its device time without host launch gaps."""
    graph, stream = capture_step(be, s, q, B, first_window)
    return cuda_time(lambda: graph.launch(stream), reps=50, stream=stream)


def capture_step(be, s, q, B, first_window=0):
    """-> (graph, stream): one recorded CD+GTM step captured alone, with its own buffers (first_window: the
    first GTM window, 0 the kernel's default)."""
    k = s["k"]
    out = step_outputs(B, k)
    scratch = {}
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        args = (s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q, k, True, False,
                s["max_children"])
        kw = dict(out=out, scratch=scratch, rows_best_first=True, first_window=first_window)
        be.step(*args, **kw)  # recorded rows come best first
        stream.synchronize()
        stream.begin_capture()
        be.step(*args, **kw)
        graph = stream.end_capture()
    return graph, stream


def whole_search(m, q, steps, res, sizes):
    """Whole search, eager and as a graph; the decoder replays recorded logits so only gtmkit is timed."""
    recorded = [s["logprobs"] for s in steps]

    def replayed(step, prev, parents):
        return recorded[step]

    whole = {}
    for gtm in (False, True):
        whole["eager_ms_" + ("gtm" if gtm else "cd")] = cuda_time(
            lambda gtm=gtm: gtmkit.beam_search(m, q, replayed, sizes, gtm=gtm, postfilter=False), reps=10)
    g = GraphedBeamSearch(m, q, replayed, sizes, gtm=True, postfilter=True)
    whole["graph_ms_gtm_postfilter"] = cuda_time(g.launch, reps=50, stream=g.stream)
    whole["gtm_windows"] = g.windows
    # side by side: the kernel's default first window (FIRST_WIN x k) at every step
    gd = GraphedBeamSearch(m, q, replayed, sizes, gtm=True, postfilter=True,
                           options=replace(m.options, gtm_windows=None))
    whole["graph_ms_gtm_postfilter_default_windows"] = cuda_time(gd.launch, reps=50, stream=gd.stream)
    g2 = GraphedBeamSearch(m, q, replayed, sizes, gtm=True, postfilter=False)
    whole["graph_ms_gtm"] = cuda_time(g2.launch, reps=50, stream=g2.stream)
    g3 = GraphedBeamSearch(m, q, replayed, sizes, gtm=False, postfilter=False)
    whole["graph_ms_cd"] = cuda_time(g3.launch, reps=50, stream=g3.stream)
    # the other launch mode side by side: programmatic dependent launch of the steps and post-filter, or not
    whole["pdl"] = g.pdl
    ga = GraphedBeamSearch(m, q, replayed, sizes, gtm=True, postfilter=True, options=replace(m.options, pdl=not g.pdl))
    if ga.pdl != g.pdl:
        whole["graph_ms_gtm_postfilter_pdl_" + ("on" if ga.pdl else "off")] = cuda_time(ga.launch, reps=50,
                                                                                      stream=ga.stream)
    leaves = cp.asarray(res.leaf_nodes, cp.int64)
    whole["postfilter_ms"] = cuda_time(lambda: m.cuda.postfilter_padded(leaves, q, True), reps=50)
    # the graphed search must give the eager answer
    eager = gtmkit.beam_search(m, q, replayed, sizes, gtm=True)
    whole["graph_equals_eager"] = True
    for gg in (g, gd, ga):
        gr = gg.replay()
        whole["graph_equals_eager"] &= bool(cp.array_equal(gr.sids, eager.sids) and cp.array_equal(gr.scores, eager.scores))
    print(json.dumps(whole), flush=True)
    return whole


def finish(args, idx, m, B, sizes, bw, upload_s, rows, whole):

    result = {"benchmark": "step_gpu", "date": datetime.date.today().isoformat(), "gpu": gpu_name(),
              "command": "python " + " ".join(sys.argv), "index": {"sids": idx.num_sids, "ads": idx.num_ads,
                                                                   "partition": idx.stats()["partition"]},
              "requests": B, "beams": list(sizes), "copy_bandwidth_gbs": bw / 1e9, "upload_s": upload_s,
              "device_bytes": m.device_bytes, "steps": rows, "whole": whole}
    js, md = result_paths(args.out, "step_gpu", args.host, result["gpu"])
    js.write_text(json.dumps(result, indent=1))
    md.write_text(markdown(result))
    print(markdown(result))


def markdown(r):
    def f(x):
        return "n/a" if x is None else f"{x:.3f}"
    lines = [f"# GPU matcher ({r['gpu']}, {r['date']})", "",
             f"Command: `{r['command']}`. Index: {r['index']['sids']:,} SIDs, {r['index']['ads']:,} ads, "
             f"partition {r['index']['partition']['mode']}. B={r['requests']}, beams {r['beams']}. "
             f"Copy bandwidth {r['copy_bandwidth_gbs']:.0f} GB/s. Index on GPU: {r['device_bytes'] / 1e6:.0f} MB.", "",
             "| step | rows | cand/req CD | cand/req GTM | ours CD ms | ours CD+GTM ms | ours CD+GTM as graph ms | floor ms | "
             "(a) torch CD+GTM ms | (a) compiled ms | (a) compiled+graph ms | (b) STATIC CD ms | (c) CPU CD+GTM ms | "
             "(a)/ours | (b)/ours | multi-kernel ms | multi-kernel as graph ms | first GTM window | "
             "as graph, window FIRST_WIN x k ms |",
             "|" + "---|" * 19]
    for s in r["steps"]:
        ours = s["gpu_ms_gtm"]
        a = s.get("torch_compiled_graph_ms_gtm") or s.get("torch_compiled_ms_gtm") or s.get("torch_ms_gtm")
        b = s.get("static_ms_cd")
        lines.append(f"| {s['step']} | {s['rows']} | {s['candidates_per_request_cd']:.0f} | {s['candidates_per_request_gtm']:.0f} | "
                     f"{f(s['gpu_ms_cd'])} | {f(ours)} | {f(s.get('gpu_graph_ms_gtm'))} | {f(s['floor_ms'])} | "
                     f"{f(s.get('torch_ms_gtm'))} | "
                     f"{f(s.get('torch_compiled_ms_gtm'))} | {f(s.get('torch_compiled_graph_ms_gtm'))} | {f(b)} | "
                     f"{f(s['cpu_ms_gtm'])} | {f(a / ours) if a else 'n/a'} | {f(b / ours) if b else 'n/a'} | "
                     f"{f(s.get('multi_ms_gtm'))} | {f(s.get('multi_graph_ms_gtm'))} | {s.get('first_window', 'n/a')} | "
                     f"{f(s.get('gpu_graph_ms_gtm_default_window'))} |")
    w = r["whole"]
    lines += ["", "| whole search | ms |", "|---|---|"] + [
        f"| {k} | {v if isinstance(v, (bool, list)) else f'{v:.3f}'} |" for k, v in w.items()]
    lines += ["", "Targets:"] + targets(r)
    return "\n".join(lines) + "\n"


def targets(r):
    """Each target with its measured value: met / not met."""
    def verdict(ok):
        return "**met**" if ok else "**not met**"
    steps, w = r["steps"], r["whole"]
    g = [s.get("gpu_graph_ms_gtm") or s["gpu_ms_gtm"] for s in steps]
    out = [f"- CD+GTM step incl. top-k <= 30 us at every depth (as a graph): "
           f"{', '.join(f'{1e3 * x:.0f} us' for x in g)}: {verdict(max(g) <= 0.030)}"]
    whole = w.get("graph_ms_gtm_postfilter")
    if whole is not None:
        out.append(f"- whole 4-step search incl. GTM and post-filter <= 0.2 ms as a graph: {whole:.3f} ms: "
                   f"{verdict(whole <= 0.2)}")
    # like with like: (a) as a graph against ours as a graph, (a) eager against ours eager
    ratios_a = [(s["torch_compiled_graph_ms_gtm"] / gi if s.get("torch_compiled_graph_ms_gtm") else
                 (s.get("torch_compiled_ms_gtm") or s["torch_ms_gtm"]) / s["gpu_ms_gtm"], s["step"])
                for s, gi in zip(steps, g) if s.get("torch_ms_gtm")]
    if ratios_a:
        out.append(f"- >= 5x faster than (a) (its best form at each step, graph vs graph, eager vs eager): "
                   f"{', '.join(f'step {t}: {x:.1f}x' for x, t in ratios_a)}: {verdict(min(x for x, _ in ratios_a) >= 5)}")
    ratios_b = [(s["static_ms_cd"] / s["gpu_ms_gtm"], s["step"]) for s in steps if s.get("static_ms_cd")]
    if ratios_b:
        out.append(f"- faster than (b) STATIC-style CD while doing GTM (both eager): "
                   f"{', '.join(f'step {t}: {x:.1f}x' for x, t in ratios_b)}: {verdict(min(x for x, _ in ratios_b) > 1)}")
    return out


if __name__ == "__main__":
    main()
