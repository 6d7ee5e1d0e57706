"""Succinct trie (FlashTrie) benchmark: build time and bytes side by side with
marisa-trie on the same keys, then constrained beam search latency and throughput per device.

    python benchmarks/trie.py --keys 1000000,10000000,30000000,60000000 --workdir /tmp/gtmkit-trie --devices cpu,cpu:1,cuda

1. Build. For each key count n: synth_keys(n) (keyword-like, lengths 2-8, Zipf tokens over 2.2M) is
   written once to Parquet (list<int32> column "key", cached in --workdir). Each build then runs in a
   fresh child process, so its peak RSS is its own:
   - ours: the Parquet column read back (pyarrow ChunkedArray list<int32>, not timed), then
     `SuccinctTrie.build(column)` timed (sort + dedup + LOUDS layout), then saved (not timed) for the
     on-disk size. A 1,000-key build runs first in the same child to load numba's cached machine code;
     its time is reported as the cold-start overhead, and "cold" ratios add it to our build.
   - marisa-trie: the same column converted to a list of bytes (every token a big-endian 4-byte word,
     so a key that prefixes another stays a byte prefix; not timed), then `marisa_trie.BinaryTrie(keys)`
     timed; size = len(trie.tobytes()).
   Both builders are single-threaded (ours: numpy sorts and serial numba loops). Up to
   --build-reps-max-keys keys each child builds --build-reps times and reports the median.
2. Search (as in FlashTrie, Fig. 3-4). On the trie of --search-keys keys (default 10M, loaded from the artifact
   the build child saved, into RAM): NAR proposals from synth_proposals (FlashTrie, App. K), T=8;
   - latency at b=1 for BW=K in {100, ..., 1000}: every query timed alone (perf_counter around one
     `trie_beam_search` call, including its input checks and output arrays), mean/p50/p95/p99;
   - throughput at BW=K=1000 for b in {1, 4, 8, 16}: batches of b queries from a pool, q/s = b / median
     batch time (and b / mean batch time).
   Devices are timed interleaved, so background load hits them alike: throughput batch by batch, latency in
   blocks of --block queries (default 10) per device in turn. Query by query (--block 1), every GPU query
   follows ~2 ms of GPU idleness and host work, which cost it ~75 us on an H200 host, a state a GPU serving
   a stream of queries is not in. Each device's turn starts with --turn-warmup untimed queries (default 1,
   for both devices alike): in blocks of 10 a GPU turn still follows ~20 ms of GPU idleness (the CPU's
   turn), which makes its first queries ~25 us slower than in a stream of GPU queries; the CPU's thread pool
   sleeps after the GPU's turn in the same way.
   "cuda" is skipped, with the reason recorded, when gtmkit._gpu.cuda_available() is False or
   trie_beam_search(device="cuda") raises on a trial query; otherwise its results are checked equal to
   the CPU's (key ids; scores within 1e-5) on every timed query and the GPU targets are evaluated.
3. Plots as in FlashTrie, Fig. 2-4 (trie_<host>_build.png, _latency.png, _throughput.png) and
   trie_<host>.json / .md under --out (host: the GPU's model when a GPU search ran, e.g. h200, else cpuN;
   --host).

Machine load (cores busy outside this process, from /proc/stat) is recorded per phase; other jobs may
share the machine, so compare the side-by-side ratios rather than absolute times."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import HOST_HELP, CpuWatch, child, gpu_name, host_kind, result_paths, settle_workers  # noqa: E402
from _common import machine as _machine  # noqa: E402

DATE = time.strftime("%Y-%m-%d")  # the machine's date when the run starts
SEED_KEYS = 1

# ------------------------------------------------------------------------------------------------
# Child processes (one build each, so peak RSS is that build's own)

CHILD_OURS = r"""
import json, os, resource, shutil, sys, time
import pyarrow.parquet as pq
from gtmkit import SuccinctTrie
from gtmkit.synth.keys import synth_keys
path, out, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])

def rss_gib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**20
    return float("nan")

t = time.perf_counter(); SuccinctTrie.build(synth_keys(1000, seed=3)); warm = time.perf_counter() - t
t = time.perf_counter(); col = pq.read_table(path, columns=["key"]).column("key"); read = time.perf_counter() - t
rss_in = rss_gib()
times = []
for _ in range(reps):
    trie = None
    t = time.perf_counter(); trie = SuccinctTrie.build(col); times.append(time.perf_counter() - t)
build = sorted(times)[len(times) // 2]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
shutil.rmtree(out, ignore_errors=True)
t = time.perf_counter(); trie.save(out); save = time.perf_counter() - t
disk = sum(f.stat().st_size for f in __import__("pathlib").Path(out).iterdir())
s = trie.stats()
print(json.dumps({"keys": trie.num_keys, "nodes": trie.num_nodes, "build_s": build, "build_runs_s": times,
                  "cold_start_s": warm,
                  "read_s": read, "save_s": save, "bytes": trie.nbytes, "disk_bytes": disk,
                  "bits_per_node": s["bits_per_node"], "bytes_per_key": s["bytes_per_key"],
                  "high_bits": s["high_bits"], "array_bytes": s["array_bytes"],
                  "rss_input_gib": rss_in, "peak_rss_gib": peak, "tokens": int(len(col.combine_chunks().values))}))
"""

CHILD_MARISA = r"""
import json, resource, sys, time
import numpy as np, pyarrow.parquet as pq
import marisa_trie
path, reps = sys.argv[1], int(sys.argv[2])

def rss_gib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**20
    return float("nan")

col = pq.read_table(path, columns=["key"]).column("key").combine_chunks()
t = time.perf_counter()
off = (col.offsets.to_numpy().astype(np.int64) * 4).tolist()
buf = col.values.to_numpy().astype(">u4").tobytes()          # fixed-width big-endian 4-byte tokens
keys = [buf[a:b] for a, b in zip(off[:-1], off[1:])]
del buf, off, col
conv = time.perf_counter() - t
rss_in = rss_gib()
times = []
for _ in range(reps):
    trie = None
    t = time.perf_counter(); trie = marisa_trie.BinaryTrie(keys); times.append(time.perf_counter() - t)
build = sorted(times)[len(times) // 2]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
n = len(trie)
size = len(trie.tobytes())
print(json.dumps({"keys": n, "input_keys": len(keys), "build_s": build, "build_runs_s": times,
                  "convert_s": conv, "bytes": size,
                  "rss_input_gib": rss_in, "peak_rss_gib": peak}))
"""


# ------------------------------------------------------------------------------------------------
# Machine and load


def machine(threads: int) -> dict:
    import numba
    import pyarrow

    try:
        layer = numba.threading_layer()  # known once a parallel kernel has run
    except Exception:
        layer = "?"
    try:
        from importlib.metadata import version
        marisa = version("marisa-trie")
    except Exception:
        marisa = "?"
    return _machine(numpy=np.__version__, numba=numba.__version__, pyarrow=pyarrow.__version__, marisa_trie=marisa,
                    numba_threads=threads, numba_threading_layer=layer, gpu=gpu_name())


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Build


def keys_file(work: Path, n: int) -> tuple:
    """-> (Parquet path, seconds spent writing it now, or None when it was cached in work)."""
    from gtmkit.synth.keys import write_keys

    path = work / f"keys_{n}.parquet"
    if path.exists():
        return path, None
    t = time.perf_counter()
    tmp = path.with_suffix(".tmp")
    write_keys(tmp, n, seed=SEED_KEYS)
    tmp.rename(path)
    synth = time.perf_counter() - t
    log(f"synth {n:,} keys -> {path}: {synth:.1f} s")
    return path, synth


def bench_build(work: Path, n: int, reps: int) -> dict:
    path, synth = keys_file(work, n)
    watch = CpuWatch()
    ours = child(CHILD_OURS, path, work / f"trie_{n}", reps)
    theirs = child(CHILD_MARISA, path, reps)
    if ours["keys"] != theirs["keys"] or theirs["keys"] != theirs["input_keys"]:
        raise SystemExit(f"{n}: ours has {ours['keys']} keys, marisa-trie {theirs['keys']} "
                         f"of {theirs['input_keys']}: not the same key set")
    row = {"target_keys": n, "keys": ours["keys"], "build_reps": reps, "synth_s": synth, "tokens": ours["tokens"], "nodes": ours["nodes"],
           "ours": ours, "marisa": theirs,
           "time_ratio_marisa_over_ours": theirs["build_s"] / ours["build_s"],
           "time_ratio_marisa_over_ours_cold": theirs["build_s"] / (ours["build_s"] + ours["cold_start_s"]),
           "bytes_ratio_ours_over_marisa": ours["bytes"] / theirs["bytes"],
           "load": watch.stop()}
    log(f"build {n:,}: ours {ours['build_s']:.2f} s {ours['bytes'] / 1e6:.1f} MB peak {ours['peak_rss_gib']:.2f} GiB; "
        f"marisa {theirs['build_s']:.2f} s {theirs['bytes'] / 1e6:.1f} MB peak {theirs['peak_rss_gib']:.2f} GiB; "
        f"time x{row['time_ratio_marisa_over_ours']:.2f}, bytes x{row['bytes_ratio_ours_over_marisa']:.3f}")
    return row


# ------------------------------------------------------------------------------------------------
# Search: one callable per device, so a GPU column appears as soon as trie_beam_search(device="cuda") runs


def _sync(result):
    """Bring a result to the host (a CuPy result would be device arrays: copy, which synchronises)."""
    ids, scores = result
    if hasattr(ids, "get"):
        ids, scores = ids.get(), scores.get()
    return np.asarray(ids), np.asarray(scores)


SERVER = "cuda-server"  # gtmkit.trie.server_cuda.TrieSearchServer: b=1 latency only


def server_searcher(trie):
    """fn(tokens [1, T, K], logp, bw) on a TrieSearchServer kept while (bw, T, K) stays the same; fn.close()
    stops the last one (a resident kernel would make a device-wide synchronize wait forever)."""
    from gtmkit.trie.server_cuda import TrieSearchServer
    held = {}

    def fn(tokens, logp, bw):
        key = (bw,) + tuple(tokens.shape[1:])
        if tokens.shape[0] != 1:
            raise ValueError(f"{SERVER} serves one query at a time, got b={tokens.shape[0]}")
        if held.get("key") != key:
            fn.close()
            held["srv"], held["key"] = TrieSearchServer(trie, bw, key[1], key[2]), key
        return held["srv"].search(tokens, logp)

    def close():
        if "srv" in held:
            held.pop("srv").close()
            held.pop("key")

    def prepare(tokens, logp, bw):  # start the server for a turn (untimed): its kernel stays resident
        if held.get("key") != (bw,) + tuple(tokens.shape[1:]):
            fn(tokens[:1], logp[:1], bw)

    fn.close, fn.prepare, fn.end_turn = close, prepare, close
    return fn


def make_searchers(trie, devices: list) -> tuple:
    """-> ({device: fn(tokens, logp, bw) -> (ids, scores) on the host}, {device: reason it was skipped})."""
    from gtmkit import trie_beam_search
    from gtmkit._gpu import cuda_available
    from gtmkit.synth.proposals import synth_proposals

    fns, skipped = {}, {}
    trial = synth_proposals(trie, 1, 8, 16, seed=99)
    for dev in devices:
        if dev in ("cuda", SERVER) and not cuda_available():
            skipped[dev] = "no CUDA device (gtmkit._gpu.cuda_available() is False)"
            continue

        if dev.startswith("cpu:"):  # the CPU search limited to N numba threads (then restored)
            def fn(tokens, logp, bw, n=int(dev[4:])):
                import numba
                keep = numba.get_num_threads()
                numba.set_num_threads(n)
                try:
                    return _sync(trie_beam_search(trie, tokens, logp, bw, device="cpu"))
                finally:
                    numba.set_num_threads(keep)
        elif dev == SERVER:  # one query at a time on a resident cluster, a server per (BW, T, K)
            fn = server_searcher(trie)
        else:
            def fn(tokens, logp, bw, dev=dev):
                return _sync(trie_beam_search(trie, tokens, logp, bw, device=dev))

        try:
            fn(*trial, 16)
            if hasattr(fn, "end_turn"):
                fn.end_turn()
        except Exception as exc:  # e.g. GtmkitError: device 'cuda' not available in this build
            skipped[dev] = f"trie_beam_search(device={dev!r}) raised {type(exc).__name__}: {exc}"
            continue
        fns[dev] = fn
    return fns, skipped


def same_results(ref, got, what):
    if not np.array_equal(ref[0], got[0]):
        raise SystemExit(f"{what}: key ids differ from the CPU search")
    fin = np.isfinite(ref[1])
    if not (np.array_equal(fin, np.isfinite(got[1])) and np.allclose(ref[1][fin], got[1][fin], rtol=0, atol=1e-5)):
        raise SystemExit(f"{what}: scores differ from the CPU search by more than 1e-5")


def stats_ms(times: list) -> dict:
    a = 1e3 * np.asarray(times)
    return {"mean_ms": float(a.mean()), "p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)),
            "p99_ms": float(np.percentile(a, 99)), "min_ms": float(a.min()), "max_ms": float(a.max())}


def bench_latency(trie, fns, bws, T, queries, queries_large, large_from, seed, block=1, turn_warmup=0,
                  settle=False) -> list:
    """Every query timed alone; the devices take turns in blocks of `block` queries (1: query by query), each
    turn starting with `turn_warmup` untimed queries (the block's first), and with `settle` once no other
    thread of this process runs (the CPU search's OpenMP workers spin for a while after it returns)."""
    from gtmkit.synth.proposals import synth_proposals

    rows = []
    for bw in bws:
        nq = queries if bw < large_from else queries_large
        tok, lp = synth_proposals(trie, nq, T, bw, seed=seed + bw)
        for dev, fn in fns.items():  # warm-up (JIT, buffers) on a query not timed
            fn(tok[:1], lp[:1], bw)
            if hasattr(fn, "end_turn"):
                fn.end_turn()
        times = {dev: [] for dev in fns}
        watch = CpuWatch()
        results = {dev: [] for dev in fns}
        waits = []
        for start in range(0, nq, block):
            for dev, fn in fns.items():
                if settle:
                    waits.append(settle_workers())
                if hasattr(fn, "prepare"):
                    fn.prepare(tok[start:start + 1], lp[start:start + 1], bw)
                for _ in range(turn_warmup):
                    fn(tok[start:start + 1], lp[start:start + 1], bw)
                for i in range(start, min(start + block, nq)):
                    a = time.perf_counter()
                    res = fn(tok[i:i + 1], lp[i:i + 1], bw)
                    times[dev].append(time.perf_counter() - a)
                    results[dev].append(res)
                if hasattr(fn, "end_turn"):  # a resident server polls host memory: not during others' turns
                    fn.end_turn()
        ref_dev = next(iter(fns))
        found = [int((r[0] >= 0).sum()) for r in results[ref_dev]]
        for dev in fns:
            for i, res in enumerate(results[dev]):
                same_results(results[ref_dev][i], res, f"BW={bw} query {i} {dev}")
        row = {"bw": bw, "k": bw, "T": T, "b": 1, "queries": nq, "block": block, "turn_warmup": turn_warmup,
               "settle": settle, "settle_ms_median": 1e3 * float(np.median(waits)) if waits else 0.0,
               "finished_keys_mean": float(np.mean(found)),
               "devices": {dev: stats_ms(t) for dev, t in times.items()}, "load": watch.stop()}
        rows.append(row)
        log(f"latency BW=K={bw}: " + ", ".join(f"{d} mean {s['mean_ms']:.3f} p99 {s['p99_ms']:.3f} ms"
                                              for d, s in row["devices"].items())
            + f"; {row['finished_keys_mean']:.0f} keys/query; load {row['load']}")
    return rows


def bench_throughput(trie, fns, batches, bw, T, pool, rounds, min_seconds, seed, settle=False) -> list:
    from gtmkit.synth.proposals import synth_proposals

    tok, lp = synth_proposals(trie, pool, T, bw, seed=seed)
    rows = []
    for b in batches:
        for dev, fn in fns.items():
            fn(tok[:b], lp[:b], bw)
        times = {dev: [] for dev in fns}
        watch = CpuWatch()
        i = 0
        while i < rounds or time.perf_counter() - watch.t0 < min_seconds:
            s = (i * b) % (pool - b + 1)
            i += 1
            ref = None
            for dev, fn in fns.items():
                if settle:
                    settle_workers()
                a = time.perf_counter()
                res = fn(tok[s:s + b], lp[s:s + b], bw)
                times[dev].append(time.perf_counter() - a)
                if ref is None:
                    ref = res
                else:
                    same_results(ref, res, f"b={b} batch at {s} {dev}")
        devs = {}
        for dev, t in times.items():
            t = np.asarray(t)
            devs[dev] = {"qps_median": b / float(np.median(t)), "qps_mean": b / float(t.mean()),
                         "batch_ms_median": 1e3 * float(np.median(t)), "batch_ms_p95": 1e3 * float(np.percentile(t, 95))}
        row = {"b": b, "bw": bw, "k": bw, "T": T, "batches": i, "settle": settle, "devices": devs, "load": watch.stop()}
        rows.append(row)
        log(f"throughput b={b}: " + ", ".join(f"{d} {s['qps_median']:.0f} q/s" for d, s in devs.items())
            + f"; load {row['load']}")
    return rows


# ------------------------------------------------------------------------------------------------
# Targets, plots, markdown


def targets(build_rows, lat, tput, skipped) -> dict:
    t = {
        "index_bytes_le_marisa": {
            "met": all(r["ours"]["bytes"] <= r["marisa"]["bytes"] for r in build_rows),
            "detail": ", ".join(f"{r['keys']:,}: {r['bytes_ratio_ours_over_marisa']:.3f}x" for r in build_rows)},
        "build_ge_3x_faster_than_marisa": {
            "met": all(r["time_ratio_marisa_over_ours"] >= 3 for r in build_rows),
            "detail": ", ".join(f"{r['keys']:,}: {r['time_ratio_marisa_over_ours']:.1f}x "
                                f"(cold {r['time_ratio_marisa_over_ours_cold']:.1f}x)" for r in build_rows)},
    }
    gpu = ("gpu_mean_latency_bw1000_le_1ms", "gpu_speedup_bw1000_ge_16x", "gpu_throughput_b8_bw1000_ge_3000qps")
    srv = next((r for r in lat if r["bw"] == 1000 and SERVER in r["devices"]), None)
    if srv is not None:  # the resident server's latency (b=1 only), beside trie_beam_search's
        g, c = srv["devices"][SERVER]["mean_ms"], srv["devices"]["cpu"]["mean_ms"]
        t["gpu_server_speedup_bw1000_ge_16x"] = {"met": c / g >= 16,
                                                 "detail": f"{g:.3f} ms, {c / g:.1f}x over the CPU search"}
    if "cuda" in skipped or not lat or "cuda" not in lat[0]["devices"]:
        why = "no GPU search yet" + (f"; {skipped['cuda']}" if "cuda" in skipped else "")
        for name in gpu:
            t[name] = {"met": None, "detail": why}
        return t
    top = next((r for r in lat if r["bw"] == 1000), None)
    b8 = next((r for r in tput if r["b"] == 8), None)
    if top is None:
        t[gpu[0]] = t[gpu[1]] = {"met": None, "detail": "BW=1000 not in the sweep"}
    else:
        g, c = top["devices"]["cuda"]["mean_ms"], top["devices"]["cpu"]["mean_ms"]
        t[gpu[0]] = {"met": g <= 1.0, "detail": f"{g:.3f} ms"}
        t[gpu[1]] = {"met": c / g >= 16, "detail": f"{c / g:.1f}x over the CPU search"}
    if b8 is None:
        t[gpu[2]] = {"met": None, "detail": "b=8 not in the sweep"}
    else:
        q = b8["devices"]["cuda"]["qps_median"]
        t[gpu[2]] = {"met": q >= 3000, "detail": f"{q:,.0f} q/s"}
    return t


def plots(result: dict, stem: Path):
    """The three figures beside the result files: <stem>_build.png, _latency.png, _throughput.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["build"]
    n = [r["keys"] for r in rows]
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot(n, [r["ours"]["build_s"] for r in rows], "o-", label="gtmkit SuccinctTrie")
    ax[0].plot(n, [r["ours"]["build_s"] + r["ours"]["cold_start_s"] for r in rows], "o:", color="C0", alpha=0.6,
               label="gtmkit, + cold start")
    ax[0].plot(n, [r["marisa"]["build_s"] for r in rows], "s-", label="marisa-trie BinaryTrie")
    ax[0].set(xscale="log", yscale="log", xlabel="keys", ylabel="build time (s)", title="Build time")
    ax[1].plot(n, [r["ours"]["bytes"] / 1e6 for r in rows], "o-", label="gtmkit SuccinctTrie")
    ax[1].plot(n, [r["marisa"]["bytes"] / 1e6 for r in rows], "s-", label="marisa-trie BinaryTrie")
    ax[1].set(xscale="log", yscale="log", xlabel="keys", ylabel="index size (MB)", title="Index size")
    for a in ax:
        a.grid(True, which="both", alpha=0.3)
        a.legend()
    fig.suptitle(f"Succinct trie build, synth keys (|V|=2.2M, lengths 2-8); {result['machine']['cpu']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(f"{stem}_build.png", dpi=120)
    plt.close(fig)

    lat = result["latency"]
    devs = list(lat[0]["devices"]) if lat else []
    accel = [d for d in devs if not d.startswith("cpu")]  # speedup panel: devices other than the CPU search
    two = bool(accel)
    fig, ax = plt.subplots(1, 2 if two else 1, figsize=(10 if two else 6, 4), squeeze=False)
    a = ax[0, 0]
    bws = [r["bw"] for r in lat]
    for i, d in enumerate(devs):
        a.plot(bws, [r["devices"][d]["mean_ms"] for r in lat], "o-", color=f"C{i}", label=f"{d} mean")
        a.plot(bws, [r["devices"][d]["p95_ms"] for r in lat], "--", color=f"C{i}", label=f"{d} p95")
        a.plot(bws, [r["devices"][d]["p99_ms"] for r in lat], ":", color=f"C{i}", label=f"{d} p99")
    a.set(xlabel="beam width BW (= K)", ylabel="latency per request (ms)",
          title=f"b=1, T={result['search']['T']}, {result['search']['trie_keys']:,}-key trie")
    a.grid(True, alpha=0.3)
    a.legend(fontsize=8)
    if two:
        b = ax[0, 1]
        for d in accel:
            i = devs.index(d)
            b.plot(bws, [r["devices"]["cpu"]["mean_ms"] / r["devices"][d]["mean_ms"] for r in lat], "o-",
                   color=f"C{i}", label=f"cpu mean / {d} mean")
        b.set(xlabel="beam width BW (= K)", ylabel="speedup (x)", title="Speedup over the CPU search (all threads)")
        b.grid(True, alpha=0.3)
        b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{stem}_latency.png", dpi=120)
    plt.close(fig)

    tp = result["throughput"]
    fig, a = plt.subplots(figsize=(6, 4))
    for i, d in enumerate(devs):
        if not tp or d not in tp[0]["devices"]:  # (a single-query device: latency only)
            continue
        a.plot([r["b"] for r in tp], [r["devices"][d]["qps_median"] for r in tp], "o-", color=f"C{i}", label=d)
    bw = tp[0]["bw"] if tp else "?"
    a.set(xscale="log", xlabel="batch size b", ylabel="throughput (queries/s)",
          title=f"BW=K={bw}, T={result['search']['T']}, {result['search']['trie_keys']:,}-key trie")
    a.set_xticks([r["b"] for r in tp], [str(r["b"]) for r in tp])
    a.set_ylim(bottom=0)
    a.grid(True, alpha=0.3)
    a.legend()
    fig.tight_layout()
    fig.savefig(f"{stem}_throughput.png", dpi=120)
    plt.close(fig)


def _load(d: dict) -> str:
    if "other_cores" not in d:
        return "n/a"
    return f"{d['other_cores']:.2f} (+{d['steal_cores']:.2f} steal)"


def _synth_note(r: dict) -> str:
    made = [x for x in r["build"] if x.get("synth_s") is not None]
    cached = [x for x in r["build"] if x.get("synth_s") is None]
    parts = []
    if made:
        parts.append(f"incl. {sum(x['synth_s'] for x in made):.0f} s writing the synth keys")
    if cached:
        parts.append("synth keys of " + ", ".join(f"{x['target_keys']:,}" for x in cached) + " cached in the workdir")
    return "; " + "; ".join(parts) if parts else ""


def markdown(r: dict) -> str:
    mc, s = r["machine"], r["search"]
    lines = [f"# Succinct trie: build and constrained beam search ({r['date']})", "",
             f"Machine: {mc['cpu']}, {mc['cores']} cores, {mc['memory_gib']} GiB; Python {mc['python']}, numpy "
             f"{mc['numpy']}, numba {mc['numba']} ({mc['numba_threads']} threads for the cpu search, "
             f"{mc['numba_threading_layer']} layer), pyarrow "
             f"{mc['pyarrow']}, marisa-trie {mc['marisa_trie']}"
             f"{'; GPU ' + mc['gpu'] if mc.get('gpu') else ''}.  ",
             f"Command: `{r['command']}` (wall {r['wall_s'] / 60:.1f} min{_synth_note(r)}).", "",
             "## Build (each in its own child process)", "",
             "| keys | tokens | nodes | builds | ours s | marisa s | marisa/ours time | ours cold-start s | ours MB | marisa MB "
             "| ours/marisa bytes | ours peak RSS GiB (input) | marisa peak RSS GiB (input) | other load, cores |",
             "|" + "---|" * 14]
    for x in r["build"]:
        o, m = x["ours"], x["marisa"]
        lines.append(f"| {x['keys']:,} | {x['tokens']:,} | {x['nodes']:,} | {x['build_reps']} | {o['build_s']:.2f} | {m['build_s']:.2f} | "
                     f"**{x['time_ratio_marisa_over_ours']:.1f}x** | {o['cold_start_s']:.2f} | {o['bytes'] / 1e6:.1f} | "
                     f"{m['bytes'] / 1e6:.1f} | **{x['bytes_ratio_ours_over_marisa']:.3f}** | "
                     f"{o['peak_rss_gib']:.2f} ({o['rss_input_gib']:.2f}) | {m['peak_rss_gib']:.2f} ({m['rss_input_gib']:.2f}) "
                     f"| {_load(x['load'])} |")
    devs = list(r["latency"][0]["devices"]) if r["latency"] else []
    tdevs = list(r["throughput"][0]["devices"]) if r["throughput"] else []  # without single-query devices
    lines += ["", f"## Search latency, b=1, T={s['T']}, BW=K, {s['trie_keys']:,}-key trie "
              f"(ms per request)", ""]
    head = "| BW=K | queries | keys found/query | " + " | ".join(
        f"{d} mean | {d} p50 | {d} p95 | {d} p99" for d in devs)
    extra = [f"cpu/{d} mean" for d in devs if not d.startswith("cpu")]
    head += "".join(f" | {e}" for e in extra) + " | other load, cores |"
    lines += [head, "|" + "---|" * (3 + 4 * len(devs) + len(extra) + 1)]
    for x in r["latency"]:
        cells = [f"{x['bw']}", f"{x['queries']}", f"{x['finished_keys_mean']:.0f}"]
        for d in devs:
            st = x["devices"][d]
            cells += [f"{st['mean_ms']:.3f}", f"{st['p50_ms']:.3f}", f"{st['p95_ms']:.3f}", f"{st['p99_ms']:.3f}"]
        cells += [f"{x['devices']['cpu']['mean_ms'] / x['devices'][d]['mean_ms']:.1f}x" for d in devs
                  if not d.startswith("cpu")]
        cells.append(_load(x["load"]))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"## Throughput, BW=K={r['throughput'][0]['bw'] if r['throughput'] else '?'}, T={s['T']} "
              "(queries/s = b / median batch time)", "",
              "| b | batches | " + " | ".join(f"{d} q/s | {d} batch ms" for d in tdevs) + " | other load, cores |",
              "|" + "---|" * (2 + 2 * len(tdevs) + 1)]
    for x in r["throughput"]:
        cells = [str(x["b"]), str(x["batches"])]
        for d in tdevs:
            st = x["devices"][d]
            cells += [f"{st['qps_median']:,.0f}", f"{st['batch_ms_median']:.2f}"]
        cells.append(_load(x["load"]))
        lines.append("| " + " | ".join(cells) + " |")
    if r["skipped_devices"]:
        lines += ["", "Skipped devices: " + "; ".join(f"{d}: {why}" for d, why in r["skipped_devices"].items()) + "."]
    names = {"index_bytes_le_marisa": "index bytes <= marisa-trie's (every size)",
             "build_ge_3x_faster_than_marisa": "build >= 3x faster than marisa-trie (every size)",
             "gpu_mean_latency_bw1000_le_1ms": "GPU mean latency at BW=K=1000, T=8 <= 1.0 ms",
             "gpu_speedup_bw1000_ge_16x": "GPU >= 16x the CPU search at BW=K=1000",
             "gpu_server_speedup_bw1000_ge_16x": "GPU, resident server (TrieSearchServer), >= 16x the CPU search at "
                                                 "BW=K=1000",
             "gpu_throughput_b8_bw1000_ge_3000qps": "GPU throughput at b=8, BW=1000 >= 3,000 q/s"}
    word = {True: "**met**", False: "**NOT met**", None: "**not run**"}
    lines += ["", "## Targets", ""]
    for k, v in r["targets"].items():
        lines.append(f"- {names.get(k, k)}: {word[v['met']]} ({v['detail']})")
    lines += ["", "Notes. Keys: `synth_keys(n, seed=1)` (distinct keyword-like keys, lengths 2-8, Zipf(1) tokens over "
              "2.2M ids), written to Parquet once; both builders get the same keys from it. Ours is timed from the "
              "pyarrow list<int32> column as read (`SuccinctTrie.build`, sort + dedup included); marisa-trie from a "
              "list of bytes (each token a big-endian 4-byte word; the conversion is not timed). Ours cold start = a "
              "1,000-key build first in the same fresh process (loading numba's cached code); the 'cold' ratio in "
              "the targets adds it. Both builders run single-threaded. Bytes: ours `SuccinctTrie.nbytes` (all arrays; "
              "the saved artifact adds .npy headers and a manifest), marisa `len(BinaryTrie.tobytes())`. Build times are the median of "
              "'builds' runs in the child. Peak RSS "
              "is the child's ru_maxrss, (input) its RSS with the input held just before the timed build. Search: "
              "`trie_beam_search` on the saved trie loaded into RAM; proposals `synth_proposals(trie, n, T, K)` "
              "(FlashTrie, App. K: r = K/10 head tokens on a key's path, the rest position-stratified noise); one "
              "warm-up call per point untimed; latency: devices take turns in blocks of " + str(r["latency"][0].get("block", 1) if r["latency"] else 1) + " queries, each turn after " + str(r["latency"][0].get("turn_warmup", 0) if r["latency"] else 0) + " untimed one(s) (a resident server runs only in its own turns, started untimed: its polling slows the other "
              "GPU path), throughput: batch by batch" + (
              "; every turn and batch starts once the CPU search's OpenMP workers stopped spinning (waited a median "
              + f"{r['latency'][0].get('settle_ms_median', 0):.1f} ms at the first BW)" if r["latency"] and r["latency"][0].get("settle") else "")
              + ". Other load: cores busy outside "
              "this process (from /proc/stat) during that row; the machine is shared with other jobs."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------


def bench_sizes(out: Path, host: str, reps: int = 3, baseline: str = None) -> None:
    """Bytes against marisa_trie.BinaryTrie (4-byte big-endian tokens) on several key sets: ours, and today's layout
    (format 2: build(tails=False)); with baseline (a checkout of the version to compare with), build seconds of both
    versions in child processes, alternating, median of reps."""
    import subprocess
    import tempfile
    import marisa_trie
    import trie_keysets as ks
    from gtmkit import SuccinctTrie
    from gtmkit.inputs.keys import key_arrays
    from gtmkit.synth.keys import synth_keys
    sets = {"synthetic": ("synthetic (synth_keys 300k)", lambda: synth_keys(300_000, seed=1)),
            "zipf_wide": ("Zipf 1-12, 2M vocab, a fifth wide", ks.zipf_wide),
            "zipf_steep": ("Zipf s=1.3 1-12, a fifth wide", ks.zipf_steep),
            "sid": ("SID-like 3x256 + 0", ks.sids), "text": ("words of 42 languages, CLIP BPE", ks.text)}
    rows, saved = [], tempfile.mkdtemp(prefix="trie-sizes-")
    for key, (name, make) in sets.items():
        keys = make()
        if keys is None:
            rows.append({"set": name, "skipped": "wordfreq or openai-clip not installed (pip install gtmkit[bench])"})
            continue
        tokens, offsets = key_arrays(keys)
        np.savez(f"{saved}/{key}.npz", tokens=tokens, offsets=offsets)
        trie, old = SuccinctTrie.build((tokens, offsets)), SuccinctTrie.build((tokens, offsets), tails=False)
        stats = trie.stats()
        buf = tokens.astype(">u4").tobytes()
        o = (offsets * 4).tolist()
        marisa = len(marisa_trie.BinaryTrie([buf[a:b] for a, b in zip(o[:-1], o[1:])]).tobytes())
        rows.append({"set": name, "key": key, "keys": trie.num_keys, "nodes": trie.num_nodes,
                     "tail_nodes": stats["tail_nodes"], "link_nodes": stats["link_nodes"], "low_bits": stats["low_bits"],
                     "const_levels": stats["const_levels"], "bytes": trie.nbytes, "bytes_format2": old.nbytes,
                     "marisa_bytes": marisa, "ratio": trie.nbytes / marisa, "ratio_format2": old.nbytes / marisa,
                     "structure_bytes": stats["structure_bytes"]})
        log(f"{name}: {trie.nbytes:,} B ({trie.nbytes / marisa:.3f}x marisa; format 2 {old.nbytes / marisa:.3f}x)")
    timed = [r["key"] for r in rows if "key" in r]
    if baseline:
        here = str(Path(__file__).resolve().parents[1])
        child = [sys.executable, str(Path(__file__).with_name("trie_build_time.py")), saved, ",".join(timed)]
        times = {"ours": [], "baseline": []}
        for _ in range(reps):
            for who, root in (("baseline", baseline), ("ours", here)):
                env = dict(os.environ, PYTHONPATH=root)
                times[who].append(json.loads(subprocess.run(child, env=env, capture_output=True, text=True,
                                                            check=True).stdout.strip().splitlines()[-1]))
        for r in rows:
            if "key" in r:
                r["build_s"] = sorted(t[r["key"]][0] for t in times["ours"])[reps // 2]
                r["baseline_build_s"] = sorted(t[r["key"]][0] for t in times["baseline"])[reps // 2]
                r["baseline_bytes"] = times["baseline"][0][r["key"]][1]
    result = {"date": DATE, "host": host, "command": " ".join(sys.argv), "baseline": baseline, "rows": rows}
    (out / f"trie_sizes_{host}.json").write_text(json.dumps(result, indent=1))
    lines = [f"# Succinct trie bytes against marisa-trie ({DATE}, {host})", "", f"`{result['command']}`", "",
             "| key set | keys | nodes | tail nodes | low bits | const levels | ours B | format 2 B | marisa B "
             "| ours/marisa | format 2/marisa | build s | baseline build s |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['set']} | skipped: {r['skipped']} |||||||||||| ")
            continue
        bt = (f"{r['build_s']:.3f} | {r['baseline_build_s']:.3f}" if "build_s" in r else " | ")
        lines.append(f"| {r['set']} | {r['keys']:,} | {r['nodes']:,} | {r['tail_nodes']:,} | {r['low_bits']} | "
                     f"{r['const_levels']} | {r['bytes']:,} | {r['bytes_format2']:,} | {r['marisa_bytes']:,} | "
                     f"**{r['ratio']:.3f}** | {r['ratio_format2']:.3f} | {bt} |")
    lines += ["", "Target: ours/marisa <= 0.85 on every set, and never more bytes than format 2 (today's layout: every "
              "label a 16-bit head, `build(tails=False)`). Build seconds: `SuccinctTrie.build` on the same keys in "
              f"child processes, this tree and the baseline ({baseline}) alternating, median of {reps}."]
    (out / f"trie_sizes_{host}.md").write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", default="1000000,10000000,30000000,60000000",
                    help="key counts to build (comma list); 60M peaks at ~12 GiB (marisa-trie) here")
    ap.add_argument("--build-reps", type=int, default=3, help="builds per child (median reported), both sides")
    ap.add_argument("--build-reps-max-keys", type=int, default=10_000_000, help="larger key sets are built once")
    ap.add_argument("--search-keys", type=int, default=10_000_000, help="trie size for the search (one of --keys)")
    ap.add_argument("--workdir", default="/tmp/gtmkit-trie", help="Parquet keys + saved tries")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--devices", default="cpu,cuda",
                    help="cpu first (the baseline, --threads numba threads); cpu:N = the CPU search with N threads; "
                         "cuda skipped (reason recorded) if unavailable; cuda-server = a resident TrieSearchServer "
                         "(b=1 latency only)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="numba threads for the CPU search")
    ap.add_argument("--T", type=int, default=8)
    ap.add_argument("--bws", default=",".join(str(x) for x in range(100, 1001, 100)), help="BW = K sweep")
    ap.add_argument("--queries", type=int, default=500, help="queries per latency point")
    ap.add_argument("--queries-large", type=int, default=500, help="queries per point from --large-from up")
    ap.add_argument("--large-from", type=int, default=600)
    ap.add_argument("--block", type=int, default=10,
                    help="latency: the devices take turns in blocks of this many queries (1: query by query)")
    ap.add_argument("--turn-warmup", type=int, default=1,
                    help="latency: untimed queries at the start of each device's turn (both devices)")
    ap.add_argument("--settle", action="store_true",
                    help="start each device's turn (latency) and batch (throughput) once the CPU search's OpenMP "
                         "workers have stopped spinning (busy wait, at most 0.2 s)")
    ap.add_argument("--batches", default="1,4,8,16")
    ap.add_argument("--tput-bw", type=int, default=1000)
    ap.add_argument("--tput-rounds", type=int, default=60, help="timed batches per batch size, at least")
    ap.add_argument("--tput-seconds", type=float, default=5.0, help="and at least this long per batch size")
    ap.add_argument("--tput-pool", type=int, default=256, help="distinct queries the batches are cut from")
    ap.add_argument("--seed", type=int, default=7, help="proposal seed")
    ap.add_argument("--skip-build", action="store_true", help="reuse the result file's build rows and the saved trie")
    ap.add_argument("--host", help=HOST_HELP)
    ap.add_argument("--sizes", action="store_true", help="only bytes against marisa-trie on several key sets "
                    "(trie_sizes_<host>.md/.json), a couple of minutes")
    ap.add_argument("--baseline", help="with --sizes: a checkout of gtmkit to time the build against (e.g. "
                    "git archive main | tar -x -C DIR)")
    args = ap.parse_args()
    if args.sizes:
        return bench_sizes(Path(args.out), args.host or "cpu%d" % os.cpu_count(), baseline=args.baseline)
    t_start = time.perf_counter()

    import numba
    numba.set_num_threads(args.threads)
    from gtmkit import SuccinctTrie

    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    if devices[0] != "cpu":
        raise SystemExit("--devices must start with cpu (the baseline the others are checked against)")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    sizes = [int(x) for x in args.keys.split(",")]
    if args.search_keys not in sizes:
        raise SystemExit("--search-keys must be one of --keys (its trie is the one the build child saved)")

    # named after the GPU when a GPU search was asked for and a device is there (else skipped: a CPU result)
    gpu = (gpu_name() or "") if any(not d.startswith("cpu") for d in devices) else ""
    js, md = result_paths(args.out, "trie", args.host or host_kind(gpu))
    if args.skip_build:
        if not js.is_file():
            raise SystemExit(f"--skip-build reuses the build rows of {js}, which is not there")
        build_rows = [r for r in json.loads(js.read_text())["build"] if r["target_keys"] in sizes]
    else:
        build_rows = [bench_build(work, n, args.build_reps if n <= args.build_reps_max_keys else 1) for n in sizes]

    trie_dir = work / f"trie_{args.search_keys}"
    trie = SuccinctTrie.load(trie_dir, verify=False, mmap=False)
    log(f"search trie: {trie}")
    fns, skipped = make_searchers(trie, devices)
    for d, why in skipped.items():
        log(f"skip {d}: {why}")
    bws = [int(x) for x in args.bws.split(",")]
    lat = bench_latency(trie, fns, bws, args.T, args.queries, args.queries_large, args.large_from, args.seed,
                        args.block, args.turn_warmup, args.settle)
    if SERVER in fns:
        fns[SERVER].close()  # its resident cluster would hold SMs during the throughput runs
    tput = bench_throughput(trie, {d: f for d, f in fns.items() if d != SERVER}, [int(x) for x in args.batches.split(",")],
                            args.tput_bw, args.T, args.tput_pool, args.tput_rounds, args.tput_seconds,
                            args.seed + 100_000, args.settle)

    result = {"benchmark": "trie", "date": DATE, "machine": machine(numba.get_num_threads()),
              "command": "python " + " ".join(sys.argv), "wall_s": time.perf_counter() - t_start,
              "key_seed": SEED_KEYS, "build": build_rows,
              "search": {"trie_keys": trie.num_keys, "trie_nodes": trie.num_nodes, "trie_bytes": trie.nbytes,
                         "T": args.T, "proposal_seed": args.seed, "devices": list(fns)},
              "skipped_devices": skipped, "latency": lat, "throughput": tput}
    result["targets"] = targets(build_rows, lat, tput, skipped)
    plots(result, js.with_suffix(""))
    result["wall_s"] = time.perf_counter() - t_start
    js.write_text(json.dumps(result, indent=1))
    md.write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
