"""Sharded build benchmark: `gtmkit build --workers N` of a partitioned synthetic catalog and `gtmkit trie build
--workers N` of partitioned synthetic keys, next to the single-process builds of the same inputs where they fit
this machine, in one run.

    python benchmarks/build_sharded.py --ads 15000000,45000000,150000000 --single 15000000,45000000 --workers 2
    python benchmarks/build_sharded.py --ads "" --keys 10000000,100000000 --single-keys 10000000

Each build runs as the CLI in a fresh process; a sampler reads the resident memory of that process and of every
process below it (the Dask workers) every 0.2 s and keeps each one's peak: "summed peak" adds those peaks (an
upper bound of what the build held at once). Catalogs are made once with `gtmkit synth catalog --parts`.
Writes benchmarks/results/build_sharded_<host>.json and .md."""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import HOST_HELP, machine, result_paths  # noqa: E402


def run_sampled(cmd: list) -> dict:
    """Runs cmd; (wall s, per-process peak RSS GiB summed, the largest one, processes seen, stdout)."""
    import psutil

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peaks, done = {}, threading.Event()

    def sample():
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                for p in [root, *root.children(recursive=True)]:
                    try:
                        peaks[p.pid] = max(peaks.get(p.pid, 0), p.memory_info().rss)
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            time.sleep(0.2)

    t = time.perf_counter()
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t
    done.set()
    th.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return {"wall_s": round(wall, 1), "summed_peak_gib": round(sum(peaks.values()) / 2**30, 2),
            "largest_peak_gib": round(max(peaks.values()) / 2**30, 2), "processes": len(peaks), "stdout": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ads", default="15000000,45000000,150000000", help="catalog sizes (ads; ~1.5 ads a SID)")
    ap.add_argument("--single", default="15000000,45000000", help="sizes also built by the single process")
    ap.add_argument("--keys", default="", help="trie key counts (gtmkit synth keys --parts)")
    ap.add_argument("--single-keys", default="", help="key counts also built by the single process")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default=None, help="--memory-limit of the sharded builds")
    ap.add_argument("--partition", default="static")
    ap.add_argument("--k", default="1,4,4,2")
    ap.add_argument("--workdir", default="/tmp/gtmkit-bench-sharded")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)
    args = ap.parse_args()

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    single = {int(x) for x in args.single.split(",") if x}
    rows = []
    gtmkit = [sys.executable, "-m", "gtmkit"]
    for n in [int(x) for x in args.ads.split(",") if x]:
        cat = work / f"catalog_{n}"
        if not cat.exists():
            subprocess.run(gtmkit + ["synth", "catalog", "--ads", str(n), "--seed", "1", "--parts",
                                     str(max(2, n // 1_000_000)), "--workers", "2", "-o", str(cat), "-s"], check=True)
        base = ["build", str(cat), "--partition", args.partition, "--k", args.k, "--force", "--json", "-s"]
        for how in (["single"] if n in single else []) + ["sharded"]:
            extra = [] if how == "single" else ["--workers", str(args.workers)] + (
                ["--memory-limit", args.memory_limit] if args.memory_limit else [])
            r = run_sampled(gtmkit + base + ["-o", str(work / f"index_{how}")] + extra)
            s = json.loads(r.pop("stdout"))
            rows.append({"ads": s["ads"], "sids": s["sids"], "how": how, **r, "shards": s.get("shards", 1),
                         "phases_s": s["build_seconds"], "artifact_bytes": s["bytes"]["total"],
                         "build_bytes_per_sid": round(r["summed_peak_gib"] * 2**30 / s["sids"], 1)})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "phases_s"}), file=sys.stderr)
        subprocess.run(["rm", "-rf", str(work / "index_single"), str(work / "index_sharded")])

    single_keys = {int(x) for x in args.single_keys.split(",") if x}
    for n in [int(x) for x in args.keys.split(",") if x]:
        keys = work / f"keys_{n}"
        synth_s = None
        if not keys.exists():
            t = time.perf_counter()
            subprocess.run(gtmkit + ["synth", "keys", "-n", str(n), "--seed", "1", "--parts",
                                     str(max(2, n // 5_000_000)), "--workers", "2", "-o", str(keys)], check=True)
            synth_s = round(time.perf_counter() - t, 1)
        for how in (["single"] if n in single_keys else []) + ["sharded"]:
            extra = [] if how == "single" else ["--workers", str(args.workers)] + (
                ["--memory-limit", args.memory_limit] if args.memory_limit else [])
            r = run_sampled(gtmkit + ["trie", "build", str(keys), "-o", str(work / f"trie_{how}"), "--force",
                                      "--json", "-s"] + extra)
            s = json.loads(r.pop("stdout"))
            rows.append({"keys": s["keys"], "nodes": s["nodes"], "how": how, **r, "trie_bytes": s["bytes"],
                         "build_bytes_per_key": round(r["summed_peak_gib"] * 2**30 / s["keys"], 1),
                         "synth_s": synth_s if how == "sharded" else None})
            if how == "sharded":  # the full check of what was built (SuccinctTrie.load(verify=True))
                v = run_sampled(gtmkit + ["trie", "verify", str(work / f"trie_{how}"), "--json"])
                assert json.loads(v.pop("stdout"))["ok"], "the built trie fails its checks"
                rows[-1].update(verify_s=v["wall_s"], verify_peak_gib=v["largest_peak_gib"])
            print(json.dumps(rows[-1]), file=sys.stderr)
        subprocess.run(["rm", "-rf", str(work / "trie_single"), str(work / "trie_sharded")])

    result = {"benchmark": "build_sharded", "date": datetime.date.today().isoformat(), "machine": machine(),
              "command": "python " + " ".join(sys.argv), "workers": args.workers, "rows": rows}
    js, md = result_paths(args.out, "build_sharded", args.host)
    js.write_text(json.dumps(result, indent=1))
    md.write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [f"# Sharded index build ({r['date']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}.  ",
             f"Command: `{r['command']}`.", "",
             "| SIDs | ads | build | shards | wall s | summed peak GiB | largest process GiB | processes "
             "| build bytes / SID | phases s | artifact MB |",
             "|" + "---|" * 11]
    for x in (x for x in r["rows"] if "ads" in x):
        phases = ", ".join(f"{k} {v:.0f}" for k, v in x["phases_s"].items() if k != "total")
        lines.append(f"| {x['sids']:,} | {x['ads']:,} | {x['how']} | {x['shards']} | {x['wall_s']:.0f} | "
                     f"{x['summed_peak_gib']:.2f} | {x['largest_peak_gib']:.2f} | {x['processes']} | "
                     f"{x['build_bytes_per_sid']:.0f} | {phases} | {x['artifact_bytes'] / 1e6:,.0f} |")
    tries = [x for x in r["rows"] if "keys" in x]
    if tries:
        lines += ["", "| keys | nodes | build | wall s | summed peak GiB | largest process GiB | processes "
                  "| build bytes / key | trie MB | trie bytes / key | verify s | verify peak GiB | synth s |",
                  "|" + "---|" * 13]
        opt = lambda x, k, f: format(x[k], f) if x.get(k) is not None else "-"  # noqa: E731
        lines += [f"| {x['keys']:,} | {x['nodes']:,} | {x['how']} | {x['wall_s']:.0f} | {x['summed_peak_gib']:.2f} | "
                  f"{x['largest_peak_gib']:.2f} | {x['processes']} | {x['build_bytes_per_key']:.0f} | "
                  f"{x['trie_bytes'] / 1e6:,.0f} | {x['trie_bytes'] / x['keys']:.2f} | {opt(x, 'verify_s', '.0f')} | "
                  f"{opt(x, 'verify_peak_gib', '.2f')} | {opt(x, 'synth_s', '.0f')} |" for x in tries]
    lines += ["", "summed peak: each process's peak resident memory (the CLI, the Dask scheduler's and workers' "
              "processes), added: an upper bound of what the build held at once. sharded: --workers "
              f"{r['workers']} (a LocalCluster), shards chosen from the memory limit. verify: `gtmkit trie verify` of "
              "the sharded build (checksums and every invariant, in one process). synth: `gtmkit synth keys --parts "
              "--workers 2` when the run made the keys."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
