"""Sharded build benchmark: `gtmkit build --workers N` of a partitioned synthetic catalog and `gtmkit trie build
--workers N` of partitioned synthetic keys, next to the single-process builds of the same inputs where they fit
this machine, in one run.

    python benchmarks/build_sharded.py --ads 15000000,45000000,150000000 --single 15000000,45000000 --workers 2
    python benchmarks/build_sharded.py --ads "" --keys 10000000,100000000 --single-keys 10000000
    python benchmarks/build_sharded.py --ads 15000000,45000000 --single "" --cluster --before /tmp/gtmkit-before

--cluster: instead of --workers (a LocalCluster), a scheduler and N `dask worker` processes started here, each in a
folder of its own, and two builds on it: "shared disk" (the catalog on this machine's disk, the pieces between
phases in files there: --staging) and "no shared disk" (the catalog in a local S3-API server, moto's, in a process
of its own, the pieces moving through Dask). --before DIR: also the shared-disk build of the code in DIR (a `git
archive` of an earlier commit's gtmkit/), on a cluster of that code, as it built before pieces moved through Dask.

Each build runs as the CLI in a fresh process; a sampler reads the resident memory of that process and of every
process below it (the Dask workers) every 0.2 s and keeps each one's peak: "summed peak" adds those peaks (an
upper bound of what the build held at once); "driver" is the CLI process's own peak. Catalogs are made once with `gtmkit synth catalog --parts`.
Writes benchmarks/results/build_sharded_<host>.json and .md."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import HOST_HELP, machine, result_paths  # noqa: E402


def run_sampled(cmd: list, env: dict = None, also: list = (), cwd=None, server: int = None) -> dict:
    """Runs cmd; (wall s, per-process peak RSS GiB summed, the largest one, the CLI's own, processes seen, the
    1-minute load average before it, the CPU seconds the machine spent meanwhile outside the build, stdout). also:
    more process ids sampled with it (an external cluster's, and their children); server: the S3 server's process,
    whose CPU seconds during the run are reported (not its memory: it is no part of the build)."""
    import psutil

    load = round(os.getloadavg()[0], 2)
    busy = (lambda: sum(psutil.Process(server).cpu_times()[:2])) if server else (lambda: 0.0)
    machine = lambda: sum(psutil.cpu_times()[:3])  # noqa: E731  user, nice, system of every core
    me = lambda: sum(psutil.Process().cpu_times()[:2])  # noqa: E731  this process: the sampling
    used = lambda p: sum(p.cpu_times()[:4])  # noqa: E731  a process's own and its waited-for children's
    before = {}  # the CPU seconds of the processes there before the build (an external cluster's): not the build's
    for root in also:
        for p in [psutil.Process(root), *psutil.Process(root).children(recursive=True)]:
            before[p.pid] = used(p)
    cpu0, all0, me0 = busy(), machine(), me()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    peaks, cpu, done = {}, {}, threading.Event()

    def sample():
        roots = [psutil.Process(proc.pid)] + [psutil.Process(p) for p in also]
        while not done.is_set():
            for root in roots:
                try:
                    for p in [root, *root.children(recursive=True)]:
                        try:
                            peaks[p.pid] = max(peaks.get(p.pid, 0), p.memory_info().rss)
                            cpu[p.pid] = used(p) - before.get(p.pid, 0.0)
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
    # the machine's CPU seconds meanwhile less the build's (its processes' as last sampled), the S3
    # server's and this process's: another workload's share of the cores during the build
    server_s = busy() - cpu0
    other = machine() - all0 - sum(cpu.values()) - server_s - (me() - me0)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return {"wall_s": round(wall, 1), "summed_peak_gib": round(sum(peaks.values()) / 2**30, 2),
            "largest_peak_gib": round(max(peaks.values()) / 2**30, 2),
            "driver_peak_gib": round(peaks.get(proc.pid, 0) / 2**30, 2), "processes": len(peaks),
            "load_before": load, "other_cpu_s": round(max(0.0, other), 1),
            **({"s3_server_cpu_s": round(server_s, 1)} if server else {}), "stdout": out}


class Cluster:
    """A scheduler and `workers` worker processes (nannies) started here, each worker in a folder of its own."""

    def __init__(self, home: Path, workers: int, memory_limit, env: dict):
        import shutil
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        py = [sys.executable, "-m"]
        self.procs = [subprocess.Popen(py + ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                                             "--dashboard-address", ":0", "--scheduler-file", "s.json"], cwd=home,
                                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        while not (home / "s.json").exists():
            time.sleep(0.1)
        time.sleep(0.2)
        self.address = json.loads((home / "s.json").read_text())["address"]
        for w in range(workers):
            d = home / f"worker-{w}"
            d.mkdir()
            self.procs.append(subprocess.Popen(
                py + ["distributed.cli.dask_worker", self.address, "--nthreads", "1", "--no-dashboard",
                      "--local-directory", str(d), "--memory-limit", memory_limit or "auto",
                      "--nworkers", "1"], cwd=d, env={**env, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        import distributed
        with distributed.Client(self.address, timeout=30) as c:
            c.wait_for_workers(workers, timeout=120)

    def pids(self) -> list:
        return [p.pid for p in self.procs]

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


S3_SERVER = """
import sys
from moto.server import ThreadedMotoServer
import logging
logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print("%s:%d" % server.get_host_and_port(), flush=True)
sys.stdin.read()  # until the benchmark closes its end (or exits)
server.stop()
"""


class S3Server:
    """moto's S3-API server in a process of its own (not this one: the builds' processes reach it over HTTP while
    this process only samples them); env: the AWS_* variables its clients read."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", S3_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        where = self.proc.stdout.readline().strip()
        if not where:
            raise SystemExit("the S3 server did not start")
        self.env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{where}",
                    "AWS_EC2_METADATA_DISABLED": "true"}

    def pid(self) -> int:
        return self.proc.pid

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def upload(cat: Path, env: dict, bucket: str) -> str:
    """The catalog folder's files put into the bucket (with its schema beside it); its URL."""
    import pyarrow.fs as pafs
    fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                           endpoint_override=env["AWS_ENDPOINT_URL"], allow_bucket_creation=True)
    fs.create_dir(bucket)
    pafs.copy_files(str(cat), f"{bucket}/{cat.name}", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    schema = cat.with_name(cat.name + ".schema.json")
    if schema.exists():
        pafs.copy_files(str(schema), f"{bucket}/{schema.name}", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
    return f"s3://{bucket}/{cat.name}"


def cluster_rows(args, work: Path, cat: Path, base: list, gtmkit: list) -> list:
    """The shared-disk and no-shared-disk builds of cat on a cluster started here (and --before's)."""
    rows = []
    env0 = dict(os.environ)
    with S3Server() as s3:
        env = {**env0, **s3.env}
        runs = []
        if args.before:
            runs.append(("shared disk, before", {**env, "PYTHONPATH": args.before}, str(cat), []))
        runs.append(("shared disk", env, str(cat), ["--staging", str(work / "staging")]))
        t = time.perf_counter()
        url = upload(cat, env, "gtmkit-bench")
        upload_s = round(time.perf_counter() - t, 1)
        runs.append(("no shared disk", env, url, []))
        for how, e, source, extra in runs:
            c = Cluster(work / "cluster", args.workers, args.memory_limit, e)
            try:
                cmd = gtmkit + ["build", source] + base[2:] + ["-o", str(work / "index_cluster"), "--scheduler",
                                                               c.address] + extra
                # not this folder: -m would import its gtmkit first
                r = run_sampled(cmd, e, c.pids(), cwd=work, server=s3.pid() if source == url else None)
            finally:
                c.close()
            s = json.loads(r.pop("stdout"))
            rows.append({"ads": s["ads"], "sids": s["sids"], "how": how, **r, "shards": s.get("shards", 1),
                         "phases_s": s["build_seconds"], "artifact_bytes": s["bytes"]["total"],
                         "build_bytes_per_sid": round(r["summed_peak_gib"] * 2**30 / s["sids"], 1),
                         "upload_s": upload_s if how == "no shared disk" else None})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "phases_s"}), file=sys.stderr)
            subprocess.run(["rm", "-rf", str(work / "index_cluster"), str(work / "staging")])
    return rows


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
    ap.add_argument("--cluster", action="store_true", help="shared-disk and no-shared-disk builds on a cluster of "
                    "worker processes started here (see above) instead of --workers' LocalCluster")
    ap.add_argument("--before", help="with --cluster: also the shared-disk build of the gtmkit/ in this folder")
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
        if args.cluster:
            rows += cluster_rows(args, work, cat, base, gtmkit)
            continue
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
    result["rows"] = rows + kept_rows(js, rows)
    js.write_text(json.dumps(result, indent=1))
    md.write_text(markdown(result))
    print(markdown(result))


def kept_rows(js: Path, rows: list) -> list:
    """The earlier file's rows of builds this run did not make (each keeps the date of its run)."""
    if not js.exists():
        return []
    old = json.loads(js.read_text())
    made = {(x.get("ads", x.get("keys")), x["how"]) for x in rows}
    return [{**x, "date": x.get("date", old["date"])} for x in old["rows"]
            if (x.get("ads", x.get("keys")), x["how"]) not in made]


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [f"# Sharded index build ({r['date']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}.  ",
             f"Command: `{r['command']}`.", "",
             "| SIDs | ads | build | shards | wall s | summed peak GiB | largest process GiB | driver GiB | processes "
             "| build bytes / SID | phases s | artifact MB | load before | other CPU s | S3 server CPU s | run |",
             "|" + "---|" * 16]
    opt = lambda x, k, f: format(x[k], f) if x.get(k) is not None else "-"  # noqa: E731
    for x in sorted((x for x in r["rows"] if "ads" in x), key=lambda x: x["ads"]):
        phases = ", ".join(f"{k} {v:.0f}" for k, v in x["phases_s"].items() if k != "total")
        lines.append(f"| {x['sids']:,} | {x['ads']:,} | {x['how']} | {x['shards']} | {x['wall_s']:.0f} | "
                     f"{x['summed_peak_gib']:.2f} | {x['largest_peak_gib']:.2f} | {opt(x, 'driver_peak_gib', '.2f')} | "
                     f"{x['processes']} | {x['build_bytes_per_sid']:.0f} | {phases} | {x['artifact_bytes'] / 1e6:,.0f} "
                     f"| {opt(x, 'load_before', '.2f')} | {opt(x, 'other_cpu_s', '.0f')} | "
                     f"{opt(x, 's3_server_cpu_s', '.0f')} | "
                     f"{x.get('date', r['date'])} |")
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
              f"{r['workers']} (a LocalCluster), shards chosen from the memory limit. shared disk / no shared disk: "
              "--scheduler of a scheduler and that many `dask worker` processes started by the benchmark, each in a "
              "folder of its own; shared disk reads the local catalog and keeps the pieces between phases in files "
              "(--staging on this disk), no shared disk reads the catalog from a local S3-API server (moto, in a "
              "process of its own on the same cores; its CPU seconds during the build are the S3 server column) and "
              "moves the pieces through Dask; \"before\": the shared-disk build of the code before pieces moved "
              "through Dask. driver: the CLI process's peak. load before: the 1-minute load average as the build "
              "started; other CPU s: the CPU seconds the machine spent during the build outside it, the S3 server and "
              "the benchmark: another workload's share of the cores (the kernel's writeback of files the build "
              "wrote counts here too). run: the date of the run that made the row. verify: `gtmkit trie verify` of "
              "the sharded build (checksums and every invariant, in one process). synth: `gtmkit synth keys --parts "
              "--workers 2` when the run made the keys."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
