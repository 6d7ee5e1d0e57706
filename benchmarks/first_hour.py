"""A new user's first hour, measured: a fresh venv in a fresh folder with empty numba and pip caches, then in that
folder, in README order, the README's two commands (install and cold demo timed apart, the demo again warm, the
extras' install and the package tests) and every command of its ```bash blocks and every ```python block.

    python benchmarks/first_hour.py [--repo PATH] [--source head|tree] [--workdir DIR] [--skip-install-extras]

Waits for a quiet machine (1-min load average <= --load-max, checked every 30 s, at most --max-wait-min) before
it starts and again before the cold demo; runs anyway past that and says so. Writes
benchmarks/results/first_hour_<host>.{json,md}, rewritten after every step."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _common import HOST_HELP, CpuWatch, machine, result_paths  # noqa: E402

FENCE = re.compile(r"^(\s*)```([\w+-]*)\s*$")
NO_RUN = "<!-- no-run -->"
# variables that would point the child at another cache, interpreter or package tree than a new user's
DROP_ENV = ("NUMBA_CACHE_DIR", "PIP_CACHE_DIR", "PIP_NO_CACHE_DIR", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV",
            "PYTHONSTARTUP", "CONDA_PREFIX")


def readme_blocks(path: Path) -> list:
    """(line, lang, body lines, preceded by <!-- no-run -->) of every fenced block of a Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang, body = i, m.group(2), []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        i += 1
        before = next((x.strip() for x in reversed(lines[:start]) if x.strip()), "")
        out.append((start + 1, lang, body, before == NO_RUN))
    return out


def bash_commands(body: list) -> list:
    """The commands of a bash block: continuation lines joined, blank and comment-only lines dropped."""
    cmds, cur = [], ""
    for line in body:
        cur += line.rstrip()
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        if cur.strip() and not cur.strip().startswith("#"):
            cmds.append(cur.strip())
        cur = ""
    return cmds


def with_source(cmd: str, src: str) -> str:
    """The README's `.` (the checkout) replaced by src: `pip install .` and ".[extras]"."""
    cmd = re.sub(r'(["\'])\.(\[[^\]]*\])\1', lambda m: shlex.quote(src + m.group(2)), cmd)
    return re.sub(r"(?<=\s)\.(?=\s|$)", shlex.quote(src), cmd)


def skip_reason(text: str, no_extras: bool) -> str:
    """Why a README command or block is not run here ('' when it runs)."""
    if "tcp://" in text or "--scheduler" in text:
        return "needs a cluster address (--scheduler)"
    if re.search(r"""--device\s+cuda|device=["']cuda|\[gpu\]|import cupy""", text):
        return "needs a GPU"
    if no_extras and "--workers" in text:
        return "needs the dist extra (--skip-install-extras)"
    if no_extras and re.search(r"gtmkit\.integrations|import torch|\btorch\b", text):
        return "needs the hf extra (--skip-install-extras)"
    return ""


def plan(readme: Path, src: str, no_extras: bool, blocks_dir: Path, cold_repeats: int = 0) -> list:
    """Every step after the venv, in README order: dicts of section, what, command (or skip reason)."""
    blocks = readme_blocks(readme)
    first = next(b for b in blocks if b[1] in ("bash", "sh", "console"))
    two = bash_commands(first[2])
    if len(two) != 2 or "&&" not in two[0] or "&&" not in two[1]:
        raise SystemExit(f"README.md:{first[0]}: expected the two `install && run` commands, got {two}")
    install, demo = (x.strip() for x in two[0].split("&&", 1))
    extras, _tests = (x.strip() for x in two[1].split("&&", 1))
    tests = f'python -m pytest -q -m "not slow and not emu" {shlex.quote(src + "/tests/package")}'
    steps = [dict(section=f"README.md:{first[0]} first command", what="install", command=with_source(install, src)),
             dict(section=f"README.md:{first[0]} first command", what="demo, cold", command=demo),
             dict(section=f"README.md:{first[0]} first command", what="demo, warm", command=demo)]
    # the same cold demo again, each with its own empty cache: one run on a shared machine is one sample
    steps += [dict(section="cold demo again", what=f"demo, cold, again ({i + 1})", command=demo, fresh_cache=True)
              for i in range(cold_repeats)]
    if no_extras:
        steps.append(dict(section=f"README.md:{first[0]} second command", what="install, editable, no extras",
                          command=f"pip install -e {shlex.quote(src)}"))
        steps.append(dict(section=f"README.md:{first[0]} second command", what="package tests", command=tests,
                          skip="needs the test extra (--skip-install-extras)"))
    else:
        steps.append(dict(section=f"README.md:{first[0]} second command", what="install, editable, extras",
                          command=with_source(extras, src)))
        steps.append(dict(section=f"README.md:{first[0]} second command",
                          what="package tests (tests/package, not slow, not emu; the full suite is CI's)",
                          command=tests))
    for line, lang, body, no_run in blocks:
        if line == first[0] or lang not in ("bash", "sh", "python"):
            continue
        if lang == "python":
            script = blocks_dir / f"readme_{line}.py"
            script.write_text(textwrap.dedent("\n".join(body)) + "\n", encoding="utf-8")
            step = dict(section=f"README.md:{line} python block", what=f"python block, {len(body)} lines",
                        command=f"python {shlex.quote(str(script))}")
            reason = "marked <!-- no-run --> in README" if no_run else skip_reason("\n".join(body), no_extras)
            if reason:
                step["skip"] = reason
            steps.append(step)
            continue
        for cmd in bash_commands(body):
            step = dict(section=f"README.md:{line} bash block", what=cmd.split("#")[0].strip(), command=cmd)
            reason = "marked <!-- no-run --> in README" if no_run else skip_reason(cmd, no_extras)
            if reason:
                step["skip"] = reason
            steps.append(step)
    return steps


def wait_quiet(load_max: float, deadline: float, log: list, label: str) -> dict:
    """Sleep in 30 s steps while the 1-min load average is above load_max, until deadline."""
    t0, load = time.time(), os.getloadavg()[0]
    while load > load_max and time.time() < deadline:
        log.append([label, round(time.time() - t0), round(load, 2)])
        print(f"waiting for a quiet machine ({label}): load {load:.2f} > {load_max}", flush=True)
        time.sleep(min(30.0, max(deadline - time.time(), 0.0)))
        load = os.getloadavg()[0]
    return {"before": label, "waited_s": round(time.time() - t0), "load_1m": round(load, 2),
            "quiet": load <= load_max}


def run_step(step: dict, cwd: Path, env: dict, logs: Path, n: int, timeout: float) -> None:
    """Run step['command'] under bash in cwd; fills rc, seconds, load, cores of other work, last stderr line."""
    out, err = logs / f"{n:02d}.out", logs / f"{n:02d}.err"
    watch = CpuWatch()
    with open(out, "w") as fo, open(err, "w") as fe:
        # its own process group: a timeout ends the command's children (Dask workers) too
        p = subprocess.Popen(["bash", "-c", step["command"]], cwd=cwd, env=env, stdout=fo, stderr=fe,
                             preexec_fn=os.setpgrp)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout"
    w = watch.stop()
    step.update(rc=rc, seconds=w["wall_s"], loadavg_1m=w["loadavg_1m"], other_cores=w.get("other_cores"),
                log=str(err))
    if rc != 0:
        tail = [x for x in err.read_text(errors="replace").splitlines() if x.strip()] or \
               [x for x in out.read_text(errors="replace").splitlines() if x.strip()]
        # pytest's summary line counts failures; its FAILED lines name them
        named = [x.strip() for x in out.read_text(errors="replace").splitlines() if x.startswith(("FAILED ", "ERROR "))]
        parts = [f"ran past {timeout:g} s" if rc == "timeout" else "", tail[-1].strip()[:300] if tail else "",
                 "; ".join(named)[:600]]
        step["last_line"] = "; ".join(x for x in parts if x)


def status(step: dict) -> str:
    if "skip" in step:
        return "skipped"
    if "rc" not in step:
        return "not run"
    return "ok" if step["rc"] == 0 else ("timeout" if step["rc"] == "timeout" else "failed")


def write(result: dict, js: Path, md: Path) -> None:
    js.write_text(json.dumps(result, indent=1))
    r, steps = result, result["steps"]
    fig = r["figures"]
    lines = [f"# A new user's first hour ({r['date']}, {r['machine']['cpu']}, {r['machine']['cores']} cores)", "",
             f"Command: `{r['command']}`.", "",
             f"Source: {r['source']['how']} ({r['source']['commit']}). A fresh `python -m venv` (no system site "
             f"packages, Python {r['machine']['python']}) in an empty folder; the numba and pip caches empty "
             "(`XDG_CACHE_HOME` an empty folder, `NUMBA_CACHE_DIR` unset); pip as configured on this machine "
             f"({r['pip_config']}). Every step below runs in one folder, `{r['folder']}`, in README order; python "
             "blocks are saved as scripts and run by the venv's python. Instead of the README's whole test suite, "
             "the second command runs `tests/package` without the `slow` and `emu` marks (the full suite is "
             "CI's job).", "",
             f"**Install {fig.get('install_s', '-')} s, cold demo {fig.get('cold_demo_s', '-')} s (all cold runs: "
             f"{', '.join(map(str, fig.get('cold_demo_runs_s', [])))}; median {fig.get('cold_demo_median_s', '-')} s; "
             f"other work meanwhile {fig.get('cold_demo_other_cores', [])} cores), warm demo "
             f"{fig.get('warm_demo_s', '-')} s.** Steps: {r['counts']}. The cold demo runs again after the warm one, "
             "each time with a fresh empty numba cache; the README steps after them use the first cache.", "",
             "Load: " + "; ".join(f"{g['before']}: waited {g['waited_s']} s, 1-min load {g['load_1m']}"
                                  f"{'' if g['quiet'] else ' (NOT quiet: ran anyway)'}" for g in r["quiet_gates"])
             + f"; after the last step {r.get('load_after', '-')}. `other cores` is the CPU time of other work "
             "on the machine during the step, in cores.", "",
             "| # | section | step | outcome | s | load 1m before/after | other cores | note |",
             "|---|---|---|---|---|---|---|---|"]
    for i, s in enumerate(steps):
        note = s.get("skip") or s.get("last_line", "")
        if s["what"] not in s["command"]:
            note = f"`{s['command']}`" + (f"; {note}" if note else "")
        st = status(s) + (f" (rc {s['rc']})" if status(s) == "failed" else "")
        load = "/".join(str(x) for x in s.get("loadavg_1m", []))
        lines.append(f"| {i} | {s['section']} | `{s['what']}` | {st} | {s.get('seconds', '')} | {load} | "
                     f"{s.get('other_cores', '') if s.get('other_cores') is not None else ''} | "
                     f"{note.replace('|', '/')} |")
    if r.get("notes"):
        lines += ["", *[f"- {x}" for x in r["notes"]]]
    md.write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default=str(ROOT), help="the gtmkit checkout [default: this repository]")
    ap.add_argument("--source", choices=["head", "tree"], default="head",
                    help="head: a clone of the repo's committed HEAD, as a new user gets it; tree: the repo's "
                         "working tree as it is (uncommitted edits included) [default: head]")
    ap.add_argument("--workdir", help="an empty or missing folder for the venv, caches and the run [default: a "
                                      "new temporary folder]")
    ap.add_argument("--skip-install-extras", action="store_true",
                    help="a quick check: the second command installs no extras; the tests and the steps that "
                         "need an extra are skipped")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)
    ap.add_argument("--load-max", type=float, default=1.0, help="a quiet machine's 1-min load average")
    ap.add_argument("--max-wait-min", type=float, default=60.0, help="minutes to wait for a quiet machine in all")
    ap.add_argument("--step-timeout", type=float, default=1800.0, help="seconds one step may take")
    ap.add_argument("--cold-repeats", type=int, default=2,
                    help="cold demos again after the warm one, each with a fresh empty numba cache")
    ap.add_argument("--dry-run", action="store_true", help="print the steps and stop")
    args = ap.parse_args()

    repo = Path(args.repo).resolve()
    work = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="gtmkit-first-hour-"))
    if work.exists() and any(work.iterdir()):
        raise SystemExit(f"{work}: not empty; the first hour starts from an empty folder")
    venv, cache, folder, blocks, logs = (work / x for x in ("venv", "cache", "folder", "blocks", "logs"))
    for d in (cache, folder, blocks, logs):
        d.mkdir(parents=True)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "not a git checkout"
    if args.source == "head":
        src = work / "src"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(repo), str(src)], check=True)
        how = f"a clone of {repo}'s committed HEAD at `{src}`, whose path stands for the README's `.`"
    else:
        src = repo
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        how = f"the working tree `{src}` as it is{' (with uncommitted edits)' if dirty else ''}, whose path " \
              "stands for the README's `.`"
    steps = plan(src / "README.md", str(src), args.skip_install_extras, blocks, args.cold_repeats)
    if args.dry_run:
        for s in steps:
            print(f"{s['section']:40} {'SKIP ' + s['skip'] if 'skip' in s else ''} {s['command']}")
        return

    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV and not k.startswith("GTMKIT_")}
    env.update(XDG_CACHE_HOME=str(cache), VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}")
    pip_config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                                text=True).stdout.strip().replace("\n", ", ") or "no pip configuration"
    js, md = result_paths(args.out, "first_hour", args.host)
    deadline = time.time() + args.max_wait_min * 60
    gate_log: list = []
    result = {"benchmark": "first_hour", "date": datetime.date.today().isoformat(),
              "command": "python " + shlex.join(sys.argv), "machine": machine(),
              "source": {"how": how, "repo": str(repo), "commit": commit, "mode": args.source},
              "folder": str(folder), "workdir": str(work), "pip_config": pip_config,
              "quiet_gates": [], "gate_log": gate_log, "figures": {}, "counts": "", "notes": [], "steps": []}
    result["quiet_gates"].append(wait_quiet(args.load_max, deadline, gate_log, "the venv"))
    result["steps"] = [dict(section="setup", what="python -m venv (no system site packages)",
                            command=f"{shlex.quote(sys.executable)} -m venv {shlex.quote(str(venv))}"), *steps]
    figures = {"install": "install_s", "demo, cold": "cold_demo_s", "demo, warm": "warm_demo_s"}
    for n, step in enumerate(result["steps"]):
        if "skip" in step:
            continue
        step_env = env
        if step["what"].startswith("demo, cold"):
            result["quiet_gates"].append(wait_quiet(args.load_max, deadline, gate_log, f"[{n}] {step['what']}"))
        if step.get("fresh_cache"):
            step_env = dict(env, XDG_CACHE_HOME=str(work / f"cache-{n}"))
        print(f"[{n}] {step['command']}", flush=True)
        run_step(step, folder, step_env, logs, n, args.step_timeout)
        print(f"    {status(step)} in {step['seconds']} s {step.get('last_line', '')}", flush=True)
        if step["what"] in figures and step["rc"] == 0:
            result["figures"][figures[step["what"]]] = round(step["seconds"], 1)
        if step["what"].startswith("demo, cold") and step["rc"] == 0:
            cold = result["figures"].setdefault("cold_demo_runs_s", [])
            cold.append(round(step["seconds"], 1))
            result["figures"]["cold_demo_median_s"] = round(statistics.median(cold), 1)
            result["figures"]["cold_demo_other_cores"] = [s.get("other_cores") for s in result["steps"]
                                                          if s["what"].startswith("demo, cold") and "rc" in s]
        outcomes = [status(s) for s in result["steps"]]
        result["counts"] = ", ".join(f"{outcomes.count(k)} {k}" for k in ("ok", "failed", "timeout", "skipped",
                                                                           "not run") if outcomes.count(k))
        result["load_after"] = round(os.getloadavg()[0], 2)
        write(result, js, md)
    if not all(g["quiet"] for g in result["quiet_gates"]):
        result["notes"].append(f"The machine did not go quiet (1-min load <= {args.load_max}) within "
                               f"{args.max_wait_min:g} min; the steps ran anyway, so their times include other work.")
    failed = [s for s in result["steps"] if status(s) in ("failed", "timeout")]
    result["notes"].append("All README commands and blocks that ran succeeded." if not failed else
                           "Failed: " + "; ".join(f"{s['section']} `{s['what']}`: {s.get('last_line', '')}"
                                                  for s in failed))
    pip_cache = cache / "pip"
    size = sum(f.stat().st_size for f in pip_cache.rglob("*") if f.is_file()) if pip_cache.exists() else 0
    result["notes"].append(f"pip's cache (`{pip_cache}`) was empty at the start; {size / 2**20:.0f} MiB in it at the "
                           "end." if pip_cache.exists() else f"pip's cache (`{pip_cache}`) was empty at the start "
                           "and pip wrote nothing there: every package came from PyPI or this machine's configured "
                           "local indexes, none from a warm cache.")
    result["notes"].append(f"Logs of every step (stdout NN.out, stderr NN.err): `{logs}`.")
    write(result, js, md)
    print(md.read_text())


if __name__ == "__main__":
    main()
