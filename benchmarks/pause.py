"""Paused ads benchmark: Matcher.pause_ads / resume_ads of 100k ads on the ~10M-SID index, and the whole 4-step
search with post-filter before and after, side by side in one run.

    python benchmarks/pause.py --workdir /tmp/gtmkit-stepcpu --out benchmarks/results

The index is step_cpu.py's (15M synthetic ads, static partitions, cached in --workdir). Per device (the CPU, and
the GPU when CuPy sees one): the first pause (it makes the paused-ad state: one pass over the trie, and on the GPU
one upload), then rounds that pause a fresh random 100k ads and resume them (median). Searches: B=16 requests,
beams (1, 512, 1024, 1024), peaked synthetic logits, on a matcher that never paused and on one with 100k ads
paused, in interleaved rounds (median): the ratio is what pausing costs a search. Writes
benchmarks/results/pause_<host>.json and .md."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import gtmkit  # noqa: E402
from gtmkit._gpu import cuda_available  # noqa: E402
from gtmkit.matcher.matcher import Matcher  # noqa: E402
from gtmkit.synth import synth_users  # noqa: E402
from gtmkit.synth.logits import SyntheticDecoder  # noqa: E402

from _common import gpu_name, machine, result_paths  # noqa: E402
from step_cpu import ensure_index, index_options, log  # noqa: E402

SIZES = (1, 512, 1024, 1024)
B = 16


def _sync(m):
    if m.cuda is not None:
        import cupy
        cupy.cuda.get_current_stream().synchronize()


def _search(m, q, users, seed: int) -> float:
    t = time.perf_counter()
    gtmkit.beam_search(m, q, SyntheticDecoder(users, m.index.vocab_size, "peaked", seed), SIZES, gtm=True,
                       postfilter=True)
    _sync(m)
    return time.perf_counter() - t


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run_device(idx, device: str, n_pause: int, rounds: int, searches: int) -> dict:
    ids = np.asarray(idx.ad_ids_sorted, np.int64)
    rng = np.random.default_rng(5)
    users = synth_users(idx.manifest["schema"], B, seed=11)
    steady, paused = Matcher(idx, device), Matcher(idx, device)
    first = _timed(lambda: paused.pause_ads(ids[:1]))  # makes the state (and on the GPU uploads it)
    paused.resume_ads(ids[:1])
    pause_s, resume_s = [], []
    for _ in range(rounds):
        pick = rng.choice(ids, n_pause, replace=False)
        pause_s.append(_timed(lambda: paused.pause_ads(pick)))
        resume_s.append(_timed(lambda: paused.resume_ads(pick)))
    paused.pause_ads(rng.choice(ids, n_pause, replace=False))
    qs, qp = steady.batch([idx.encode_request(u) for u in users]), paused.batch([idx.encode_request(u) for u in users])
    for m, q in ((steady, qs), (paused, qp)):  # warm-up: compile, first-touch the tables
        _search(m, q, users, 0)
    before, after = [], []
    for r in range(searches):
        before.append(_search(steady, qs, users, r + 1))
        after.append(_search(paused, qp, users, r + 1))
    med = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    return {"device": device, "ads_paused": n_pause, "first_pause_ms": round(first * 1e3, 2),
            "pause_ms": round(med(pause_s), 2), "resume_ms": round(med(resume_s), 2),
            "search_ms_no_pause": round(med(before), 3), "search_ms_paused": round(med(after), 3),
            "search_ratio": round(statistics.median(after) / statistics.median(before), 3)}


def markdown(r: dict) -> str:
    lines = [f"# Paused ads ({r['date']})", "",
             f"Machine: {r['machine']['cpu']}, {r['machine']['cores']} cores; GPU: {r['gpu'] or 'none'}.  ",
             f"Command: `{r['command']}`.  ",
             f"Index: {r['sids']:,} SIDs, {r['ads']:,} ads; searches: B={B}, beams {SIZES}, GTM and post-filter.", "",
             "| device | ads paused | first pause ms | pause ms | resume ms | search ms, none paused | "
             "search ms, paused | ratio |", "|" + "---|" * 8]
    for x in r["rows"]:
        lines.append(f"| {x['device']} | {x['ads_paused']:,} | {x['first_pause_ms']} | {x['pause_ms']} | "
                     f"{x['resume_ms']} | {x['search_ms_no_pause']} | {x['search_ms_paused']} | {x['search_ratio']} |")
    lines += ["", "first pause: makes the paused-ad state (active-ad counts per node; on the GPU their upload). "
              "pause / resume: median of rounds over a fresh random choice of ads. ratio: median search with the "
              "ads paused over the median search on a matcher that never paused, interleaved rounds."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    index_options(ap)
    ap.add_argument("--pause", type=int, default=100_000, help="ads paused at once")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--searches", type=int, default=7)
    ap.add_argument("--devices", default="auto", help="cpu, cuda or auto (cpu, and cuda when CuPy sees a GPU)")
    args = ap.parse_args()
    idx = ensure_index(Path(args.workdir), args.ads)
    devices = ["cpu"] + (["cuda"] if cuda_available() else []) if args.devices == "auto" else args.devices.split(",")
    rows = []
    for device in devices:
        rows.append(run_device(idx, device, args.pause, args.rounds, args.searches))
        log(json.dumps(rows[-1]))
    gpu = gpu_name() if "cuda" in devices else None
    result = {"benchmark": "pause", "date": time.strftime("%Y-%m-%d"), "machine": machine(), "gpu": gpu,
              "command": "python " + " ".join(sys.argv), "sids": idx.num_sids, "ads": idx.num_ads, "rows": rows}
    js, md = result_paths(args.out, "pause", args.host, gpu or "")
    js.write_text(json.dumps(result, indent=1))
    md.write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
