"""Succinct trie at scale: sharded build of 10M-800M keys, then GPU vs CPU constrained beam search per trie size.

Build time, memory and bytes of each trie, then the constrained beam search's latency and throughput on it, the
GPU against the multi-threaded CPU search (FlashTrie's scaling table).

Two phases, so that each fits one command of at most 600 s; what they make stays in --workdir between them:

    python benchmarks/trie_scale.py --phase build --workdir /tmp/scale
    python benchmarks/trie_scale.py --phase search --workdir /tmp/scale

(--phase all runs both; a CPU-only smoke run: --phase all --keys 20000,50000 --workers 2 --queries 5
--cpu-queries 3 --workdir /tmp/scale-smoke --out /tmp/scale-smoke-out.)

build: for each --keys size not already in --workdir, `gtmkit synth keys -n N --seed 1 --parts P --workers W`
    (P = W x about N/5M) and `gtmkit trie build KEYS -o TRIE --workers W --json`, each a fresh CLI process run
    under build_sharded.py's sampler (wall seconds, every process's peak RSS summed); trie bytes and nodes from
    the CLI's JSON. A size is skipped, with the reason recorded, when the free disk clearly cannot hold its keys
    and its build's staging (~15 + ~36 bytes a key). The keys are deleted once their trie is built (--keep-keys).
search: for each built size, the trie loaded into RAM (SuccinctTrie.load, mmap=False), NAR proposals
    synth_proposals(trie, n, T=8, K=BW) (FlashTrie, App. K), BW=K=1000, b=1: every query timed alone
    (perf_counter around `trie_beam_search`, results copied to the host), after untimed warm-up calls: the GPU
    over --queries queries, then its throughput at b=8 (q/s = 8 / median batch time over --batches batches),
    then the CPU search with --cpu-threads numba threads over the first --cpu-queries queries, whose GPU
    results must equal the CPU's (key ids; scores within 1e-5). The GPU is skipped, with the reason, where
    CUDA is not available.

The state of both phases is --workdir/state.json; after every size the result files are written again from
it: <out>/trie_scale_<host>.json and .md (host: the GPU's model, e.g. h200, else cpuN; --host). --budget-s
bounds a command: a CLI still running at the budget is stopped (`timeout`) and later steps are skipped, so
a phase ends, with its partial results written, before an outer limit kills it."""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import HOST_HELP, gpu_name, host_kind, machine, result_paths, settle_workers  # noqa: E402
from build_sharded import run_sampled  # noqa: E402
from trie import log, make_searchers, same_results, stats_ms  # noqa: E402

KEYS_PER_PART = 5_000_000
DISK_KEYS_B, DISK_BUILD_B = 15, 36  # bytes a key on disk: the synth Parquet; a build's peak (staging + trie)
TARGET_KEYS = 800_000_000
GTMKIT = [sys.executable, "-m", "gtmkit"]


class Budget:
    def __init__(self, seconds: float):
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


# ------------------------------------------------------------------------------------------------
# build


def sampled_cli(args: list, budget: Budget) -> dict:
    """run_sampled of the gtmkit CLI under `timeout` (the rest of the budget; its process group stopped)."""
    return run_sampled(["timeout", "-k", "5", f"{max(budget.left(), 1):.0f}"] + GTMKIT + args)


def build_size(n: int, work: Path, workers: int, keep_keys: bool, budget: Budget) -> dict:
    keys, trie = work / f"keys_{n}", work / f"trie_{n}"
    parts = workers * max(1, round(n / (workers * KEYS_PER_PART)))
    rec = {"target_keys": n, "workers": workers, "parts": parts, "synth": None, "build": None}
    need = (0 if keys.exists() else n * DISK_KEYS_B) + n * DISK_BUILD_B
    free = shutil.disk_usage(work).free
    rec["disk"] = {"free_gb": round(free / 1e9, 1), "need_gb": round(need / 1e9, 1)}
    if free < 1.1 * need:
        return dict(rec, status=f"skipped: disk ({need / 1e9:.1f} GB needed, {free / 1e9:.1f} GB free)")
    step, tmp = "synth", None
    try:
        if not keys.exists():
            tmp = keys.with_name(keys.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            r = sampled_cli(["synth", "keys", "-n", str(n), "--seed", "1", "--parts", str(parts), "--workers",
                             str(workers), "-o", str(tmp), "-s"], budget)
            r.pop("stdout")
            tmp.rename(keys)
            rec["synth"] = r
            log(f"synth {n:,} keys ({parts} parts): {r['wall_s']:.0f} s, summed peak {r['summed_peak_gib']} GiB")
        step = "build"
        tmp = trie.with_name(trie.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        r = sampled_cli(["trie", "build", str(keys), "-o", str(tmp), "--workers", str(workers), "-s", "--json"],
                        budget)
        s = json.loads(r.pop("stdout"))
        tmp.rename(trie)
    except SystemExit as exc:  # run_sampled: the CLI failed or `timeout` stopped it
        why = "budget" if budget.left() < 2 else str(exc).strip().splitlines()[-1][:300]
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return dict(rec, status=f"stopped in {step}: {why}")
    if not keep_keys:
        shutil.rmtree(keys)
    rec.update(status="ok", keys=s["keys"], nodes=s["nodes"], trie_bytes=s["bytes"],
               bytes_per_key=s["bytes_per_key"], build=dict(r, cli_build_s=s["build_seconds"]))
    log(f"build {n:,} keys: {r['wall_s']:.0f} s, summed peak {r['summed_peak_gib']} GiB, "
        f"{s['bytes'] / 1e6:,.0f} MB ({s['bytes_per_key']:.2f} B/key), {s['nodes']:,} nodes")
    return rec


def phase_build(args, state, save, budget):
    work = Path(args.workdir)
    for n in args.sizes:
        if (work / f"trie_{n}").exists() and state["build"].get(str(n), {}).get("status") == "ok":
            log(f"build {n:,}: in {work} already")
            continue
        if (work / f"trie_{n}").exists():  # built by an earlier run whose record is gone
            from gtmkit import SuccinctTrie
            t = SuccinctTrie.load(work / f"trie_{n}", verify=False)
            rec = {"target_keys": n, "status": "ok (found in the workdir, not timed)", "keys": t.num_keys,
                   "nodes": t.num_nodes, "trie_bytes": t.nbytes, "bytes_per_key": t.nbytes / t.num_keys}
        elif budget.left() < 10:
            rec = {"target_keys": n, "status": "skipped: budget"}
        else:
            rec = build_size(n, work, args.workers, args.keep_keys, budget)
            prev = state["build"].get(str(n), {})
            if rec["synth"] is None and prev.get("synth"):  # keys an earlier, stopped run made
                rec["synth"] = prev["synth"]
        state["build"][str(n)] = rec
        save()


# ------------------------------------------------------------------------------------------------
# search


def timed(fn, tok, lp, bw, n, budget) -> tuple:
    """Query by query (b=1): (seconds each, results), stopping early at the budget."""
    times, res = [], []
    for i in range(n):
        if budget.left() < 5:
            break
        a = time.perf_counter()
        res.append(fn(tok[i:i + 1], lp[i:i + 1], bw))
        times.append(time.perf_counter() - a)
    return times, res


def search_size(trie, args, budget) -> dict:
    from gtmkit.synth.proposals import synth_proposals

    bw, T = args.bw, args.T
    rec = {"keys": trie.num_keys, "nodes": trie.num_nodes, "trie_bytes": trie.nbytes, "bw": bw, "k": bw, "T": T}
    t = time.perf_counter()
    tok, lp = synth_proposals(trie, max(args.queries, args.cpu_queries, args.batch), T, bw, seed=args.seed)
    rec["proposals_s"] = round(time.perf_counter() - t, 2)
    fns, skipped = make_searchers(trie, ["cpu", "cuda"])
    for dev, fn in fns.items():  # warm-up at the measured shape (a first GPU call uploads the trie)
        t = time.perf_counter()
        for _ in range(3):
            fn(tok[:1], lp[:1], bw)
        rec[f"{dev}_warmup_s"] = round(time.perf_counter() - t, 3)
    gpu_res = []
    if "cuda" in fns:
        fn = fns["cuda"]
        settle_workers()
        times, gpu_res = timed(fn, tok, lp, bw, args.queries, budget)
        rec["gpu"] = dict(stats_ms(times), queries=len(times)) if times else {"skipped": "budget"}
        b, bt = args.batch, []
        for i in range(args.batches):
            if budget.left() < 5:
                break
            s = (i * b) % (len(tok) - b + 1)
            a = time.perf_counter()
            fn(tok[s:s + b], lp[s:s + b], bw)
            bt.append(time.perf_counter() - a)
        if bt:
            rec["gpu"]["throughput"] = {"b": b, "batches": len(bt), "batch_ms_median": 1e3 * float(np.median(bt)),
                                        "qps": b / float(np.median(bt))}
    else:
        rec["gpu"] = {"skipped": skipped.get("cuda", "not run")}
    settle_workers()
    times, cpu_res = timed(fns["cpu"], tok, lp, bw, max(args.cpu_queries, 1), budget)
    if not times:
        return dict(rec, status="stopped: budget")
    rec["cpu"] = dict(stats_ms(times), queries=len(times), threads=args.cpu_threads_used)
    rec["finished_keys_mean"] = float(np.mean([int((r[0] >= 0).sum()) for r in cpu_res]))
    if gpu_res and "mean_ms" in rec["gpu"]:
        n = min(len(cpu_res), len(gpu_res))
        try:
            for i in range(n):
                same_results(cpu_res[i], gpu_res[i], f"query {i}")
            rec["equal"] = {"queries": n, "ok": True}
        except SystemExit as exc:
            rec["equal"] = {"queries": n, "ok": False, "detail": str(exc)}
        rec["speedup"] = rec["cpu"]["mean_ms"] / rec["gpu"]["mean_ms"]
    return rec


def phase_search(args, state, save, budget):
    import numba

    from gtmkit import SuccinctTrie

    args.cpu_threads_used = min(args.cpu_threads, numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(args.cpu_threads_used)
    work = Path(args.workdir)
    for n in args.sizes:
        path = work / f"trie_{n}"
        if not path.exists():
            state["search"][str(n)] = {"status": "skipped: not built"}
        elif budget.left() < 20:
            state["search"][str(n)] = {"status": "skipped: budget"}
        else:
            t = time.perf_counter()
            trie = SuccinctTrie.load(path, verify=False, mmap=False)
            load_s = round(time.perf_counter() - t, 2)
            log(f"search {n:,}: {trie} loaded in {load_s} s")
            rec = dict(search_size(trie, args, budget), load_s=load_s)
            rec.setdefault("status", "ok")
            state["search"][str(n)] = rec
            g, c = rec["gpu"], rec.get("cpu", {"threads": 0, "mean_ms": float("nan")})
            log(f"search {n:,}: cpu ({c['threads']} threads) mean {c['mean_ms']:.3f} ms; gpu " +
                (f"mean {g['mean_ms']:.3f} p99 {g['p99_ms']:.3f} ms, {g.get('throughput', {}).get('qps', 0):,.0f} "
                 f"q/s at b={args.batch}, equal {rec.get('equal')}" if "mean_ms" in g else g["skipped"]))
            del trie
            gc.collect()
            try:  # the GPU copy of this trie goes with it
                import cupy
                cupy.get_default_memory_pool().free_all_blocks()
            except Exception:
                pass
        save()


# ------------------------------------------------------------------------------------------------
# targets and results


def targets(state) -> dict:
    word = lambda ok: "PASS" if ok else "FAIL"  # noqa: E731
    t = {}
    b = state["build"].get(str(TARGET_KEYS), {})
    if b.get("build"):
        s = b["build"]["wall_s"]
        synth = f" (+ {b['synth']['wall_s']:.0f} s synth)" if b.get("synth") else ""
        t["build_800m_le_300s"] = (word(s <= 300), f"{s:.0f} s with {b['workers']} workers{synth}")
    else:
        t["build_800m_le_300s"] = ("NOT RUN", b.get("status", "800M not in --keys"))
    done = [r for r in state["search"].values() if r.get("status") == "ok"]
    top = max(done, key=lambda r: r["keys"], default=None)
    names = ("gpu_mean_latency_le_1ms", "gpu_ge_16x_cpu", "gpu_b8_ge_3000qps")
    if top is None or "mean_ms" not in top["gpu"]:
        why = "no search" if top is None else top["gpu"]["skipped"]
        return dict(t, **{k: ("NOT RUN", why) for k in names})
    g, at = top["gpu"], f"at {top['keys']:,} keys"
    t[names[0]] = (word(g["mean_ms"] <= 1.0), f"{g['mean_ms']:.3f} ms {at}")
    t[names[1]] = (word(top["speedup"] >= 16), f"{top['speedup']:.1f}x over {top['cpu']['threads']} threads {at}")
    q = g.get("throughput", {}).get("qps")
    t[names[2]] = (word(q >= 3000), f"{q:,.0f} q/s {at}") if q else ("NOT RUN", "no batches")
    if not top.get("equal", {}).get("ok"):
        t["gpu_equals_cpu"] = ("FAIL", top.get("equal", {}).get("detail", "not checked"))
    return t


TARGET_NAMES = {"build_800m_le_300s": "800M-key build (`gtmkit trie build --workers`) <= 300 s",
                "gpu_mean_latency_le_1ms": "GPU mean latency, BW=K=1000, T=8, b=1, largest trie <= 1.0 ms",
                "gpu_ge_16x_cpu": "GPU >= 16x the multi-threaded CPU search (mean latency, largest trie)",
                "gpu_b8_ge_3000qps": "GPU throughput at b=8 >= 3,000 q/s (largest trie)",
                "gpu_equals_cpu": "GPU results equal the CPU's"}


def markdown(r: dict) -> str:
    m = r["machine"]
    f = lambda x, k, fmt: format(x[k], fmt) if x.get(k) is not None else "-"  # noqa: E731
    lines = ["# Succinct trie at scale: sharded build and constrained beam search", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}; "
             f"GPU: {r['gpu'] or 'none'}.  "]
    lines += [f"Phase {p} ({x['date']}, {x['wall_s']:.0f} s): `{x['command']}`  " for p, x in r["runs"].items()]
    lines += ["", "## Build (`gtmkit synth keys --parts P --workers W`, then `gtmkit trie build --workers W`)", "",
              "| keys | nodes | W | P | synth s | synth summed peak GiB | build s | build summed peak GiB "
              "| largest process GiB | trie MB | bytes / key | status |", "|" + "---|" * 12]
    for n, x in sorted(r["build"].items(), key=lambda kv: int(kv[0])):
        sy, bu = x.get("synth") or {}, x.get("build") or {}
        lines.append(f"| {x.get('keys', int(n)):,} | {f(x, 'nodes', ',')} | {f(x, 'workers', 'd')} | "
                     f"{f(x, 'parts', 'd')} | {f(sy, 'wall_s', '.0f')} | {f(sy, 'summed_peak_gib', '.2f')} | "
                     f"{f(bu, 'wall_s', '.0f')} | {f(bu, 'summed_peak_gib', '.2f')} | "
                     f"{f(bu, 'largest_peak_gib', '.2f')} | "
                     f"{format(x['trie_bytes'] / 1e6, ',.1f') if x.get('trie_bytes') else '-'} | "
                     f"{f(x, 'bytes_per_key', '.2f')} | {x['status']} |")
    s0 = next((x for x in r["search"].values() if x.get("status") == "ok"), {})
    if r["search"]:
        lines += ["", f"## Search latency vs trie size (BW=K={s0.get('bw', '?')}, T={s0.get('T', '?')}, b=1, ms "
                  "per query; GPU throughput at b=8)", "",
                  "| keys | trie MB | load s | keys found/query | GPU mean | GPU p50 | GPU p99 | GPU queries "
                  "| CPU mean | CPU p50 | CPU p99 | CPU queries (threads) | GPU speed-up | GPU q/s b=8 | GPU = CPU "
                  "| status |", "|" + "---|" * 16]
    for n, x in sorted(r["search"].items(), key=lambda kv: int(kv[0])):
        if x.get("status") != "ok":
            lines.append(f"| {int(n):,} |" + " - |" * 14 + f" {x['status']} |")
            continue
        g, c, eq = x["gpu"], x["cpu"], x.get("equal")
        gpu = (f"{g['mean_ms']:.3f} | {g['p50_ms']:.3f} | {g['p99_ms']:.3f} | {g['queries']}" if "mean_ms" in g
               else f"skipped: {g['skipped']} | - | - | -")
        tp = g.get("throughput")
        lines.append(f"| {x['keys']:,} | {x['trie_bytes'] / 1e6:,.1f} | {x['load_s']:.1f} | "
                     f"{x['finished_keys_mean']:.0f} | {gpu} | {c['mean_ms']:.3f} | {c['p50_ms']:.3f} | "
                     f"{c['p99_ms']:.3f} | {c['queries']} ({c['threads']}) | "
                     f"{format(x['speedup'], '.1f') + 'x' if 'speedup' in x else '-'} | "
                     f"{format(tp['qps'], ',.0f') if tp else '-'} | "
                     f"{('yes' if eq['ok'] else 'NO') + ' (' + str(eq['queries']) + ')' if eq else '-'} | ok |")
    lines += ["", "## Targets", ""]
    lines += [f"- {TARGET_NAMES.get(k, k)}: **{v[0]}** ({v[1]})" for k, v in r["targets"].items()]
    lines += ["", "Reference (FlashTrie): 800M keywords built in 13.4 min; 1.91 ms per query on an A100 at 800M "
              "keys.", "",
              "Notes. Keys: `gtmkit synth keys --seed 1` (keyword-like, lengths 2-8, Zipf(1) tokens over 2.2M ids) "
              "in P parts drawn by W processes; build: the sharded CLI build on a local Dask cluster of W workers. "
              "Both timed as whole CLI processes (start-up included); summed peak: every process's peak RSS (the "
              "CLI, Dask scheduler and workers), added. Search: `trie_beam_search` on the trie loaded into RAM, "
              "proposals `synth_proposals` (FlashTrie, App. K); every query timed alone with its results copied "
              "to the host, after 3 untimed warm-up calls per device (the GPU's first uploads the trie); the GPU "
              "queries in one stream, then the CPU's on the first queries, whose results are checked against the "
              "GPU's (key ids equal, scores within 1e-5). Speed-up: CPU mean / GPU mean."]
    return "\n".join(lines) + "\n"


def write_results(args, state, host):
    r = dict(benchmark="trie_scale", machine=machine(), gpu=state.get("gpu"), runs=state["runs"],
             build=state["build"], search=state["search"])
    r["targets"] = targets(state)
    js, md = result_paths(args.out, "trie_scale", host)
    js.write_text(json.dumps(r, indent=1))
    md.write_text(markdown(r))
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=("build", "search", "all"), default="all")
    ap.add_argument("--keys", default="10000000,100000000,800000000", help="key counts (comma list)")
    ap.add_argument("--workers", type=int, default=os.cpu_count(), help="processes of synth and build")
    ap.add_argument("--keep-keys", action="store_true", help="keep the synth keys once their trie is built")
    ap.add_argument("--workdir", default="/tmp/gtmkit-trie-scale")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)
    ap.add_argument("--bw", type=int, default=1000, help="beam width = proposals per step K")
    ap.add_argument("--T", type=int, default=8)
    ap.add_argument("--queries", type=int, default=200, help="GPU latency queries (b=1)")
    ap.add_argument("--cpu-queries", type=int, default=20, help="CPU latency queries, checked against the GPU's")
    ap.add_argument("--cpu-threads", type=int, default=8, help="numba threads of the CPU search")
    ap.add_argument("--batch", type=int, default=8, help="GPU throughput batch size")
    ap.add_argument("--batches", type=int, default=50, help="GPU throughput batches (median time)")
    ap.add_argument("--seed", type=int, default=7, help="proposal seed")
    ap.add_argument("--budget-s", type=float, default=540, help="stop a phase cleanly after this many seconds")
    args = ap.parse_args()
    t0, budget = time.perf_counter(), Budget(args.budget_s)
    args.sizes = sorted(int(x) for x in args.keys.split(",") if x)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    state_path = work / "state.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {"build": {}, "search": {}, "runs": {}}
    state["gpu"] = gpu_name() or state.get("gpu")
    host = args.host or host_kind(state["gpu"] or "")
    phases = ("build", "search") if args.phase == "all" else (args.phase,)

    def save():
        for p in phases:
            state["runs"][p] = {"command": "python " + " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
                                "wall_s": round(time.perf_counter() - t0, 1)}
        state_path.write_text(json.dumps(state, indent=1))
        return write_results(args, state, host)

    if "build" in phases:
        phase_build(args, state, save, budget)
    if "search" in phases:
        phase_search(args, state, save, budget)
    md = save()
    print(md.read_text())
    log(f"wrote {md} and {md.with_suffix('.json')}")


if __name__ == "__main__":
    main()
