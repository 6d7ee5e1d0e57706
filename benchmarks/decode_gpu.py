"""SidDecoder on the GPU: GRACE's encoder-decoder shape over the 10M-SID index, side by side in one run.

Model: a T5ForConditionalGeneration with random weights built from a config (d_model 1024, 16 heads x 128,
d_ff 4096 relu, 3 encoder + 3 decoder layers, bf16), vocabulary = 3 specials (pad/start 0, EOS 1, unk 2) + the
index's V SID tokens in one shared range (SidTokenLayout(3, 3 + V, eos_token_id=1)), --context tokens a request,
B = --batch requests. Two beam schedules: dynamic (--beams, GRACE's 1,512,1024,1024) and fixed (1,M,M,M, M =
--fixed-beams). Rows:
  (a) custom_generate  model.generate(custom_generate=gtmkit_beam_search, beam_sizes=dynamic);
  (b) processor        model.generate(num_beams=M, logits_processor=[GTMLogitsProcessor], length_penalty=0);
                       an out-of-memory error is recorded (what it asked for, what torch holds), never raised;
  (c) eager            SidDecoder.search(graph=False) at both schedules;
  (d) graph            SidDecoder.search() at both schedules: the first call captures, the later calls (two
                       request batches in turn) replay; also its device time (CUDA events around a replay);
  (e) GEMM floor       the decoder's weight GEMMs alone (each step's rows through every layer's QKV, self O,
                       cross Q, cross O, FFN in and out, the LM head; the cross K/V projection of the context
                       once a request) as one CUDA graph a step, bf16: ms, FLOPs, TFLOP/s.
Besides: the encoder alone (the targets are for the whole request after the encoder: Result.seconds[-1] of a
graphed search, which waits for the replay), GTM's share (the matcher's CD+GTM steps and post-filter replayed
alone on the log-probs the decoder produced, as a graph; and the decoder graph with gtm=False against gtm=True),
the search's FLOPs, and correctness: the graph's SIDs against the eager decoder's, a bf16 decoder's top SIDs
against a float32 decoder's on the same encoder states.

Times are ms a batch of B requests: wall time with the device synchronised before and after (median and p90
over --reps calls after a warm-up) unless a column says device time. Writes <out>/decode_gpu_<host>.{json,md};
--small shrinks everything (a d_model 64 model, a synthetic index built on the fly when --index is not given,
B=4, beams 1,32,64,64) so that it runs on the CPU in under a minute (graph rows off there): its files are
decode_gpu_small_<host>.*, a smoke test, not figures."""

from __future__ import annotations

import argparse
import datetime
import gc
import itertools
import json
import re
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import HOST_HELP, gpu_name, result_paths  # noqa: E402

SPECIALS = 3  # pad / decoder start 0, EOS 1, unk 2
GRACE = dict(d_model=1024, num_heads=16, d_kv=128, d_ff=4096)
SMALL = dict(d_model=64, num_heads=2, d_kv=32, d_ff=256)
GRACE_GFLOP_PER_REQUEST = 533  # GRACE's count at 1024 beams (4 steps x 1024 rows a request)
TARGETS = dict(graph_dynamic_ms=12.0, graph_fixed_ms=16.0, floor_ratio=1.4, speedup_vs_generate=20.0,
               gtm_share=0.03)


# --- timing -------------------------------------------------------------------------------------------------

class Clock:
    """Wall-clock timing with the device synchronised around each call (CUDA), CUDA events for device time."""

    def __init__(self, torch, device):
        self.torch, self.gpu = torch, device.type == "cuda"

    def sync(self):
        if self.gpu:
            self.torch.cuda.synchronize()

    def wall(self, fn, reps: int, warmup: int = 1) -> tuple:
        """-> (ms of each of `reps` calls after `warmup` calls, the last call's output)."""
        out = None
        for _ in range(warmup):
            out = fn()
        self.sync()
        ms = []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = fn()
            self.sync()
            ms.append(1e3 * (time.perf_counter() - t0))
        return ms, out

    def device(self, fn, reps: int, stream=None, warmup: int = 2) -> list:
        """Device ms of fn() between CUDA events on `stream` (torch's current one by default)."""
        t = self.torch
        stream = stream or t.cuda.current_stream()
        for _ in range(warmup):
            fn()
        t.cuda.synchronize()
        ms = []
        for _ in range(reps):
            s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            s.record(stream)
            fn()
            e.record(stream)
            e.synchronize()
            ms.append(s.elapsed_time(e))
        return ms


def stats(ms) -> dict:
    ms = np.asarray(ms, float)
    return {"median": float(np.median(ms)), "p90": float(np.percentile(ms, 90)), "min": float(ms.min()),
            "n": int(ms.size)}


def peak_gib(torch, gpu: bool):
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if gpu else None


def reset_peak(torch, gpu: bool):
    if gpu:
        torch.cuda.reset_peak_memory_stats()


def free_memory(torch, gpu: bool):
    gc.collect()
    if gpu:
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def is_oom(torch, e) -> bool:
    """An allocation the device could not serve: torch's or CuPy's out-of-memory error, or cuBLAS failing to
    allocate its workspace."""
    if isinstance(e, torch.cuda.OutOfMemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    return isinstance(e, RuntimeError) and ("out of memory" in str(e) or "ALLOC_FAILED" in str(e))


def oom_record(torch, e) -> dict:
    """What an out-of-memory error asked for and what torch held and saw free when it came."""
    msg = str(e)
    asked = re.search(r"Tried to allocate ([\d.]+ [KMGT]?i?B)", msg)
    rec = {"error": "out of memory", "asked": asked.group(1) if asked else None, "message": msg[:300]}
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        rec.update(allocated_gib=round(torch.cuda.memory_allocated() / 2**30, 2),
                   peak_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                   reserved_gib=round(torch.cuda.memory_reserved() / 2**30, 2),
                   free_gib=round(free / 2**30, 2), total_gib=round(total / 2**30, 2))
    return rec


# --- FLOPs --------------------------------------------------------------------------------------------------

def matrices(cfg) -> dict:
    """[out, in] of each weight matrix a T5 decoder layer runs (as SidDecoder packs them: Q, K, V as one matrix, a
    gated FFN's two input projections as one; gtmkit/decoding/t5.py), of the cross K/V and of the LM head."""
    d, inner, ff = cfg.d_model, cfg.num_heads * cfg.d_kv, cfg.d_ff
    gated = bool(getattr(cfg, "is_gated_act", False))
    return {"layer": [("qkv", 3 * inner, d), ("self O", d, inner), ("cross Q", inner, d), ("cross O", d, inner),
                      ("FFN in", (2 if gated else 1) * ff, d), ("FFN out", d, ff)],
            "cross_kv": (2 * inner, d), "lm_head": (cfg.vocab_size, d), "layers": cfg.num_decoder_layers,
            "inner": inner}


def gemm_list(cfg, B: int, ctx: int, sizes) -> list:
    """(part, rows, layer, name, out, in) of every weight GEMM of a search: the cross K/V of the context once a
    request, then for step t the rows B * sizes[t] through each layer's fused QKV, self O, cross Q, cross O, FFN in,
    FFN out, and the LM head."""
    mx = matrices(cfg)
    out = [("cross K/V", B * ctx, i, "cross K/V", *mx["cross_kv"]) for i in range(mx["layers"])]
    for t, per in enumerate(sizes):
        R = B * int(per)
        for i in range(mx["layers"]):
            out += [(f"step {t + 1}", R, i, name, o, n) for name, o, n in mx["layer"]]
        out.append((f"step {t + 1}", R, -1, "LM head", *mx["lm_head"]))
    return out


def search_flops(cfg, B: int, ctx: int, sizes) -> dict:
    """FLOPs of a search (2 a multiply-add): the weight GEMMs of the rows (`rows`), the cross K/V projection of
    the context (`cross_kv`, once a request) and the cross- and self-attention of the rows (QK and PV)."""
    rows = kv = 0
    for part, n, _, _, o, i in gemm_list(cfg, B, ctx, sizes):
        f = 2 * n * o * i
        kv, rows = (kv + f, rows) if part == "cross K/V" else (kv, rows + f)
    mx = matrices(cfg)
    attn = sum(B * int(per) * mx["layers"] * 4 * mx["inner"] * (ctx + t + 1) for t, per in enumerate(sizes))
    return {"rows": rows, "cross_kv": kv, "attention": attn, "gemm": rows + kv, "total": rows + kv + attn}


# --- the rows -----------------------------------------------------------------------------------------------

def gemm_floor(torch, clock, cfg, dtype, device, B: int, ctx: int, sizes, reps: int) -> dict:
    """(e): each part's weight GEMMs (F.linear of random weights on preallocated random inputs, in `dtype`) as one
    CUDA graph (a tight loop on the CPU): median ms, FLOPs and TFLOP/s a part and in all."""
    import torch.nn.functional as F
    gen = torch.Generator(device=device).manual_seed(0)
    weights = {}  # one matrix a (layer, name), as the decoder has
    parts = {}
    for part, rows, layer, name, o, i in gemm_list(cfg, B, ctx, sizes):
        if (layer, name) not in weights:
            weights[layer, name] = torch.randn(o, i, device=device, dtype=dtype, generator=gen) * i ** -0.5
        parts.setdefault(part, []).append((rows, weights[layer, name]))
    out, total_ms, total_flops = [], 0.0, 0
    for part, ops in parts.items():
        inputs = {}  # one input a (rows, width), read by every matrix of that width
        for rows, m in ops:
            if (rows, m.shape[1]) not in inputs:
                inputs[rows, m.shape[1]] = torch.randn(rows, m.shape[1], device=m.device, dtype=m.dtype, generator=gen)
        args = [(inputs[rows, m.shape[1]], m) for rows, m in ops]

        def run(args=args):
            for x, m in args:
                F.linear(x, m)

        if clock.gpu:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                run()  # cuBLAS picks its kernels and workspace before the capture
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                run()
            ms = float(np.median(clock.device(g.replay, reps)))
            del g
        else:
            ms = float(np.median(clock.wall(run, reps)[0]))
        flops = sum(2 * rows * m.shape[0] * m.shape[1] for rows, m in ops)
        out.append({"part": part, "rows": ops[0][0], "gemms": len(ops), "gflop": flops / 1e9, "ms": ms,
                    "tflops": flops / (ms * 1e-3) / 1e12})
        total_ms += ms
        total_flops += flops
        del inputs, args
    return {"parts": out, "ms": total_ms, "gflop": total_flops / 1e9, "tflops": total_flops / (total_ms * 1e-3) / 1e12}


def matcher_alone(torch, clock, m, reqs, dec, x, sizes, reps: int) -> dict:
    """GTM's own time: the log-probs one eager search's decoder produced are recorded, then the matcher's steps
    (CD+GTM and top-k) and post-filter replay on them alone (a graph on the GPU, as the decoder graph runs them)."""
    import gtmkit
    cur = m.current()
    recorded = []
    orig = cur.step

    def spy(node_ids, logprobs, *a, **kw):
        recorded.append(logprobs.clone() if isinstance(logprobs, torch.Tensor) else np.array(logprobs, copy=True))
        return orig(node_ids, logprobs, *a, **kw)

    cur.step = spy  # an instance attribute over the method, removed below
    try:
        dec.search(x, reqs, sizes, graph=False)
    finally:
        del cur.step
    clock.sync()  # the recorded copies are written before another stream reads them
    if len(recorded) != len(sizes):
        raise RuntimeError(f"the eager search called Matcher.step {len(recorded)} times for {len(sizes)} steps: "
                           "no log-probs to replay")
    out = {}
    if clock.gpu:
        import cupy as cp
        from gtmkit.matcher.cuda.graph import GraphedBeamSearch
        lps = [cp.from_dlpack(t) for t in recorded]

        def replayed(t, prev, parent):
            return lps[t]

        q = m.batch(reqs)
        for name, gtm, post in (("cd_gtm_postfilter", True, True), ("cd_gtm", True, False), ("cd", False, False)):
            g = GraphedBeamSearch(m, q, replayed, sizes, gtm=gtm, postfilter=post)
            s = torch.cuda.ExternalStream(g.stream.ptr)
            out[name + "_ms"] = float(np.median(clock.device(g.launch, reps, stream=s)))
            del g
    else:
        lps = recorded

        def replayed(t, prev, parent):
            return lps[t]

        for name, gtm, post in (("cd_gtm_postfilter", True, True), ("cd_gtm", True, False), ("cd", False, False)):
            out[name + "_ms"] = float(np.median(clock.wall(
                lambda gtm=gtm, post=post: gtmkit.beam_search(m, reqs, replayed, sizes, gtm=gtm, postfilter=post),
                reps)[0]))
    lp0 = recorded[0].float() if isinstance(recorded[0], torch.Tensor) else torch.from_numpy(recorded[0])
    out["step1_logprob_std"] = float(lp0.std(dim=1).mean())  # how flat the random model's distribution is
    out["step1_top_minus_median"] = float((lp0.max(dim=1).values - lp0.median(dim=1).values).mean())
    return out


def graph_device_ms(torch, clock, dec, sizes, gtm: bool, reps: int):
    """Device ms of replays of the graph SidDecoder captured for this schedule (the one its last search ran: no new
    inputs copied in), between CUDA events on the graph's stream; None where SidDecoder keeps its graphs otherwise
    than this reads them (a dict (batch, context, beam sizes, gtm, ...) -> object with .search, a
    GraphedBeamSearch)."""
    found = [v for k, v in getattr(dec, "_graphs", {}).items()
             if isinstance(k, tuple) and len(k) > 3 and tuple(k[2]) == tuple(sizes) and k[3] == gtm]
    g = getattr(found[-1], "search", None) if found else None
    if g is None or not hasattr(g, "launch"):
        print("note: no captured graph found in SidDecoder._graphs: device time left out", flush=True)
        return None
    stream = getattr(g, "_torch_stream", None) or torch.cuda.ExternalStream(g.stream.ptr)
    return clock.device(g.launch, reps, stream=stream)


def as_np(x):
    from gtmkit.matcher.beam import as_numpy
    return as_numpy(x)


def equal_rows(a, b) -> dict:
    """Share of (request, beam) rows whose SID is the same in two results; of scores bit-equal; of requests
    whose post-filtered ads are the same."""
    sa, sb = as_np(a.sids), as_np(b.sids)
    out = {"sid_rows_equal": float((sa == sb).all(axis=-1).mean()),
           "scores_equal": float((as_np(a.scores) == as_np(b.scores)).mean())}
    if a.ads is not None and b.ads is not None:
        out["ads_equal_requests"] = float(np.mean([np.array_equal(as_np(x[0]), as_np(y[0]))
                                                   for x, y in zip(a.ads, b.ads)]))
    return out


def agreement(a, b, top: int = 10) -> dict:
    """How far two searches' top SIDs agree (a leaf node is a SID): the share of requests with the same best SID,
    the mean share of b's top `top` SIDs among a's top `top`, and of b's whole final beam among a's."""
    la, lb = as_np(a.leaf_nodes), as_np(b.leaf_nodes)
    top1, topk, whole = [], [], []
    for ra, rb in zip(la, lb):
        va, vb = ra[ra >= 0], rb[rb >= 0]
        top1.append(bool(len(va) and len(vb) and va[0] == vb[0]))
        k = min(top, len(vb))
        topk.append(len(set(va[:top].tolist()) & set(vb[:k].tolist())) / max(k, 1))
        whole.append(len(set(va.tolist()) & set(vb.tolist())) / max(len(vb), 1))
    return {"top1_equal": float(np.mean(top1)), f"top{top}_overlap": float(np.mean(topk)),
            "beam_overlap": float(np.mean(whole))}


def eligible_share(res) -> float:
    """Returned SIDs that hold at least one ad the post-filter keeps for the request, over the returned SIDs."""
    leaves = as_np(res.leaf_nodes)
    kept = sum(len(np.unique(as_np(rank))) for _, rank in res.ads)
    return kept / max(int((leaves >= 0).sum()), 1)


# --- main ---------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", help="a built index (the 10M-SID one: see benchmarks/README.md); --small builds a "
                                    "tiny one when it is not given")
    ap.add_argument("--batch", type=int, default=None, help="requests a batch (16; --small 4)")
    ap.add_argument("--context", type=int, default=None, help="encoder tokens a request (128; --small 16)")
    ap.add_argument("--beams", default=None, help="the dynamic schedule (1,512,1024,1024; --small 1,32,64,64)")
    ap.add_argument("--fixed-beams", type=int, default=None, help="M of the fixed schedule 1,M,M,M (1024; --small 64)")
    ap.add_argument("--reps", type=int, default=None, help="timed calls of the SidDecoder rows (20; --small 3)")
    ap.add_argument("--generate-reps", type=int, default=None, help="timed calls of the generate() rows (3; --small 1)")
    ap.add_argument("--short-context", type=int, default=16,
                    help="context of a generate() row's retry when it runs out of memory at --context (0: no retry)")
    ap.add_argument("--skip", default="",
                    help="comma-separated parts to leave out: graph,gtm,gemm,fp32,generate,processor")
    ap.add_argument("--small", action="store_true", help="a tiny model and index that run on the CPU")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--workdir", default="/tmp/gtmkit-decode-small", help="where --small builds its index")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)
    args = ap.parse_args()
    small = args.small
    B = args.batch or (4 if small else 16)
    ctx = args.context or (16 if small else 128)
    reps = args.reps or (3 if small else 20)
    greps = args.generate_reps or (1 if small else 3)
    skip = set(filter(None, args.skip.split(",")))

    try:
        import torch
        import transformers
        from transformers import T5Config, T5ForConditionalGeneration
    except ImportError as e:
        raise SystemExit(f"{Path(sys.argv[0]).name} needs torch and transformers: pip install 'gtmkit[hf]' ({e})")

    import gtmkit
    from gtmkit.decoding import SidDecoder
    from gtmkit.integrations.transformers import GTMLogitsProcessor, SidTokenLayout, gtmkit_beam_search
    from gtmkit.synth import synth_users, write_catalog

    cuda = torch.cuda.is_available() and args.device != "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    if cuda:
        try:
            import cupy  # noqa: F401  (the GPU matcher)
        except ImportError as e:
            raise SystemExit(f"the GPU matcher needs CuPy: pip install 'gtmkit[gpu]' ({e})")
    elif not small:
        raise SystemExit("no CUDA device (or --device cpu): the full-size run is for a GPU; --small runs on the CPU")
    else:
        # numba's worker threads spin on these cores after each CPU matcher step: one torch thread runs beside them
        torch.set_num_threads(1)
    device = torch.device("cuda" if cuda else "cpu")
    clock = Clock(torch, device)

    if args.index:
        index = gtmkit.load_index(args.index, verify=False)
    elif small:
        work = Path(args.workdir)
        if not (work / "idx" / "manifest.json").exists():
            work.mkdir(parents=True, exist_ok=True)
            catalog, _ = write_catalog(work / "catalog.parquet", 20_000, seed=1)
            gtmkit.build_index(catalog, work / "idx", partition="static", k=[1, 4, 4, 2], overwrite=True)
        index = gtmkit.load_index(work / "idx", verify=False)
    else:
        raise SystemExit("--index is required (or --small)")
    V, L = int(index.vocab_size), int(index.sid_length)
    if (V, L) != (512, 4):
        print(f"note: the index has V={V}, L={L}, not GRACE's V=512, L=4 (the results say so)", flush=True)
    dyn = tuple(int(s) for s in (args.beams or ("1,32,64,64" if small else "1,512,1024,1024")).split(","))
    M = args.fixed_beams or (64 if small else 1024)
    fixed = (1,) + (M,) * (L - 1)
    if len(dyn) != L:
        raise SystemExit(f"--beams holds {len(dyn)} sizes; the index's SIDs have {L} tokens")

    m = gtmkit.Matcher(index, device="cuda" if cuda else "cpu")
    schema = index.manifest["schema"]
    reqs_a = [index.encode_request(u) for u in synth_users(schema, B, seed=1)]
    reqs_b = [index.encode_request(u) for u in synth_users(schema, B, seed=2)]
    layout = SidTokenLayout(SPECIALS, SPECIALS + V, eos_token_id=1)
    shape = SMALL if small else GRACE
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=SPECIALS + V, **shape, feed_forward_proj="relu", num_layers=3, num_decoder_layers=3,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    dtype = torch.bfloat16 if cuda else torch.float32
    model = T5ForConditionalGeneration(cfg).to(device, dtype).eval()
    x_a = torch.randint(SPECIALS, SPECIALS + V, (B, ctx), device=device)
    x_b = torch.randint(SPECIALS, SPECIALS + V, (B, ctx), device=device)
    batches = [(x_a, reqs_a), (x_b, reqs_b)]  # the timed calls take them in turn: the graph serves new requests

    gpu = (gpu_name() or "") if cuda else ""
    result = {
        "benchmark": "decode_gpu", "date": datetime.date.today().isoformat(), "gpu": gpu or None,
        "device": str(device), "small": small, "command": "python " + " ".join(sys.argv),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "index": {"path": str(args.index or Path(args.workdir) / "idx"), "sids": int(index.num_sids),
                  "ads": int(index.num_ads), "vocab": V, "sid_length": L, "grace_shape": V == 512 and L == 4},
        "model": {**shape, "layers": "3 + 3", "ffn": "relu", "vocab": SPECIALS + V,
                  "dtype": str(dtype).replace("torch.", ""),
                  "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1)},
        "requests": B, "context": ctx, "beams_dynamic": list(dyn), "beams_fixed": list(fixed), "reps": reps,
        "generate_reps": greps, "rows": [], "errors": {}}
    js, md = result_paths(args.out, "decode_gpu_small" if small else "decode_gpu", args.host, gpu)
    rows = result["rows"]

    def save():
        result["targets"] = targets(result)
        js.write_text(json.dumps(result, indent=1))
        md.write_text(markdown(result))

    def section(name, fn):
        """Run one part; a failure is recorded (and printed), never the end of the run."""
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - report, go on with the other parts
            traceback.print_exc()
            result["errors"][name] = f"{type(e).__name__}: {str(e)[:300]}"
        free_memory(torch, cuda)
        print(f"[{name}: {time.perf_counter() - t0:.1f} s]", flush=True)
        save()

    print(f"index {index.num_sids:,} SIDs, V={V}, L={L}; model {result['model']}; B={B}, context {ctx}, "
          f"beams {dyn} and {fixed}; {device}", flush=True)
    dec = SidDecoder(model, m, layout)  # bf16 on the GPU, float32 on the CPU
    keep = {}
    names = {dyn: "dynamic", fixed: "fixed"}

    def encoder():
        mask = torch.ones_like(x_a)
        with torch.no_grad():
            ms, _ = clock.wall(lambda: model.encoder(input_ids=x_a, attention_mask=mask, return_dict=True), reps)
        result["encoder"] = stats(ms)
        print("encoder", result["encoder"], flush=True)

    def eager():
        for sizes in (dyn, fixed):
            reset_peak(torch, cuda)
            calls = itertools.count()
            ms, _ = clock.wall(lambda: dec.search(*batches[next(calls) % 2], sizes, graph=False), reps)
            keep["eager", sizes] = dec.search(x_a, reqs_a, sizes, graph=False)
            enc = result.get("encoder", {}).get("median")
            rows.append({"route": "eager", "beams": list(sizes), "schedule": names[sizes], "ms": stats(ms),
                         "after_encoder_ms": None if enc is None else float(np.median(ms)) - enc,
                         "peak_gib": peak_gib(torch, cuda),
                         "eligible_share": eligible_share(keep["eager", sizes])})
            print(rows[-1], flush=True)

    def graphed():
        for sizes in (dyn, fixed):
            reset_peak(torch, cuda)
            clock.sync()
            t0 = time.perf_counter()
            dec.search(x_a, reqs_a, sizes)
            clock.sync()
            capture_ms = 1e3 * (time.perf_counter() - t0)
            after, calls = [], itertools.count()

            def call():
                r = dec.search(*batches[next(calls) % 2], sizes)
                after.append(1e3 * float(r.seconds[-1]))  # set_inputs + replay (waited for) + the result's copy
                return r

            ms, _ = clock.wall(call, reps)
            keep["graph", sizes] = dec.search(x_a, reqs_a, sizes)
            dev_ms = graph_device_ms(torch, clock, dec, sizes, True, reps)
            rows.append({"route": "graph", "beams": list(sizes), "schedule": names[sizes], "capture_ms": capture_ms,
                         "ms": stats(ms), "after_encoder": stats(after[1:]), "device": dev_ms and stats(dev_ms),
                         "peak_gib": peak_gib(torch, cuda)})
            print(rows[-1], flush=True)
        # the decoder graph without GTM (CD only, post-filter kept): the difference is GTM's time in the graph
        dec.search(x_a, reqs_a, dyn, gtm=False)
        dev_ms = graph_device_ms(torch, clock, dec, dyn, False, reps)
        rows.append({"route": "graph gtm=False", "beams": list(dyn), "schedule": "dynamic",
                     "device": dev_ms and stats(dev_ms)})
        print(rows[-1], flush=True)
        getattr(dec, "_graphs", {}).clear()  # the captured graphs' memory pools go before the generate() rows

    def correctness():
        c = result.setdefault("correctness", {})
        for sizes in (dyn, fixed):
            if ("graph", sizes) in keep:
                c["graph_vs_eager_" + names[sizes]] = equal_rows(keep["graph", sizes], keep["eager", sizes])
        if not cuda:
            c["fp32"] = "n/a: the CPU decoder runs float32 only (no bf16 run to compare)"
            return
        if "fp32" in skip:
            return
        dec32 = SidDecoder(model, m, layout, dtype="float32")
        n = B
        while n >= 1:
            try:
                r32 = dec32.search(x_a[:n], reqs_a[:n], dyn, graph=False)
                break
            except Exception as e:  # noqa: BLE001 - an out-of-memory error is a finding, anything else is not
                if not is_oom(torch, e):
                    raise
                c.setdefault("fp32_oom", []).append({"requests": n, **oom_record(torch, e)})
                free_memory(torch, cuda)
                n //= 2
        else:
            c["fp32"] = "out of memory at every batch size down to 1"
            return
        r16 = keep["eager", dyn] if n == B else dec.search(x_a[:n], reqs_a[:n], dyn, graph=False)
        c["fp32"] = {"requests": n, "fits_batch": n == B, **agreement(r16, r32),
                     "top1_score_abs_diff": float(np.abs(as_np(r16.scores)[:, 0] - as_np(r32.scores)[:, 0]).mean())}
        print("correctness", c, flush=True)

    def gtm_share():
        result["gtm"] = matcher_alone(torch, clock, m, reqs_a, dec, x_a, dyn, reps)
        print("gtm", result["gtm"], flush=True)

    def gemms():
        result["gemm_floor"] = {names[s]: gemm_floor(torch, clock, cfg, dtype, device, B, ctx, s, reps)
                                for s in (dyn, fixed)}
        w = cfg
        grace = search_flops(w, 1, ctx, (M,) * L)  # GRACE counts M rows at every step, the first too
        result["flops"] = {"fixed_per_request_gflop": search_flops(w, 1, ctx, fixed)["total"] / 1e9,
                           "fixed_per_request_grace_count_gflop": (grace["rows"] + grace["attention"]) / 1e9,
                           "dynamic_per_batch_tflop": search_flops(w, B, ctx, dyn)["total"] / 1e12,
                           "fixed_per_batch_tflop": search_flops(w, B, ctx, fixed)["total"] / 1e12,
                           "dynamic_gemm_per_batch_tflop": search_flops(w, B, ctx, dyn)["gemm"] / 1e12}
        print("gemm floor", {k: round(v["ms"], 3) for k, v in result["gemm_floor"].items()}, result["flops"],
              flush=True)

    def generate_custom():
        for c in dict.fromkeys((ctx, args.short_context or ctx)):
            x = x_a[:, :c]
            try:
                ms, res = clock.wall(lambda: model.generate(
                    x, custom_generate=gtmkit_beam_search, requests=reqs_a, matcher=m, beam_sizes=dyn, layout=layout,
                    max_new_tokens=L), greps)
                row = {"route": "generate custom_generate", "beams": list(dyn), "schedule": "dynamic", "context": c,
                       "ms": stats(ms), "peak_gib": peak_gib(torch, cuda)}
                if c == ctx and ("eager", dyn) in keep:  # informational: HF's T5 in bf16 against SidDecoder
                    row["top1_equal_vs_eager"] = agreement(res, keep["eager", dyn])["top1_equal"]
            except Exception as e:  # noqa: BLE001 - an out-of-memory error is a finding, anything else is not
                if not is_oom(torch, e):
                    raise
                row = {"route": "generate custom_generate", "beams": list(dyn), "schedule": "dynamic", "context": c,
                       **oom_record(torch, e)}
            rows.append(row)
            print(rows[-1], flush=True)
            free_memory(torch, cuda)
            if "error" not in row:
                break

    def processor():
        kw = dict(num_beams=M, num_return_sequences=M, max_new_tokens=L, length_penalty=0.0, do_sample=False,
                  early_stopping=False)
        for c in dict.fromkeys((ctx, args.short_context or ctx)):
            x = x_a[:, :c]
            proc = GTMLogitsProcessor(m, reqs_a, M, layout, prompt_len=1)  # after the decoder start token
            try:
                ms, _ = clock.wall(lambda: model.generate(x, logits_processor=[proc], **kw), greps)
                row = {"route": "generate + GTMLogitsProcessor", "beams": M, "schedule": "fixed", "context": c,
                       "ms": stats(ms), "peak_gib": peak_gib(torch, cuda)}
            except Exception as e:  # noqa: BLE001 - an out-of-memory error is a finding, anything else is not
                if not is_oom(torch, e):
                    raise
                row = {"route": "generate + GTMLogitsProcessor", "beams": M, "schedule": "fixed", "context": c,
                       **oom_record(torch, e)}
            rows.append(row)
            print(rows[-1], flush=True)
            proc = None  # its masker's buffers go before the retry
            free_memory(torch, cuda)
            if "error" not in row:
                break

    free_memory(torch, cuda)
    section("encoder", encoder)
    section("eager", eager)
    if cuda and "graph" not in skip:
        section("graph", graphed)
    section("correctness", correctness)
    if "gtm" not in skip:
        section("gtm", gtm_share)
    if "gemm" not in skip:
        section("gemm", gemms)
    if "generate" not in skip:
        section("generate", generate_custom)
    if "processor" not in skip:
        section("processor", processor)
    save()
    print(markdown(result))
    print(f"wrote {js} and {md}")


# --- the report ---------------------------------------------------------------------------------------------

def row_of(r, route, schedule=None, ok=True):
    for w in r["rows"]:
        if w["route"] == route and (schedule is None or w.get("schedule") == schedule) and (not ok or "error" not in w):
            return w
    return None


def summary(r) -> dict:
    """The figures the targets read: graph ms after the encoder, floor, speedup, GTM share."""
    s = {}
    for sched in ("dynamic", "fixed"):
        g = row_of(r, "graph", sched)
        if g:
            s[f"graph_{sched}_ms"] = g["after_encoder"]["median"]
            s[f"graph_{sched}_whole_ms"] = g["ms"]["median"]
            if g.get("device"):
                s[f"graph_{sched}_device_ms"] = g["device"]["median"]
        floor = r.get("gemm_floor", {}).get(sched)
        if floor and g:
            s[f"floor_ratio_{sched}"] = g["after_encoder"]["median"] / floor["ms"]
            if g.get("device"):
                s[f"floor_ratio_{sched}_device"] = g["device"]["median"] / floor["ms"]
    a = row_of(r, "generate custom_generate")
    g = row_of(r, "graph", "dynamic")
    if a and g:
        s["speedup_vs_generate"] = a["ms"]["median"] / g["ms"]["median"]  # whole call against whole call
        s["speedup_vs_generate_context"] = a["context"]
    gtm = r.get("gtm")
    if gtm and g:
        s["gtm_share"] = gtm["cd_gtm_postfilter_ms"] / g["after_encoder"]["median"]
        nog = row_of(r, "graph gtm=False")
        if nog and nog.get("device") and g.get("device"):
            s["gtm_share_by_difference"] = (g["device"]["median"] - nog["device"]["median"]) / g["device"]["median"]
    elif gtm:
        e = row_of(r, "eager", "dynamic")
        if e:
            s["gtm_share_eager"] = gtm["cd_gtm_postfilter_ms"] / e["ms"]["median"]
    fl = r.get("flops")
    if fl and g:
        s["graph_dynamic_tflops"] = fl["dynamic_per_batch_tflop"] / (g["after_encoder"]["median"] * 1e-3)
    return s


def targets(r) -> list:
    """Each target beside its measured value (met / not met); not asserted."""
    s = summary(r)
    t = TARGETS

    def v(ok):
        return "**met**" if ok else "**not met**"

    def line(text, key, fmt, ok):
        if key not in s:
            return f"- {text}: n/a"
        return f"- {text}: {fmt.format(s[key])}: {v(ok(s[key]))}"

    a = row_of(r, "generate custom_generate")
    ctx_note = "" if not a or a["context"] == r["context"] else \
        f" ((a) ran out of memory at {r['context']} context tokens; against its {a['context']}-token retry, " \
        "a lower bound)"
    out = [line(f"graph <= {t['graph_dynamic_ms']:g} ms at {tuple(r['beams_dynamic'])} (after the encoder)",
                "graph_dynamic_ms", "{:.2f} ms", lambda x: x <= t["graph_dynamic_ms"]),
           line(f"graph <= {t['graph_fixed_ms']:g} ms at fixed {tuple(r['beams_fixed'])} (after the encoder)",
                "graph_fixed_ms", "{:.2f} ms", lambda x: x <= t["graph_fixed_ms"]),
           line(f"graph within {t['floor_ratio']:g}x of the GEMM floor at {tuple(r['beams_dynamic'])}",
                "floor_ratio_dynamic", "{:.2f}x", lambda x: x <= t["floor_ratio"]),
           line(f"graph within {t['floor_ratio']:g}x of the GEMM floor at fixed {tuple(r['beams_fixed'])}",
                "floor_ratio_fixed", "{:.2f}x", lambda x: x <= t["floor_ratio"]),
           line(f">= {t['speedup_vs_generate']:g}x faster than (a) generate(custom_generate), whole call" + ctx_note,
                "speedup_vs_generate", "{:.1f}x", lambda x: x >= t["speedup_vs_generate"]),
           line(f"GTM share < {t['gtm_share']:.0%} (CD+GTM steps and post-filter alone, over the graph after the "
                "encoder)", "gtm_share", "{:.2%}", lambda x: x < t["gtm_share"])]
    if r.get("small"):
        out.append("- (a --small run: the targets are for the GRACE shape on a GPU)")
    return out


def markdown(r) -> str:
    def f(x, fmt="{:.2f}"):
        return "n/a" if x is None else fmt.format(x)

    def mp(st):
        return "n/a" if not st else f"{st['median']:.2f} / {st['p90']:.2f}"

    ix, mo = r["index"], r["model"]
    title = "SidDecoder" + (" (--small)" if r.get("small") else "")
    lines = [f"# {title} ({r['gpu'] or r['device']}, {r['date']})", "",
             f"Command: `{r['command']}`. torch {r['torch']}, transformers {r['transformers']}.", "",
             f"Index: {ix['sids']:,} SIDs, {ix['ads']:,} ads, V={ix['vocab']}, L={ix['sid_length']} "
             f"({'GRACE shape: V=512, L=4' if ix['grace_shape'] else 'not the GRACE shape (V=512, L=4)'}). "
             f"B={r['requests']} requests, {r['context']} context tokens. Model: T5, random weights from a config: "
             f"d_model {mo['d_model']}, {mo['num_heads']} heads x {mo['d_kv']}, d_ff {mo['d_ff']} {mo['ffn']}, "
             f"{mo['layers']} layers, vocabulary {mo['vocab']} (3 specials + V), {mo['params_m']}M parameters, "
             f"{mo['dtype']} weights. Schedules: dynamic {tuple(r['beams_dynamic'])}, fixed "
             f"{tuple(r['beams_fixed'])}.", "",
             "Times: ms a batch, median / p90 over the timed calls (wall, device synchronised) unless device; "
             "\"after the encoder\" is the graphed search's own wall time (Result.seconds[-1]: new inputs copied in, "
             "the replay waited for, the result copied), for eager rows the whole call less the encoder's median.", "",
             "| route | beams | context | whole call ms | after the encoder ms | device ms | capture ms | "
             "peak GPU GiB | note |", "|" + "---|" * 9]
    enc = r.get("encoder")
    if enc:
        lines.append(f"| encoder alone | | {r['context']} | {mp(enc)} | | | | | |")
    for w in r["rows"]:
        beams = tuple(w["beams"]) if isinstance(w["beams"], list) else f"{w['beams']} (num_beams)"
        if "error" in w:
            detail = f"{w['error']}: asked {w.get('asked')}"
            if "allocated_gib" in w:
                detail += (f", torch held {w['allocated_gib']} GiB (peak {w['peak_allocated_gib']}), "
                           f"{w['free_gib']} of {w['total_gib']} GiB free")
            lines.append(f"| {w['route']} | {beams} | {w.get('context', r['context'])} | {detail} | | | | | |")
            continue
        after = mp(w["after_encoder"]) if "after_encoder" in w else f(w.get("after_encoder_ms"))
        note = []
        if "eligible_share" in w:
            note.append(f"returned SIDs holding an eligible ad {w['eligible_share']:.1%}")
        if "top1_equal_vs_eager" in w:
            note.append(f"best SID equal to (c)'s for {w['top1_equal_vs_eager']:.0%} of requests")
        lines.append(f"| {w['route']} | {beams} | {w.get('context', r['context'])} | {mp(w.get('ms'))} | {after} | "
                     f"{mp(w.get('device'))} | {f(w.get('capture_ms'), '{:.0f}')} | {f(w.get('peak_gib'))} | "
                     f"{'; '.join(note)} |")
    gf = r.get("gemm_floor")
    if gf:
        how = "one CUDA graph a part, device time" if r["device"].startswith("cuda") else "a loop a part, wall"
        lines += ["", f"GEMM floor (e): the decoder's weight GEMMs alone, F.linear on preallocated inputs ({how}, "
                  "median):", "",
                  "| schedule | part | rows | GEMMs | GFLOP | ms | TFLOP/s |", "|" + "---|" * 7]
        for sched, fl in gf.items():
            for p in fl["parts"]:
                lines.append(f"| {sched} | {p['part']} | {p['rows']:,} | {p['gemms']} | {p['gflop']:.4g} | "
                             f"{p['ms']:.3f} | {p['tflops']:.4g} |")
            lines.append(f"| {sched} | **all** | | | {fl['gflop']:.4g} | **{fl['ms']:.3f}** | {fl['tflops']:.4g} |")
    fl = r.get("flops")
    if fl:
        lines += ["", f"Search FLOPs (weight GEMMs + attention): fixed {tuple(r['beams_fixed'])}: "
                  f"{fl['fixed_per_request_gflop']:.4g} GFLOP a request as run (one start row), "
                  f"{fl['fixed_per_request_grace_count_gflop']:.4g} GFLOP counting {r['beams_fixed'][-1]} rows at "
                  f"every step as GRACE does (GRACE: {GRACE_GFLOP_PER_REQUEST} GFLOP at 1024 beams); dynamic "
                  f"{tuple(r['beams_dynamic'])}: {fl['dynamic_per_batch_tflop']:.4g} TFLOP a batch of "
                  f"{r['requests']} ({fl['dynamic_gemm_per_batch_tflop']:.4g} in the weight GEMMs; GRACE: ~5.3)."]
    g = r.get("gtm")
    if g:
        where = "as a CUDA graph, device time" if r["device"].startswith("cuda") else "eager, wall"
        lines += ["", f"GTM alone ({where}, on the log-probs the decoder produced at {tuple(r['beams_dynamic'])}): "
                  f"CD+GTM steps and post-filter {g['cd_gtm_postfilter_ms']:.3f} ms, CD+GTM steps "
                  f"{g['cd_gtm_ms']:.3f} ms, CD-only steps {g['cd_ms']:.3f} ms. The random model's step-1 log-probs: "
                  f"std {g['step1_logprob_std']:.3f} nats a row, best minus median {g['step1_top_minus_median']:.3f}."]
    c = r.get("correctness")
    if c:
        lines += ["", "Correctness:"]
        for sched in ("dynamic", "fixed"):
            e = c.get("graph_vs_eager_" + sched)
            if e:
                lines.append(f"- graph vs eager at {sched}: SID rows equal {e['sid_rows_equal']:.2%}, scores "
                             f"bit-equal {e['scores_equal']:.2%}, requests with equal ads "
                             f"{f(e.get('ads_equal_requests'), '{:.0%}')}")
        p = c.get("fp32")
        if isinstance(p, dict):
            lines.append(f"- bf16 vs float32 decoder (eager, the same bf16 encoder states, {p['requests']} requests"
                         f"{'' if p['fits_batch'] else ': the float32 run did not fit the whole batch'}): best SID "
                         f"equal {p['top1_equal']:.0%} of requests, top-10 overlap {p['top10_overlap']:.1%}, "
                         f"final beam overlap {p['beam_overlap']:.1%}, best score |diff| "
                         f"{p['top1_score_abs_diff']:.4f}")
        elif p:
            lines.append(f"- bf16 vs float32: {p}")
        for o in c.get("fp32_oom", []):
            lines.append(f"- float32 at {o['requests']} requests: out of memory (asked {o['asked']})")
    s = summary(r)
    if s:
        lines += ["", "Summary: " + ", ".join(f"{k} {v:.3g}" for k, v in s.items())]
    if r.get("errors"):
        lines += ["", "Errors (the rest of the run went on):"] + [f"- {k}: {v}" for k, v in r["errors"].items()]
    lines += ["", "Targets:"] + r.get("targets", targets(r))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
