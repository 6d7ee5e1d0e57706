"""generate() with gtmkit on the GPU: a GRACE-shape decoder over a large GTM index, side by side in one run.

Model: a Llama-architecture decoder with random weights (3 layers, 16 heads x 128, bf16), vocabulary = 3
specials + V SID tokens (one shared range), a prompt of --context tokens a request. Rows:
  custom_generate  model.generate(custom_generate=gtmkit_beam_search, beam_sizes=--beams): per-step beam sizes;
  processor        model.generate(num_beams=M, logits_processor=[GTMLogitsProcessor]) at each --num-beams M;
  none             model.generate(num_beams=M) without a constraint (the model's own cost);
  prefix_fn        model.generate(num_beams=M, prefix_allowed_tokens_fn=...) over a GENRE-style nested-dict trie
                   of every SID (transformers' own route; its Python callback runs once a row a step).
Times are ms a batch of --requests requests (CUDA synchronised, after a warm-up); gtmkit's share is the GPU time
between CUDA events around its calls (matcher.step / post-filter, or the processor) over the generate() time.
Writes benchmarks/results/generate_gpu_<host>.{json,md}."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import HOST_HELP, gpu_name, result_paths  # noqa: E402

SPECIALS = 3


class Timed:
    """Wraps a callable: GPU time between CUDA events around each call, summed (ms); wall time on the CPU."""

    def __init__(self, fn, torch):
        self.fn, self.torch, self.events = fn, torch, []
        self.gpu = torch.cuda.is_available()

    def __call__(self, *a, **kw):
        t = self.torch
        if not self.gpu:
            t0 = time.perf_counter()
            out = self.fn(*a, **kw)
            self.events.append(1e3 * (time.perf_counter() - t0))
            return out
        s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        s.record()
        out = self.fn(*a, **kw)
        e.record()
        self.events.append((s, e))
        return out

    def each(self) -> list:
        """ms of every call since the last reading."""
        if self.gpu:
            self.torch.cuda.synchronize()
        out = [x if not self.gpu else x[0].elapsed_time(x[1]) for x in self.events]
        self.events = []
        return out

    def ms(self):
        return sum(self.each())


def genre_trie(index):
    """GENRE's constrained-decoding trie: nested dicts token -> subtree, one level a SID position."""
    root = {}
    no, ct = np.asarray(index.node_offsets), np.asarray(index.child_tokens)
    dicts = {0: root}
    for node in range(index.first_leaf):
        d = dicts.pop(node)
        for j in range(int(no[node]), int(no[node + 1])):
            d[int(ct[j])] = child = {}
            if j + 1 < index.first_leaf:
                dicts[j + 1] = child
    return root


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--beams", default="1,512,1024,1024")
    ap.add_argument("--num-beams", default="64,1024", help="fixed beam widths of the generate() rows")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--short-context", type=int, default=16,
                    help="context of a fixed-beam row's retry when generate() runs out of memory at --context")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prefix-fn-max-beams", type=int, default=1024, help="the prefix_allowed_tokens_fn row up to this width")
    ap.add_argument("--hidden", type=int, default=2048, help="model width (16 heads; 128 a head at the default)")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to try the script on a small index")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)
    args = ap.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import gtmkit
    from gtmkit.integrations.transformers import GTMLogitsProcessor, SidTokenLayout, gtmkit_beam_search
    from gtmkit.synth import synth_users

    index = gtmkit.load_index(args.index, verify=False)
    V, L, B = index.vocab_size, index.sid_length, args.requests
    m = gtmkit.Matcher(index, device=args.device)
    reqs = [index.encode_request(u) for u in synth_users(index.manifest["schema"], B, seed=1)]
    layout = SidTokenLayout(SPECIALS, SPECIALS + V)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=SPECIALS + V, hidden_size=args.hidden, intermediate_size=args.hidden * 11 // 4,
                      num_hidden_layers=3, num_attention_heads=16, num_key_value_heads=16, head_dim=args.hidden // 16,
                      max_position_embeddings=args.context + L + 8, bos_token_id=0, eos_token_id=1, pad_token_id=0)
    model = LlamaForCausalLM(cfg).to(args.device, torch.bfloat16 if args.device == "cuda" else torch.float32).eval()
    x = torch.randint(SPECIALS, SPECIALS + V, (B, args.context), device=args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    sizes = tuple(int(s) for s in args.beams.split(","))

    def timed(run):
        run()  # warm-up: compiles, allocates
        sync()
        best = None
        for _ in range(args.reps):
            t0 = time.perf_counter()
            out = run()
            sync()
            ms = 1e3 * (time.perf_counter() - t0)
            best = ms if best is None else min(best, ms)
        return best, out

    rows = []
    result = {"benchmark": "generate_gpu", "date": datetime.date.today().isoformat(), "gpu": gpu_name(),
              "command": "python " + " ".join(sys.argv), "torch": torch.__version__,
              "transformers": __import__("transformers").__version__,
              "index": {"sids": index.num_sids, "ads": index.num_ads}, "requests": B, "context": args.context,
              "model": f"Llama, 3 layers, 16 heads x {args.hidden // 16}, {'bf16' if args.device == 'cuda' else 'fp32'}, "
                       "vocabulary 3 + V", "rows": rows}
    js, md = result_paths(args.out, "generate_gpu", args.host, result["gpu"] or "")

    def save():
        js.write_text(json.dumps(result, indent=1))
        md.write_text(markdown(result))

    # per-step beam sizes through custom_generate, gtmkit's calls timed by CUDA events
    step, post = Timed(m.step, torch), Timed(m.postfilter, torch)
    m.step, m.postfilter = step, post
    ms, res = timed(lambda: model.generate(x, custom_generate=gtmkit_beam_search, requests=reqs, matcher=m,
                                           beam_sizes=sizes, layout=layout, max_new_tokens=L))
    step.ms(), post.ms()
    model.generate(x, custom_generate=gtmkit_beam_search, requests=reqs, matcher=m, beam_sizes=sizes, layout=layout,
                   max_new_tokens=L)
    ours = step.ms() + post.ms()
    del m.step, m.postfilter  # the instance attributes go: the class's methods again
    rows.append({"route": "custom_generate", "beams": list(sizes), "context": args.context, "ms": ms, "gtmkit_ms": ours,
                 "gtmkit_share": ours / ms, "eligible_ads_per_request": float(np.mean([len(a) for a, _ in res.ads]))})
    print(rows[-1], flush=True)
    save()

    trie_box = []  # the GENRE-style trie, built at its first use
    for M in (int(s) for s in args.num_beams.split(",")):
        for ctx in dict.fromkeys((args.context, args.short_context)):  # generate() expands the context to every row
            try:
                rows.append(fixed_beams(args, model, x[:, :ctx], m, reqs, layout, index, M, L, B, timed, torch,
                                        trie_box, sync))
                rows[-1]["context"] = ctx
            except torch.cuda.OutOfMemoryError as e:
                rows.append({"route": "processor", "num_beams": M, "rows": B * M, "context": ctx,
                             "error": f"generate() out of GPU memory ({str(e)[:90]})"})
            torch.cuda.empty_cache()
            print(rows[-1], flush=True)
            save()
            if "error" not in rows[-1]:
                break
    print(markdown(result))


def fixed_beams(args, model, x, m, reqs, layout, index, M, L, B, timed, torch, trie_box, sync):
    """generate(num_beams=M): no constraint, GTMLogitsProcessor, and prefix_allowed_tokens_fn up to its width."""
    from gtmkit.integrations.transformers import GTMLogitsProcessor
    kw = dict(num_beams=M, num_return_sequences=M, max_new_tokens=L, length_penalty=0.0, do_sample=False,
              early_stopping=False)
    none_ms, _ = timed(lambda: model.generate(x, **kw))
    proc = GTMLogitsProcessor(m, reqs, M, layout, prompt_len=x.shape[1])
    tp = Timed(proc.__call__, torch)
    proc_ms, _ = timed(lambda: model.generate(x, logits_processor=[tp], **kw))
    tp.ms()
    model.generate(x, logits_processor=[tp], **kw)
    calls = tp.each()
    proc_gpu = sum(calls)
    row = {"route": "processor", "num_beams": M, "rows": B * M, "ms": proc_ms, "none_ms": none_ms,
           "gtmkit_ms": proc_gpu, "gtmkit_share": proc_gpu / proc_ms, "per_step_us": 1e3 * proc_gpu / L,
           "us_by_step": [round(1e3 * c, 1) for c in calls]}
    if M <= args.prefix_fn_max_beams:
        if not trie_box:
            trie_box.append(genre_trie(index))
        trie = trie_box[0]

        def allowed(batch_id, sent):
            d = trie
            for t in sent[x.shape[1]:].tolist():
                d = d.get(t - SPECIALS, {})
            return [SPECIALS + t for t in d] or [0]

        t0 = time.perf_counter()
        model.generate(x, prefix_allowed_tokens_fn=allowed, **kw)
        sync()
        row["prefix_fn_ms"] = 1e3 * (time.perf_counter() - t0)
        row["prefix_fn_constraint_ms"] = row["prefix_fn_ms"] - none_ms
        row["speedup_vs_prefix_fn"] = row["prefix_fn_constraint_ms"] / max(proc_gpu, 1e-9)
        row["speedup_vs_prefix_fn_whole"] = row["prefix_fn_ms"] / proc_ms
    return row


def markdown(r):
    lines = [f"# generate() with gtmkit ({r['gpu']}, {r['date']})", "",
             f"Command: `{r['command']}`. torch {r['torch']}, transformers {r['transformers']}. Index: "
             f"{r['index']['sids']:,} SIDs, {r['index']['ads']:,} ads. B={r['requests']} requests, "
             f"{r['context']} context tokens. Model: {r['model']}.", "",
             "| route | beams | rows | context | generate() ms | no constraint ms | gtmkit GPU ms | gtmkit share | "
             "gtmkit us / step (by step) | prefix_allowed_tokens_fn ms | its constraint ms | gtmkit x faster (constraint) | "
             "x faster (whole) |", "|" + "---|" * 13]
    for w in r["rows"]:
        def g(k, f="{:.2f}"):
            return f.format(w[k]) if k in w else "n/a"
        beams = w.get("beams") or w.get("num_beams")
        if "error" in w:
            lines.append(f"| {w['route']} | {beams} | {g('rows', '{:,}')} | {g('context', '{}')} | {w['error']} |"
                         + " |" * 8)
            continue
        lines.append(f"| {w['route']} | {beams} | {g('rows', '{:,}')} | {g('context', '{}')} | {g('ms')} | {g('none_ms')} | {g('gtmkit_ms')} | "
                     f"{g('gtmkit_share', '{:.1%}')} | {g('per_step_us', '{:.0f}')}{' (' + ', '.join(f'{u:.0f}' for u in w['us_by_step']) + ')' if 'us_by_step' in w else ''} | {g('prefix_fn_ms')} | "
                     f"{g('prefix_fn_constraint_ms')} | {g('speedup_vs_prefix_fn', '{:.0f}x')} | "
                     f"{g('speedup_vs_prefix_fn_whole', '{:.1f}x')} |")
    lines += ["", "Targets: gtmkit adds <= 3% to generate()'s time (gtmkit share); >= 50x faster than the "
              "prefix_allowed_tokens_fn route at the same beams; processor <= 100 us a step at 16,384 rows."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
