"""The cost of requests that follow the index (docs/design.md §9), on the demo's synthetic catalog (200k ads).

The matcher serves a rebuild of the catalog whose country domain grew by one value and whose location dictionary
gained strings; per request, for B = 1, 16 and 256 requests:

- `Index.encode_request(user)` of B users;
- `Matcher.batch` of B requests (a) encoded by the index that serves (fingerprints match: nothing is encoded again),
  (b) every one encoded by the version before the rebuild (each is encoded again from the attributes it records),
  (c) stacked by the matcher of the version before (stacked again from its requests); beside them the stacking
  alone (`stack_requests` without the fingerprint check);
- for scale, one whole search (beams 1, 512, 1024, 1024, GTM and post-filter) of B = 16 requests.

    python benchmarks/reencode.py --out benchmarks/results

Writes benchmarks/results/reencode_<host>.json and .md."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import gtmkit  # noqa: E402
from gtmkit.matcher.arrays import stack_requests  # noqa: E402
from gtmkit.matcher.matcher import Matcher  # noqa: E402
from gtmkit.synth import synth_users, write_catalog  # noqa: E402
from gtmkit.synth.logits import SyntheticDecoder  # noqa: E402

from _common import HOST_HELP, CpuWatch, machine, result_paths  # noqa: E402

SIZES = (1, 512, 1024, 1024)
BATCHES = (1, 16, 256)
PARTITION = {"partition": "static", "k": [1, 4, 4, 2]}  # the demo's
NEW_COUNTRY = "ZZ"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def versions(work: Path, ads: int, seed: int, share: float) -> tuple:
    """(old, new): the synthetic catalog's index, and the index of the catalog changed so that a request encodes
    differently: a country added to the domain and a share of the ads retargeted to it and to new location
    strings."""
    cat, schema_path = write_catalog(work / "catalog.parquet", ads, seed=seed)
    old = gtmkit.build_index(cat, work / "old", **PARTITION)
    t = pq.read_table(cat)
    schema = json.loads(Path(schema_path).read_text())
    schema["bitmask"]["country"]["domain"].append(NEW_COUNTRY)
    rng = np.random.default_rng(seed)
    moved = set(rng.choice(t.num_rows, int(t.num_rows * share), replace=False).tolist())
    country, location = t.column("country").to_pylist(), t.column("location").to_pylist()
    for i in moved:
        country[i] = [NEW_COUNTRY]
        location[i] = [f"{NEW_COUNTRY}:R{i % 50:02d}"]
    t = t.set_column(t.schema.get_field_index("country"), "country", pa.array(country, pa.list_(pa.string())))
    t = t.set_column(t.schema.get_field_index("location"), "location", pa.array(location, pa.list_(pa.string())))
    (work / "changed").mkdir()
    pq.write_table(t, work / "changed" / "catalog.parquet")
    (work / "changed" / "catalog.schema.json").write_text(json.dumps(schema))
    new = gtmkit.build_index(work / "changed" / "catalog.parquet", work / "new", **PARTITION)
    return old, new


def per_request_us(fns: dict, B: int, rounds: int, round_s: float) -> dict:
    """name -> median over rounds of the µs per request of fns[name]() (one call handles B requests). Each round
    runs every function in turn, as many calls as fill about round_s seconds, so that load from elsewhere falls on
    all of them alike."""
    calls = {}
    for name, fn in fns.items():
        fn()
        t = time.perf_counter()
        fn()
        calls[name] = max(1, int(round_s / max(time.perf_counter() - t, 1e-7)))
    out = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            n = calls[name]
            t = time.perf_counter()
            for _ in range(n):
                fn()
            out[name].append((time.perf_counter() - t) / n / B * 1e6)
    return {name: statistics.median(v) for name, v in out.items()}


def same_batch(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def search_ms(m, q, users, rounds: int) -> float:
    out = []
    for r in range(rounds + 1):
        t = time.perf_counter()
        gtmkit.beam_search(m, q, SyntheticDecoder(users, m.current().index.vocab_size, "peaked", r), SIZES)
        out.append(time.perf_counter() - t)
    return statistics.median(out[1:]) * 1e3  # the first call pays the first touch of the index's pages


def markdown(r: dict) -> str:
    cols = ("B", "encode_us", "stack_us", "fresh_us", "stale_us", "stale_batch_us", "extra_us")
    rows = ["| " + " | ".join(str(x[c]) for c in cols) + " |" for x in r["batch"]]
    extra16 = r["batch"][1]["extra_us"] * 16 / 1e3
    return "\n".join([
        f"# Requests that follow the index: re-encoding cost ({r['date']})", "",
        f"Machine: {r['machine']['cpu']}, {r['machine']['cores']} cores; while timing, this run used "
        f"{r['cpu']['ours_cores']} cores and other work {r['cpu'].get('other_cores', '?')} (1-min load average "
        f"{r['cpu']['loadavg_1m'][0]} -> {r['cpu']['loadavg_1m'][1]}).  ",
        f"Command: `{r['command']}`.  ",
        f"Index: the demo's synthetic catalog, {r['ads']:,} ads, {r['sids']:,} SIDs, static partitions. The other "
        f"version: the catalog with country {NEW_COUNTRY!r} added to the domain ({r['domain_before']} -> "
        f"{r['domain_after']} values) and {r['moved']:,} ads retargeted to it and to {r['new_strings']} location "
        f"strings the first catalog lacks; fingerprints {r['fingerprints'][0]} and "
        f"{r['fingerprints'][1]}. Users: `synth_users`.", "",
        "µs a request (median of rounds, the columns of a row measured in turn in each round): "
        "`Index.encode_request(user)` of B users, and `Matcher.batch` of B requests:", "",
        "| B | encode_request | stacking alone | fingerprints match | every request stale | "
        "batch stacked by the other version | stale - match |", "|---|---|---|---|---|---|---|", *rows, "",
        "Stacking alone: `stack_requests` without the fingerprint check, the work `batch` did before requests "
        "followed the index; the match column is the whole `Matcher.batch` call.", "",
        f"A stale request costs one encode more than a fresh one: the re-encode is the fingerprint comparison and "
        f"`encode_request` from the attributes the request records; matching fingerprints cost a string "
        f"comparison a request. For scale, a whole search of B = 16 (beams {SIZES}, GTM and post-filter) takes "
        f"{r['search16_ms']} ms here, so re-encoding 16 stale requests adds "
        f"{extra16:.2f} ms ({extra16 / r['search16_ms']:.1%})."
        f" Every stale batch stacked equal to the fresh requests' batch: {r['equal']}.", ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ads", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--share", type=float, default=0.02, help="ads retargeted to the new country and strings")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--round-seconds", type=float, default=0.2)
    ap.add_argument("--workdir", help="where the catalogs and indexes go (default: a temporary folder, removed)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gtmkit-reencode-", dir=a.workdir))
    try:
        t0 = time.perf_counter()
        old, new = versions(tmp, a.ads, a.seed, a.share)
        log(f"two builds: {time.perf_counter() - t0:.1f} s; fingerprints {old.fingerprint} {new.fingerprint}")
        if old.fingerprint == new.fingerprint:
            raise SystemExit("the changed catalog's index has the first one's fingerprint: nothing would be stale")
        users = synth_users(old.manifest["schema"], max(BATCHES), a.seed)
        stale = [old.encode_request(u) for u in users]
        fresh = [new.encode_request(u) for u in users]
        m, m_old = Matcher(new), Matcher(old)
        old_batches = {B: m_old.batch(stale[:B]) for B in BATCHES}
        equal = all(same_batch(m.batch(stale[:B]), m.batch(fresh[:B])) and
                    same_batch(m.batch(old_batches[B]), m.batch(fresh[:B])) for B in BATCHES)
        watch = CpuWatch()
        batch = []
        ix, im = new, m.current()
        for B in BATCHES:
            us, f, s, q = users[:B], fresh[:B], stale[:B], old_batches[B]
            x = {"B": B, **per_request_us({
                "encode_us": lambda: [new.encode_request(u) for u in us],
                "stack_us": lambda: stack_requests(f, len(ix.layout.names), ix.layout.words, len(ix.bloom),
                                                   im._bloom_words, im._bloom_widths),
                "fresh_us": lambda: m.batch(f), "stale_us": lambda: m.batch(s),
                "stale_batch_us": lambda: m.batch(q)}, B, a.rounds, a.round_seconds)}
            x["extra_us"] = x["stale_us"] - x["fresh_us"]
            batch.append({k: round(v, 2) if isinstance(v, float) else v for k, v in x.items()})
            log(json.dumps(batch[-1]))
        cpu = watch.stop()
        q16 = m.batch(fresh[:16])
        s16 = search_ms(m, q16, users[:16], 3)
        log(f"search of 16: {s16:.1f} ms")
        layout = [dict(zip(ix.layout.names, ix.layout.domains))["country"] for ix in (old, new)]
        result = {"benchmark": "reencode", "date": time.strftime("%Y-%m-%d"), "machine": machine(),
                  "command": "python " + " ".join(sys.argv), "ads": new.num_ads, "sids": new.num_sids,
                  "moved": int(a.ads * a.share), "domain_before": len(layout[0]), "domain_after": len(layout[1]),
                  "new_strings": len(set(new.bloom_dictionaries[0]) - set(old.bloom_dictionaries[0])),
                  "fingerprints": [old.fingerprint, new.fingerprint], "equal": equal,
                  "batch": batch, "search16_ms": round(s16, 1), "cpu": cpu}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    js, md = result_paths(a.out, "reencode", a.host, "")
    js.write_text(json.dumps(result, indent=1) + "\n")
    md.write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
