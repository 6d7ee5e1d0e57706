"""Catalog updates and index swaps under load, on the ~10M-SID index, side by side in one run:

- a full build of the catalog (in a child process), then `Matcher.update_ads` of 1% of its ads (half edits of
  targeting, half new ads on existing SIDs) and `gtmkit update`'s write of the result: their seconds over the
  build's;
- the whole 4-step search with post-filter before and after the update (interleaved rounds, median): the ratio;
- a stream of whole searches from one thread, steady, then while another thread swaps the matcher every quarter
  second between two loads of the index (each swap builds the new matcher beside the old): p99 latency during
  swaps over the steady p99, and failed calls (must be none).

    python benchmarks/update.py --workdir /tmp/gtmkit-stepcpu --out benchmarks/results

The index is step_cpu.py's (15M synthetic ads, static partitions, cached in --workdir). Writes
benchmarks/results/update_<host>.json and .md."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import gtmkit  # noqa: E402
from gtmkit.indexer.update.write import write_updated  # noqa: E402
from gtmkit.matcher.matcher import Matcher  # noqa: E402
from gtmkit.synth import synth_users  # noqa: E402
from gtmkit.synth.logits import SyntheticDecoder  # noqa: E402

from _common import machine, result_paths  # noqa: E402
from step_cpu import catalog_path, ensure_index, index_options, log  # noqa: E402

SIZES = (1, 512, 1024, 1024)
B = 16


def changes_table(catalog: Path, share: float, seed: int) -> pa.Table:
    """share of the catalog's ads changed: half of them edited (another ad's targeting on their own SID), half
    new ads (fresh ids) on the SIDs of random ads."""
    t = pq.read_table(catalog)
    rng = np.random.default_rng(seed)
    n = int(t.num_rows * share) // 2
    edited = rng.choice(t.num_rows, n, replace=False)
    donors = rng.choice(t.num_rows, 2 * n)
    ids = t.column("ad_id").to_numpy()
    new_ids = np.int64(ids.max()) + 1 + np.arange(n, dtype=np.int64)
    cols = {}
    for name in t.column_names:
        if name == "ad_id":
            cols[name] = pa.concat_arrays([pa.array(ids[edited]), pa.array(new_ids)])
        elif name == "sid":
            cols[name] = pa.concat_arrays([t.column(name).take(edited).combine_chunks(),
                                           t.column(name).take(donors[n:]).combine_chunks()])
        else:
            cols[name] = t.column(name).take(donors).combine_chunks()
    return pa.table(cols, schema=t.schema)


def _timed_build(catalog: Path, out: Path) -> float:
    t = time.perf_counter()
    gtmkit.build_index(catalog, out, partition="static", k=[1, 4, 4, 2])
    return time.perf_counter() - t


def _build_in_child(catalog: Path, out: Path) -> float:
    """The full build's seconds, in a child process as an offline build runs: the serving process that updates
    then starts from a load of the artifact, not from the memory a build just churned through."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_timed_build, catalog, out).result()


def _warm_up(catalog: Path, tmp: Path) -> None:
    """An update of a small index made of the catalog's first rows: compiles every kernel an update runs, so
    that no compile time is timed."""
    small = tmp / "small.parquet"
    pq.write_table(pq.read_table(catalog).slice(0, 20_000), small)
    shutil.copy(catalog.with_suffix(".schema.json"), small.with_suffix(".schema.json"))
    idx = gtmkit.build_index(small, tmp / "small-idx", partition="static", k=[1, 4, 4, 2])
    pq.write_table(changes_table(small, 0.05, 4), tmp / "small-changes.parquet")
    Matcher(idx).update_ads(tmp / "small-changes.parquet")


def _search(m, q, users, seed: int) -> float:
    t = time.perf_counter()
    gtmkit.beam_search(m, q, SyntheticDecoder(users, m.index.vocab_size, "peaked", seed), SIZES, gtm=True,
                       postfilter=True)
    return time.perf_counter() - t


def searches_before_after(idx, updated, rounds: int) -> dict:
    users = synth_users(idx.manifest["schema"], B, seed=11)
    before, after = Matcher(idx), Matcher(updated)
    qb, qa = before.batch([idx.encode_request(u) for u in users]), after.batch([updated.encode_request(u) for u in users])
    _search(before, qb, users, 0), _search(after, qa, users, 0)
    tb, ta = [], []
    for r in range(rounds):
        tb.append(_search(before, qb, users, r + 1))
        ta.append(_search(after, qa, users, r + 1))
    return {"search_ms_before": round(statistics.median(tb) * 1e3, 2),
            "search_ms_after": round(statistics.median(ta) * 1e3, 2),
            "search_ratio": round(statistics.median(ta) / statistics.median(tb), 3)}


def swap_stream(path: Path, seconds: float, interval: float) -> dict:
    """One thread searching back to back: `seconds` of steady stream, then `seconds` in which the matcher is
    swapped every `interval` seconds (to a fresh load of the index and back), the stream running on. -> p99 of
    each phase, seconds a swap took, failed calls."""
    a, b = gtmkit.load_index(path, verify=False), gtmkit.load_index(path, verify=False)
    m = Matcher(a)
    users = synth_users(a.manifest["schema"], B, seed=12)
    phase = ["steady"]
    lat = {"steady": [], "swapping": []}
    errors = []
    stop = threading.Event()

    def stream():
        i = 0
        while not stop.is_set():
            i += 1
            cur = m.current()
            try:
                q = cur.batch([cur.index.encode_request(u) for u in users])
                t = time.perf_counter()
                gtmkit.beam_search(cur, q, SyntheticDecoder(users, cur.index.vocab_size, "peaked", i), SIZES)
                lat[phase[0]].append(time.perf_counter() - t)
            except Exception as exc:  # counted: the target is none
                errors.append(repr(exc))

    th = threading.Thread(target=stream)
    th.start()
    time.sleep(seconds)
    phase[0] = "swapping"
    took, k = [], 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        m.swap(b if k % 2 == 0 else a)
        took.append(time.perf_counter() - t0)
        k += 1
        time.sleep(max(0.0, interval - took[-1]))
    stop.set()
    th.join()
    p99 = {k: float(np.percentile(v, 99)) * 1e3 for k, v in lat.items() if v}
    return {"searches_steady": len(lat["steady"]), "searches_swapping": len(lat["swapping"]), "swaps": len(took),
            "p99_ms_steady": round(p99.get("steady", 0), 2), "p99_ms_swapping": round(p99.get("swapping", 0), 2),
            "p99_ratio": round(p99.get("swapping", 0) / p99["steady"], 3) if p99.get("steady") else None,
            "seconds_per_swap": round(float(np.median(took)), 3), "failed_calls": len(errors)}


def markdown(r: dict) -> str:
    u, s = r["update"], r["swap"]
    return "\n".join([
        f"# Catalog updates and swaps ({r['date']})", "",
        f"Machine: {r['machine']['cpu']}, {r['machine']['cores']} cores.  ",
        f"Command: `{r['command']}`.  ",
        f"Index: {r['sids']:,} SIDs, {r['ads']:,} ads, static partitions; searches: B={B}, beams {SIZES}, GTM and "
        "post-filter.", "",
        "| full build s | ads changed | edited | added | unions grown | update_ads s | update / build | write s | "
        "(update + write) / build |", "|" + "---|" * 9,
        f"| {u['build_s']} | {u['changed']:,} | {u['edited']:,} | {u['added']:,} | {u['unions_grown']:,} | "
        f"{u['update_s']} | {u['update_over_build']} | {u['write_s']} | {u['update_write_over_build']} |", "",
        "| search ms before | search ms after | ratio |", "|---|---|---|",
        f"| {u['search_ms_before']} | {u['search_ms_after']} | {u['search_ratio']} |", "",
        "| searches steady | searches while swapping | swaps | p99 ms steady | p99 ms swapping | ratio | s per swap "
        "| failed calls |", "|" + "---|" * 8,
        f"| {s['searches_steady']} | {s['searches_swapping']} | {s['swaps']} | {s['p99_ms_steady']} | "
        f"{s['p99_ms_swapping']} | {s['p99_ratio']} | {s['seconds_per_swap']} | {s['failed_calls']} |", "",
        "update_ads: read and validate the changes, derive the updated index (merge of the SID->ad map and ad "
        "index, unions grown on each changed ad's path), make its matcher. write: `gtmkit update`'s new artifact "
        "version. The search ratio is the median whole search on the updated index over the one before, "
        "interleaved rounds. Swaps: one thread searching back to back, then as long again while the matcher is "
        "swapped every --swap-interval seconds between two loads of the index, each swap building the new matcher "
        "beside the old.", ""])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    index_options(ap)
    ap.add_argument("--share", type=float, default=0.01, help="ads changed, as a share of the catalog")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stream-seconds", type=float, default=10.0)
    ap.add_argument("--swap-interval", type=float, default=0.25)
    args = ap.parse_args()
    work = Path(args.workdir)
    idx = ensure_index(work, args.ads)
    catalog = catalog_path(work, args.ads)
    tmp = Path(tempfile.mkdtemp(prefix="gtmkit-update-", dir=work))
    try:
        build_s = _build_in_child(catalog, tmp / "idx")
        log(f"full build: {build_s:.1f} s")
        changes = tmp / "changes.parquet"
        pq.write_table(changes_table(catalog, args.share, 3), changes)
        _warm_up(catalog, tmp)
        os.sync()  # the build's files on disk first: an update reads an artifact at rest, not one being written back
        base = gtmkit.load_index(tmp / "idx", verify=False)
        m = Matcher(base)
        t = time.perf_counter()
        rep = m.update_ads(changes)
        update_s = time.perf_counter() - t
        updated = m.current().index
        log(f"update_ads: {update_s:.2f} s {rep.as_dict()}")
        t = time.perf_counter()
        write_updated(updated)
        write_s = time.perf_counter() - t
        u = {"build_s": round(build_s, 2), "changed": rep.edited + rep.added, "edited": rep.edited,
             "added": rep.added, "unions_grown": rep.unions_grown, "update_s": round(update_s, 3),
             "update_over_build": round(update_s / build_s, 4), "write_s": round(write_s, 3),
             "update_write_over_build": round((update_s + write_s) / build_s, 4),
             **searches_before_after(base, updated, args.rounds)}
        log(json.dumps(u))
        del m, updated, base
        s = swap_stream(tmp / "idx", args.stream_seconds, args.swap_interval)
        log(json.dumps(s))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"benchmark": "update", "date": time.strftime("%Y-%m-%d"), "machine": machine(),
              "command": "python " + " ".join(sys.argv), "sids": idx.num_sids, "ads": idx.num_ads,
              "update": u, "swap": s}
    js, md = result_paths(args.out, "update", args.host, "")
    js.write_text(json.dumps(result, indent=1))
    md.write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
