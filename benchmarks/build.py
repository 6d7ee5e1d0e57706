"""Offline build benchmark: gtmkit build of 1M / 10M / 30M-SID synthetic catalogs, side by side with
marisa-trie building the bare trie of the same SIDs (fixed-width bytes) in the same run.

    python benchmarks/build.py --sids 1000000,10000000,30000000 --workdir /tmp/gtmkit-bench

Each build runs in a fresh child process so its peak RSS is its own. Writes
benchmarks/results/build_<host>.json and .md (host: cpuN, --host)."""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # gtmkit from this checkout when it is not installed

from _common import HOST_HELP, child, machine, result_paths  # noqa: E402
ROOT = HERE.parent

CHILD_BUILD = r"""
import json, resource, sys, time
import gtmkit
catalog, out, partition, k = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
kw = {"partition": partition}
if partition == "static":
    kw["k"] = [int(x) for x in k.split(",")]
elif partition == "dynamic":
    kw.update(target_fill=0.4, k_max=8)
t = time.perf_counter()
idx = gtmkit.build_index(catalog, out, overwrite=True, **kw)
wall = time.perf_counter() - t
s = idx.stats()
print(json.dumps({"wall_s": wall, "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "stats": s}))
"""

CHILD_TRIES = r"""
import json, resource, sys, time
import numpy as np, pyarrow.parquet as pq
import marisa_trie
from gtmkit.indexer.trie import build_trie, sort_sids
catalog, vocab = sys.argv[1], int(sys.argv[2])
col = pq.read_table(catalog, columns=["sid"]).column("sid").combine_chunks()
L = len(col[0])
sids = col.values.to_numpy().astype(np.int32).reshape(-1, L)
unique, _ = sort_sids(sids, vocab)          # the SID set both sides get
del col, sids
t = time.perf_counter(); tb = build_trie(unique, vocab); ours = time.perf_counter() - t
topo = tb.node_offsets.nbytes + tb.child_tokens.nbytes + tb.level_offsets.nbytes
width = 2 if vocab <= 1 << 16 else 4
keys = [bytes(r) for r in unique.astype(">u2" if width == 2 else ">u4")]   # marisa's natural input
t = time.perf_counter(); trie = marisa_trie.BinaryTrie(keys); theirs = time.perf_counter() - t
assert len(trie) == len(unique)
print(json.dumps({"sids": int(len(unique)), "ours_trie_s": ours, "ours_topology_bytes": int(topo),
                  "marisa_s": theirs, "marisa_bytes": len(trie.tobytes()),
                  "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sids", default="1000000,10000000,30000000")
    ap.add_argument("--ads-per-sid", type=float, default=1.5)
    ap.add_argument("--partition", default="static", choices=["none", "static", "dynamic"])
    ap.add_argument("--k", default="1,4,4,2")
    ap.add_argument("--workdir", default="/tmp/gtmkit-bench")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--keep", action="store_true", help="keep the indexes")
    ap.add_argument("--host", help=HOST_HELP)
    args = ap.parse_args()

    from gtmkit.synth import write_catalog

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in [int(x) for x in args.sids.split(",")]:
        cat = work / f"catalog_{n}.parquet"
        if not cat.exists():
            t = time.perf_counter()
            write_catalog(cat, int(n * args.ads_per_sid), seed=1)
            print(f"synth {n:,} SIDs: {time.perf_counter() - t:.1f} s", file=sys.stderr)
        b = child(CHILD_BUILD, cat, work / f"index_{n}", args.partition, args.k)
        m = child(CHILD_TRIES, cat, 512)
        s = b["stats"]
        row = {
            "target_sids": n, "sids": s["sids"], "ads": s["ads"], "build_s": round(b["wall_s"], 2),
            "phases_s": s["build_seconds"], "peak_rss_gib": round(b["peak_rss_gib"], 2),
            "bytes": s["bytes"], "tables": s["tables"],
            "topology_mb_per_1m_sids": round(s["topology_bytes_per_million_sids"] / 1e6, 2),
            "ours_trie_s": round(m["ours_trie_s"], 3), "marisa_s": round(m["marisa_s"], 3),
            "marisa_bytes": m["marisa_bytes"], "ours_topology_bytes": m["ours_topology_bytes"],
            "build_over_marisa": round(b["wall_s"] / m["marisa_s"], 2),
            "marisa_over_our_trie": round(m["marisa_s"] / m["ours_trie_s"], 2),
        }
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("bytes", "tables", "phases_s")}), file=sys.stderr)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(work / f"index_{n}")])

    result = {"benchmark": "build", "date": datetime.date.today().isoformat(), "machine": machine(),
              "command": "python " + " ".join(sys.argv), "partition": args.partition,
              "k": args.k if args.partition == "static" else None, "rows": rows}
    js, md = result_paths(args.out, "build", args.host)
    js.write_text(json.dumps(result, indent=1))
    md.write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [f"# Index build ({r['date']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}.  ",
             f"Command: `{r['command']}`; partition {r['partition']} {r['k'] or ''}.", "",
             "| SIDs | ads | build s | peak GiB | read | trie | rows | partitions | dedup | ad index | write "
             "| total MB | topology MB/1M SIDs | our trie s | marisa s | marisa/ours trie | build/marisa "
             "| topology MB | marisa MB |",
             "|" + "---|" * 19]
    for x in r["rows"]:
        p = x["phases_s"]
        lines.append(
            f"| {x['sids']:,} | {x['ads']:,} | {x['build_s']:.1f} | {x['peak_rss_gib']:.2f} | "
            + " | ".join(f"{p.get(k, 0):.1f}" for k in ("read", "trie", "rows", "partitions", "dedup", "ad index", "write"))
            + f" | {x['bytes']['total'] / 1e6:,.0f} | {x['topology_mb_per_1m_sids']:.2f} | {x['ours_trie_s']:.2f} | "
            f"{x['marisa_s']:.2f} | {x['marisa_over_our_trie']:.1f}x | {x['build_over_marisa']:.2f}x | "
            f"{x['ours_topology_bytes'] / 1e6:,.1f} | {x['marisa_bytes'] / 1e6:,.1f} |")
    lines += ["", "build/marisa: our whole build (all matchers, SID->ad map, ad index, checksummed write) over "
              "marisa-trie's bare trie of the same SIDs; marisa/ours trie: marisa-trie's time over our trie "
              "phase (sorted SIDs -> CSR) on the same SIDs."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
