"""The demo's first run: `gtmkit demo` with an empty numba cache (cold: compiles every kernel it uses) and then
warm, for this checkout and, side by side in the same run, a baseline revision (--baseline, checked out in a
temporary git worktree). Runs alternate between the sides; each run is a fresh process with a fresh cache folder.
Writes benchmarks/results/first_run_<host>.{json,md}."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _common import HOST_HELP, machine, result_paths  # noqa: E402


def demo_seconds(src: Path, cache: Path) -> float:
    """Wall seconds of `python -m gtmkit demo -s` from the package at src, with the numba cache at cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(PYTHONPATH=str(src), NUMBA_CACHE_DIR=str(cache))
    with tempfile.TemporaryDirectory() as cwd:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "gtmkit", "demo", "-s", "--device", "cpu"], cwd=cwd, env=env,
                           capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"demo failed at {src}:\n{r.stderr[-2000:]}")
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="a git revision to compare with (e.g. HEAD~5)")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)
    args = ap.parse_args()
    sides = {"this checkout": ROOT}
    tmp = Path(tempfile.mkdtemp(prefix="gtmkit-first-run-"))
    if args.baseline:
        wt = tmp / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), args.baseline], check=True,
                       capture_output=True)
        sides[f"baseline {args.baseline}"] = wt
    times = {name: {"cold": [], "warm": []} for name in sides}
    try:
        for run in range(args.runs):
            for name, src in sides.items():
                cache = tmp / f"cache-{run}-{len(times[name]['cold'])}-{abs(hash(name))}"
                times[name]["cold"].append(demo_seconds(src, cache))
                times[name]["warm"].append(demo_seconds(src, cache))
                print(name, run, times[name]["cold"][-1], times[name]["warm"][-1], flush=True)
    finally:
        if args.baseline:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "baseline")],
                           capture_output=True)
    result = {"benchmark": "first_run", "date": datetime.date.today().isoformat(),
              "command": "python " + " ".join(sys.argv), "machine": machine(),
              "sides": {n: {k: {"runs": v, "median": statistics.median(v)} for k, v in t.items()}
                        for n, t in times.items()}}
    js, md = result_paths(args.out, "first_run", args.host)
    js.write_text(json.dumps(result, indent=1))
    lines = [f"# The demo's first run ({result['date']}, {result['machine']['cpu']}, {result['machine']['cores']} cores)",
             "", f"Command: `{result['command']}`. `gtmkit demo -s --device cpu` (200,000 ads), each run a fresh "
             "process; cold: an empty numba cache; warm: the same cache again. Seconds, median of the runs.", "",
             "| side | cold s | warm s | runs (cold) |", "|---|---|---|---|"]
    for n, t in result["sides"].items():
        lines.append(f"| {n} | {t['cold']['median']:.1f} | {t['warm']['median']:.1f} | "
                     f"{', '.join(f'{x:.1f}' for x in t['cold']['runs'])} |")
    lines += ["", "Targets: cold <= 30 s, warm <= 10 s (2 cores)."]
    md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
