"""What the trust boundary costs: load_index time of a synthetic index (10M SIDs by default) with
verify=False (digest, sizes, dtypes, shapes, O(L) cross-checks), verify=True (plus every file's sha256 and
the whole-array invariants), and the whole-array invariant checks alone.

    python benchmarks/load.py --sids 10000000 --workdir /tmp/gtmkit-bench

The catalog and index are built like benchmarks/build.py's (static partition k=1,4,4,2), reused when
present. Timings run in a fresh child process with the files in the page cache (the first, cold pass
is discarded); the median of --repeat runs is reported. Writes benchmarks/results/load_<host>.json and .md (host: cpuN, --host)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # gtmkit from this checkout when it is not installed

from _common import HOST_HELP, child, machine, result_paths  # noqa: E402

CHILD_BUILD = r"""
import json, sys, time
import gtmkit
t = time.perf_counter()
idx = gtmkit.build_index(sys.argv[1], sys.argv[2], partition="static", k=[1, 4, 4, 2], overwrite=True)
print(json.dumps({"build_s": time.perf_counter() - t, "sids": idx.num_sids, "ads": idx.num_ads,
                  "nodes": idx.num_nodes, "bytes": idx.artifact.nbytes}))
"""

CHILD_LOAD = r"""
import json, sys, time
import gtmkit
from gtmkit.artifact import index_format as fmt
from gtmkit.artifact.container import open_artifact
from gtmkit.artifact.index_checks import index_problems
path, repeat = sys.argv[1], int(sys.argv[2])

def verify_false():
    gtmkit.load_index(path, verify=False)

def verify_true():
    gtmkit.load_index(path, verify=True)

def invariants_only():
    art = open_artifact(path, fmt.FORMAT_NAME, fmt.SUPPORTED_VERSIONS, verify=False)
    t = time.perf_counter()
    assert not list(index_problems(art, full=True))
    return time.perf_counter() - t

out = {}
verify_true()  # cold pass: page cache and first calls
for name, fn in (("verify_false", verify_false), ("verify_true", verify_true), ("invariants_only", invariants_only)):
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        inner = fn()
        runs.append(inner if inner is not None else time.perf_counter() - t)
    out[name] = runs
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sids", type=int, default=10_000_000)
    ap.add_argument("--ads-per-sid", type=float, default=1.5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/gtmkit-bench")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)
    args = ap.parse_args()

    from gtmkit.synth import write_catalog

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    cat, index = work / f"catalog_{args.sids}.parquet", work / f"index_{args.sids}"
    if not cat.exists():
        write_catalog(cat, int(args.sids * args.ads_per_sid), seed=1)
    built = child(CHILD_BUILD, cat, index)
    load_before = os.getloadavg()[0]
    runs = child(CHILD_LOAD, index, args.repeat)
    med = {k: round(statistics.median(v), 3) for k, v in runs.items()}
    result = {
        "date": datetime.date.today().isoformat(), "host": machine(),
        "command": "python benchmarks/load.py " + " ".join(sys.argv[1:]),
        "index": {k: built[k] for k in ("sids", "ads", "nodes", "bytes")}, "build_s": round(built["build_s"], 1),
        "loadavg_1min_before": round(load_before, 1), "seconds_median": med, "seconds_runs": {k: [round(x, 3) for x in v] for k, v in runs.items()},
    }
    js, md_path = result_paths(args.out, "load", args.host)
    js.write_text(json.dumps(result, indent=1) + "\n")
    h = result["host"]
    gib = built["bytes"] / 2**30
    md = [
        "# load_index cost of the trust boundary (CPU)", "",
        f"{result['date']}, {h['cpu']}, {h['cores']} cores, {h['memory_gib']} GiB, Python {h['python']}.",
        f"Command: `{result['command']}`", "",
        f"Index: {built['sids']:,} SIDs, {built['ads']:,} ads, {built['nodes']:,} nodes, {gib:.2f} GiB "
        "(static partition k=1,4,4,2); files in the page cache; median of "
        f"{args.repeat} runs in one fresh process; 1-minute load average before timing {load_before:.1f} "
        "(a shared machine: figures are upper bounds).", "",
        "| load | seconds |", "|---|---|",
        f"| `load_index(verify=False)`: digest, sizes, dtypes, shapes, O(L) cross-checks | {med['verify_false']} |",
        f"| `load_index(verify=True)`: plus sha256 of every file and the whole-array invariants | {med['verify_true']} |",
        f"| the whole-array invariant checks alone | {med['invariants_only']} |", "",
    ]
    md_path.write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
