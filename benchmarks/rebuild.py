"""Shard rebuilds on the ~10M-SID index, side by side with a full build in one run: ads on SIDs the trie lacks,
added by rebuilding only the first-token subtrees they fall in (`gtmkit.rebuild_shards`, as
`gtmkit update --rebuild-shards` runs it), each in a fresh process as a command runs, with its peak RSS:

- new ads on new SIDs under 1, 5 and 51 of the 512 first tokens;
- the same 1% update as benchmarks/update.py (half edits, half new ads on known SIDs, applied in place) plus
  1,000 ads on new SIDs under one first token.

    python benchmarks/rebuild.py --workdir /tmp/gtmkit-stepcpu --out benchmarks/results

The index is step_cpu.py's (15M synthetic ads, static partitions, cached in --workdir). Each rebuild starts from
the version the previous one wrote. Writes benchmarks/results/rebuild_<host>.json and .md."""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

from _common import child, machine, result_paths  # noqa: E402
from step_cpu import catalog_path, ensure_index, index_options, log  # noqa: E402
from update import changes_table  # noqa: E402

BUILD = """import json, resource, sys, time
import gtmkit
t = time.perf_counter()
gtmkit.build_index(sys.argv[1], sys.argv[2], partition="static", k=[1, 4, 4, 2])
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps({"seconds": time.perf_counter() - t, "peak_rss_gib": rss}))
"""

REBUILD = """import json, resource, sys, time
import gtmkit
t = time.perf_counter()
new, rep = gtmkit.rebuild_shards(sys.argv[1], sys.argv[2])
s = time.perf_counter() - t
print(json.dumps({"seconds": s, "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "report": rep.as_dict() | {"new_sid_ad_ids": len(rep.new_sids)},
                  "phases": new.manifest["stats"]["build_seconds"]}))
"""


def new_sid_ads(index, catalog_table: pa.Table, n: int, tokens: int, seed: int) -> pa.Table:
    """n new ads (fresh ids, targeting of random ads) on SIDs the index lacks, under `tokens` first tokens that it
    has."""
    rng = np.random.default_rng(seed)
    firsts = rng.choice(index.children(0)[0], tokens, replace=False)
    V, L = index.vocab_size, index.sid_length
    sids = []
    while len(sids) < n:
        s = [int(firsts[len(sids) % tokens])] + rng.integers(0, V, L - 1).tolist()
        if index.find(s) < 0:
            sids.append(s)
    donors = rng.choice(catalog_table.num_rows, n)
    ids = catalog_table.column("ad_id").to_numpy()
    cols = {}
    for name in catalog_table.column_names:
        if name == "ad_id":
            cols[name] = pa.array(int(ids.max()) + 10**9 + seed * n + np.arange(n, dtype=np.int64))
        elif name == "sid":
            cols[name] = pa.array(sids, catalog_table.schema.field("sid").type)
        else:
            cols[name] = catalog_table.column(name).take(donors).combine_chunks()
    return pa.table(cols, schema=catalog_table.schema)


def markdown(r: dict) -> str:
    b = r["build"]
    rows = [f"| {c['case']} | {c['changed']:,} | {c['subtrees']} of {c['of']} | {c['rebuilt_ads']:,} | "
            f"{c['seconds']:.2f} | {c['seconds'] / b['seconds']:.3f} | {c['peak_rss_gib']:.2f} | "
            f"{' '.join(f'{k} {v:.2f}' for k, v in c['phases'].items())} |" for c in r["cases"]]
    return "\n".join([
        f"# Shard rebuilds ({r['date']})", "",
        f"Machine: {r['machine']['cpu']}, {r['machine']['cores']} cores, {r['machine']['memory_gib']} GiB.  ",
        f"Command: `{r['command']}`.  ",
        f"Index: {r['sids']:,} SIDs, {r['ads']:,} ads, static partitions k=1,4,4,2, V={r['vocab']}.  ",
        f"Full build (a fresh process): {b['seconds']:.2f} s, peak RSS {b['peak_rss_gib']:.2f} GiB.", "",
        "| case | ads changed | first-token subtrees rebuilt | ads in them | rebuild s | rebuild / build | "
        "peak RSS GiB | phases s |", "|" + "---|" * 8, *rows, "",
        "Each rebuild runs `gtmkit.rebuild_shards(index, changes)` in a fresh process (load, read the changes, "
        "apply those on known SIDs in place, build the marked subtrees, assemble and write the new version; in "
        "place, cut, subtrees, assemble, write are its phases), starting from the version the previous case "
        "wrote. The assembler's pass over the whole index and the write of every array set the floor; the "
        "rebuilt subtrees add their own build.", ""])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    index_options(ap)
    args = ap.parse_args()
    work = Path(args.workdir)
    idx = ensure_index(work, args.ads)
    catalog = catalog_path(work, args.ads)
    tmp = Path(tempfile.mkdtemp(prefix="gtmkit-rebuild-", dir=work))
    cases = []
    try:
        build = child(BUILD, catalog, tmp / "idx")
        log(f"full build: {build}")
        table = pq.read_table(catalog)
        plan = [("1,000 ads on new SIDs, 1 first token", 1000, 1, False),
                ("1,000 ads on new SIDs, 5 first tokens", 1000, 5, False),
                ("10,000 ads on new SIDs, 51 first tokens", 10000, 51, False),
                ("1% update in place + 1,000 ads on new SIDs, 1 first token", 1000, 1, True)]
        for i, (name, n, tokens, mixed) in enumerate(plan):
            cur = gtmkit.load_index(tmp / "idx", verify=False)
            changes = new_sid_ads(cur, table, n, tokens, i + 1)
            cur.close()
            if mixed:
                changes = pa.concat_tables([changes_table(catalog, 0.01, 3), changes])
            path = tmp / f"changes{i}.parquet"
            pq.write_table(changes, path)
            os.sync()
            r = child(REBUILD, tmp / "idx", path)
            rb = r["report"]["rebuilt"]
            cases.append({"case": name, "changed": changes.num_rows, "subtrees": rb["subtrees"], "of": rb["of"],
                          "rebuilt_ads": rb["ads"], "seconds": r["seconds"], "peak_rss_gib": r["peak_rss_gib"],
                          "phases": r["phases"], "report": r["report"]})
            log(json.dumps(cases[-1]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"benchmark": "rebuild", "date": time.strftime("%Y-%m-%d"), "machine": machine(),
              "command": "python " + " ".join(sys.argv), "sids": idx.num_sids, "ads": idx.num_ads,
              "vocab": idx.vocab_size, "build": build, "cases": cases}
    js, md = result_paths(args.out, "rebuild", args.host, "")
    js.write_text(json.dumps(result, indent=1))
    md.write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
