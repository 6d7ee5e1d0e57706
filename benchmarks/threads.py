"""Thread scaling on the CPU: beam searches (and trie searches) per second from 1 and from 2 threads sharing
one Matcher (one SuccinctTrie), each thread's kernels on one core (numba.set_num_threads(1) in the worker).

    python benchmarks/threads.py --workdir /tmp/gtmkit-threads --out benchmarks/results

A synth catalog (default 1M ads, built once and cached in --workdir), B=8 requests a search, beams
(1, 256, 512, 512); each search's log-probs are recorded once from the synthetic decoder and replayed, so
only gtmkit is timed. Rounds alternate 1 and 2 threads (a background load slows both alike); each round
runs --searches searches per thread; the rate is the median over rounds. Every threaded answer is checked
against the single-threaded one. Writes benchmarks/results/threads_<host>.json and .md (host: cpuN, --host)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

# A fresh numba cache for the run (compile time is never timed), as in step_cpu.py.
os.environ.setdefault("NUMBA_CACHE_DIR", tempfile.mkdtemp(prefix="gtmkit-numba-"))

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numba  # noqa: E402

import gtmkit  # noqa: E402
from gtmkit.synth.logits import SyntheticDecoder  # noqa: E402
from gtmkit.synth import synth_users, write_catalog  # noqa: E402
from gtmkit.synth.keys import synth_keys  # noqa: E402
from gtmkit.synth.proposals import synth_proposals  # noqa: E402

from _common import HOST_HELP, CpuWatch, host_kind, result_paths  # noqa: E402
from _common import machine as _machine  # noqa: E402

DATE = __import__("datetime").date.today().isoformat()


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def ensure_index(work: Path, n_ads: int):
    work.mkdir(parents=True, exist_ok=True)
    cat, out = work / f"c_{n_ads}.parquet", work / f"idx_{n_ads}"
    if not cat.exists():
        write_catalog(cat, n_ads, seed=1)
    if out.exists():
        try:
            return gtmkit.load_index(out, verify=False)
        except Exception as exc:  # a stale or foreign directory: rebuild it
            log(f"{out}: cannot load ({exc}); rebuilding")
    return gtmkit.build_index(cat, out, partition="static", k=[1, 4, 4, 2], overwrite=True)


def recorded_searches(m, users, per_search, sizes, seed):
    """Per group of per_search users: (encoded requests, the decoder's log-probs per step, the answer) of
    one real search."""
    out = []
    for i in range(0, len(users) - per_search + 1, per_search):
        us = users[i:i + per_search]
        q = [m.index.encode_request(u) for u in us]
        logits, steps = SyntheticDecoder(us, m.index.vocab_size, "peaked", seed + i), []

        def spy(step, prev, parents, logits=logits, steps=steps):
            steps.append(np.asarray(logits(step, prev, parents), np.float32))
            return steps[-1]

        res = gtmkit.beam_search(m, q, spy, sizes, gtm=True)
        out.append((q, steps, _answer(res)))
    return out


def _answer(res):
    return res.sids, res.scores, [a for pair in res.ads for a in pair]


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a[:2], b[:2])) and len(a[2]) == len(b[2]) and \
        all(np.array_equal(x, y) for x, y in zip(a[2], b[2]))


def beam_call(m, sizes):
    def call(case):
        q, steps, want = case
        res = gtmkit.beam_search(m, q, lambda step, prev, parents: steps[step], sizes, gtm=True)
        return _same(_answer(res), want)
    return call


def trie_call(trie, bw):
    def call(case):
        tok, lp, want = case
        return all(np.array_equal(x, y) for x, y in zip(gtmkit.trie_beam_search(trie, tok, lp, bw), want))
    return call


def timed(call, cases, n_threads: int, per_thread: int) -> tuple:
    """(calls per second, all answers right, load) for n_threads workers, each making per_thread calls on
    one core."""
    ok = [True] * n_threads
    start = threading.Barrier(n_threads + 1)
    done = [0.0] * n_threads

    def worker(w):
        numba.set_num_threads(1)  # thread-local: this worker's kernels use one core
        start.wait()
        for i in range(per_thread):
            ok[w] &= call(cases[(w * 7 + i) % len(cases)])
        done[w] = time.perf_counter()

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(n_threads)]
    for t in ts:
        t.start()
    start.wait()
    t0, watch = time.perf_counter(), CpuWatch()
    for t in ts:
        t.join()
    return n_threads * per_thread / (max(done) - t0), all(ok), watch.stop()


def outside_kernels(call, cases, n: int) -> float:
    """Share of one thread's time spent outside gtmkit's parallel kernels (which release the GIL): an
    upper bound on the share under the GIL, so 2 threads can reach 1 / max(share, 0.5) at most."""
    from gtmkit.threads import ParallelKernel

    inside = [0.0]
    orig = ParallelKernel.__call__

    def timed_call(self, *args):
        t = time.perf_counter()
        try:
            return orig(self, *args)
        finally:
            inside[0] += time.perf_counter() - t

    numba.set_num_threads(1)
    ParallelKernel.__call__ = timed_call
    try:
        t0 = time.perf_counter()
        for i in range(n):
            call(cases[i % len(cases)])
        total = time.perf_counter() - t0
    finally:
        ParallelKernel.__call__ = orig
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    return (total - inside[0]) / total


def scaling(name, call, cases, per_thread, rounds) -> dict:
    for _ in range(2):  # warm: compile, caches, page-in
        timed(call, cases, 2, 2)
    rates, loads = {1: [], 2: []}, {1: [], 2: []}
    right = True
    for _ in range(rounds):
        for n in (1, 2):
            r, ok, load = timed(call, cases, n, per_thread)
            rates[n].append(r)
            loads[n].append(load)
            right &= ok
    # mean cores busy with this process and with others during each phase
    load = {f"{n} thread(s)": {key: round(float(np.mean([x.get(key, np.nan) for x in loads[n]])), 2)
                               for key in ("ours_cores", "other_cores")} for n in (1, 2)}
    r1, r2 = float(np.median(rates[1])), float(np.median(rates[2]))
    share = outside_kernels(call, cases, per_thread)
    log(f"{name}: 1 thread {r1:.1f}/s, 2 threads {r2:.1f}/s, x{r2 / r1:.2f}, answers equal: {right}")
    return {"name": name, "rate_1": r1, "rate_2": r2, "ratio": r2 / r1, "ms_per_call_1": 1e3 / r1, "outside_kernels": share,
            "rates_1": rates[1], "rates_2": rates[2], "answers_equal": right, "load": load}


def markdown(res) -> str:
    a = res["args"]
    lines = [f"# Thread scaling, CPU ({res['date']}, {res['host']})", "",
             f"`{res['command']}`", "",
             f"{res['machine']['cpu']}, {res['machine']['cores']} cores, numba {res['machine']['numba']} "
             f"({res['layer']} layer), one Matcher / one SuccinctTrie shared by the threads, each thread's "
             f"kernels on one core. Index: synth catalog of {a['ads']:,} ads ({res['sids']:,} SIDs), B={a['requests']} requests "
             f"a search, beams {a['beams']}, GTM + post-filter, recorded log-probs replayed. Trie: "
             f"{a['trie_keys']:,} keys, b={a['trie_b']} queries, T=8, K={a['trie_k']}, BW={a['trie_bw']}. "
             f"Median over {a['rounds']} rounds alternating 1 and 2 threads, {a['searches']} calls a thread "
             "a round.", "",
             "Outside kernels: share of one thread's time spent outside the parallel kernels (which release "
             "the GIL), an upper bound on the share under the GIL; the GIL alone would allow up to "
             "1 / max(share, 0.5) from 2 threads.", "",
             "| work | ms a call (1 thread) | calls/s, 1 thread | calls/s, 2 threads | ratio | outside kernels "
             "| answers equal |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['name']} | {r['ms_per_call_1']:.1f} | {r['rate_1']:.1f} | {r['rate_2']:.1f} | "
                     f"{r['ratio']:.2f}x | {100 * r['outside_kernels']:.1f}% | {r['answers_equal']} |")
    lines += ["", "Load while measuring (cores busy with other processes: the ratio is only as good as the "
              "second core was free):", ""]
    for r in res["rows"]:
        lines.append(f"- {r['name']}: {json.dumps(r['load'])}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/gtmkit-threads", help="catalog + index cache")
    ap.add_argument("--ads", type=int, default=1_000_000)
    ap.add_argument("--beams", default="1,256,512,512")
    ap.add_argument("--requests", type=int, default=8, help="requests (B) of one beam search")
    ap.add_argument("--searches-recorded", type=int, default=8, help="distinct recorded searches")
    ap.add_argument("--searches", type=int, default=20, help="calls per thread per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--trie-keys", type=int, default=1_000_000)
    ap.add_argument("--trie-b", type=int, default=4)
    ap.add_argument("--trie-k", type=int, default=256)
    ap.add_argument("--trie-bw", type=int, default=256)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)
    args = ap.parse_args()
    sizes = tuple(int(x) for x in args.beams.split(","))

    idx = ensure_index(Path(args.workdir), args.ads)
    m = gtmkit.Matcher(idx)
    users = synth_users(idx.manifest["schema"], args.requests * args.searches_recorded, seed=11)
    rows = [scaling("beam_search", beam_call(m, sizes), recorded_searches(m, users, args.requests, sizes, 7),
                    args.searches, args.rounds)]
    if args.trie_keys:
        trie = gtmkit.SuccinctTrie.build(synth_keys(args.trie_keys, seed=3))
        cases = []
        for s in range(8):
            tok, lp = synth_proposals(trie, args.trie_b, 8, args.trie_k, seed=s)
            cases.append((tok, lp, gtmkit.trie_beam_search(trie, tok, lp, args.trie_bw)))
        rows.append(scaling("trie_beam_search", trie_call(trie, args.trie_bw), cases, args.searches, args.rounds))
    host = args.host or host_kind()
    res = {"date": DATE, "host": host,
           "command": "python benchmarks/threads.py " + " ".join(sys.argv[1:]),
           "machine": _machine(numpy=np.__version__, numba=numba.__version__),
           "layer": gtmkit.threads.threading_layer(), "sids": idx.num_sids, "args": vars(args), "rows": rows}
    js, md = result_paths(args.out, "threads", host)
    js.write_text(json.dumps(res, indent=1))
    md.write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
