"""The fuzz suite: random hostile inputs, each case in its own forked child, counted by outcome.

    python -m gtmkit.testing.fuzz --seconds 60 --seed 1 [--kinds catalog,artifact,online,cli,update,writers,stale] [--json]
    python -m gtmkit.testing.fuzz --seed 1 --kinds online --case 17      # rerun one case

Children come from a forkserver whose process has only imported gtmkit (GNU OpenMP is not fork-safe
once a parallel region ran, and the parent builds the fixtures with numba's parallel code). A child
killed by a signal is a "crash", one past its time limit a "hang"; every other outcome comes back
over a pipe. A case is a function of (seed, kind, case index) alone, so each failure's reproducer is
one command line."""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import multiprocessing as mp
import os
import re
import signal
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path

from .fuzz_core import CRASH, FAILURES, HANG, OUTCOMES, TRACEBACK, case_rng, classify

KINDS = ("catalog", "artifact", "online", "cli", "update", "writers", "stale")
PRELOAD = ["gtmkit", "gtmkit.cli", "gtmkit.testing.fuzz_catalog", "gtmkit.testing.fuzz_artifact",
           "gtmkit.testing.fuzz_online", "gtmkit.testing.fuzz_cli", "gtmkit.testing.fuzz_update",
           "gtmkit.testing.fuzz_writers", "gtmkit.testing.fuzz_stale"]


def _case_fn(kind: str):
    """The case function of a kind: a built-in name, or "module:function" for any importable one."""
    if ":" in kind:
        import importlib
        mod, fn = kind.split(":", 1)
        return getattr(importlib.import_module(mod), fn)
    from . import fuzz_artifact, fuzz_catalog, fuzz_cli, fuzz_online, fuzz_stale, fuzz_update, fuzz_writers
    return {"catalog": fuzz_catalog.case, "artifact": fuzz_artifact.case, "online": fuzz_online.case,
            "cli": fuzz_cli.case, "update": fuzz_update.case, "writers": fuzz_writers.case,
            "stale": fuzz_stale.case}[kind]


def _child(conn, kind: str, seed: int, index: int, ctx: dict, log: str, hang_after: float) -> None:
    """Run one case in this (forked) process and send (outcome, detail, note) to the parent."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    faulthandler.enable()  # a crash leaves its Python stack in the log
    faulthandler.dump_traceback_later(hang_after, exit=False)
    ctx = CaseContext(ctx or {}, work=str(Path(log).parent))
    try:
        outcome, detail = _case_fn(kind)(case_rng(seed, kind, index), ctx), ""
    except BaseException as exc:  # noqa: BLE001  (the outcome of the case, whatever it is)
        outcome, detail = classify(exc)
    gc.collect()  # frees the case's objects now: a corrupted heap then aborts before the answer is sent
    conn.send((outcome, detail, ctx.get("note", "")))
    conn.close()


class CaseContext(dict):
    """The dict a case gets; its "note" (what the case fed in) is also written to a file, so that a
    crash or a hang still has it."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if key == "note":
            Path(self["work"], "note").write_text(str(value))


def _note(work: Path) -> str:
    try:
        return (work / "note").read_text()
    except OSError:
        return ""


def _crash_detail(log: Path, exitcode: int) -> str:
    """'SIGSEGV: <first libc/Python fatal line> at <innermost gtmkit frame>' from the child's log."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        text = ""
    name = signal.Signals(-exitcode).name if -exitcode in signal.Signals._value2member_map_ else str(exitcode)
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    msg = next((x for x in lines if not x.startswith(("File ", "Current thread", "Thread ", "Fatal Python",
                                                     "<no Python frame>", "Extension modules", "File"))), "")
    frames = [m.group(1, 2) for m in re.finditer(r'File "([^"]*gtmkit[^"]*)", line \d+ in (\w+)', text)
              if "/testing/" not in m.group(1)]
    where = f" at {Path(frames[0][0]).name}:{frames[0][1]}" if frames else ""
    return f"{name}: {msg[:120]}{where}"


def _last_line(log: Path) -> str:
    try:
        lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def _hang_detail(log: Path) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "no stack"
    frames = re.findall(r'File "([^"]*)", line \d+ in (\w+)', text)
    inner = [f for f in frames if "gtmkit" in f[0] and "/testing/" not in f[0]]
    return f"still running at {Path(inner[0][0]).name}:{inner[0][1]}" if inner else "no gtmkit frame on the stack"


def reproducer(kind: str, seed: int, index: int) -> str:
    return f"python -m gtmkit.testing.fuzz --kinds {kind} --seed {seed} --case {index}"


def signature(r: dict) -> str:
    """A failure's detail with numbers, paths and quoted values blanked: failures that differ only
    there count as one signature."""
    s = re.sub(r"(?<![\w.])/[^\s:'\"]+", "<path>", r["detail"])
    s = re.sub(r"'[^']*'|\"[^\"]*\"", "<v>", s)
    s = re.sub(r"(?<![\w.])-?\d+(\.\d+)?(e[-+]?\d+)?(?!\w)", "N", s)
    return f"{r['kind']} {r['outcome']}: {s[:160]}"


class Runner:
    """Start cases as children, up to `jobs` at once; collect one record per case."""

    def __init__(self, seed: int, kinds, timeout: float, jobs: int, root: Path):
        self.seed, self.kinds, self.timeout, self.jobs, self.root = seed, list(kinds), timeout, jobs, root
        self.mp = mp.get_context("forkserver")
        self.mp.set_forkserver_preload(PRELOAD)
        self.records, self.running = [], []
        self.next_index = {k: 0 for k in self.kinds}
        self.ctx = None

    def fixtures(self) -> dict:
        from .fuzz_fixtures import build_fixtures
        fx = self.root / "fixtures"
        fx.mkdir(parents=True, exist_ok=True)
        self.ctx = build_fixtures(fx, self.seed)
        return self.ctx

    def start(self, kind: str, index: int) -> None:
        work = self.root / f"{re.sub(r'[^A-Za-z0-9_]+', '_', kind)}-{index}"
        work.mkdir(parents=True, exist_ok=True)
        recv, send = self.mp.Pipe(duplex=False)
        p = self.mp.Process(target=_child, args=(send, kind, self.seed, index, self.ctx, str(work / "log"),
                                                 max(self.timeout - 2.0, self.timeout * 0.8)), daemon=True)
        p.start()
        send.close()
        self.running.append((p, recv, kind, index, time.monotonic() + self.timeout, work))

    def reap(self, block: float) -> None:
        """Collect finished (or overdue) children, waiting at most `block` seconds for one."""
        if not self.running:
            return
        deadline = min(r[4] for r in self.running)
        wait([r[0].sentinel for r in self.running] + [r[1] for r in self.running],
             timeout=max(0.0, min(block, deadline - time.monotonic())))
        still = []
        for p, recv, kind, index, due, work in self.running:
            msg = None
            if recv.poll():
                try:
                    msg = recv.recv()
                except (EOFError, OSError):
                    msg = None
            if msg is None and p.is_alive() and time.monotonic() < due:
                still.append((p, recv, kind, index, due, work))
                continue
            if msg is None and p.is_alive():
                p.kill()
                p.join()
                msg = (HANG, f"no answer in {self.timeout:.0f} s, {_hang_detail(work / 'log')}", _note(work))
            elif msg is not None:
                p.join(10.0)
            if msg is not None and p.is_alive():  # answered, then stuck on the way out
                p.kill()
                p.join()
                msg = (HANG, f"answered {msg[0]}, then did not exit", msg[2])
            elif msg is not None and msg[0] != HANG and p.exitcode and p.exitcode < 0:
                msg = (CRASH, f"answered {msg[0]}, then {_crash_detail(work / 'log', p.exitcode)}", msg[2])
            if msg is None:
                p.join()
                code = p.exitcode
                msg = (CRASH, _crash_detail(work / "log", code), _note(work)) if code is not None and code < 0 else \
                    (TRACEBACK, f"child exited with code {code} without an answer: {_last_line(work / 'log')}", _note(work))
            recv.close()
            self.records.append({"kind": kind, "index": index, "outcome": msg[0], "detail": msg[1],
                                 "note": msg[2]})
            if msg[0] not in FAILURES:
                _rmtree(work)
        self.running = still

    def run(self, seconds: float = None, cases: int = None, only: int = None) -> list:
        """Run cases round-robin over the kinds until `seconds` passed or `cases` were started (or just
        case `only` of each kind)."""
        t_end = time.monotonic() + (seconds if seconds is not None else float("inf"))
        started = 0
        order = [(k, only) for k in self.kinds] if only is not None else None
        while True:
            if order is not None:
                if not order and not self.running:
                    break
            elif (time.monotonic() >= t_end or (cases is not None and started >= cases)) and not self.running:
                break
            can_start = len(self.running) < self.jobs and (
                order if order is not None else time.monotonic() < t_end and (cases is None or started < cases))
            if can_start:
                if order is not None:
                    kind, index = order.pop(0)
                else:
                    kind = self.kinds[started % len(self.kinds)]
                    index = self.next_index[kind]
                    self.next_index[kind] += 1
                self.start(kind, index)
                started += 1
                continue
            self.reap(0.5)
        return self.records


def _rmtree(path: Path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def summarize(records: list, seed: int, seconds: float) -> dict:
    counts = {}
    for r in records:
        counts.setdefault(r["kind"], {o: 0 for o in OUTCOMES})[r["outcome"]] += 1
    failures = [dict(r, reproducer=reproducer(r["kind"], seed, r["index"]), signature=signature(r))
                for r in records if r["outcome"] in FAILURES]
    sigs = {}
    for f in failures:
        sigs.setdefault(f["signature"], []).append(f["reproducer"])
    return {"seed": seed, "seconds": round(seconds, 1), "cases": len(records), "counts": counts,
            "failures": failures, "signatures": {s: {"count": len(v), "first": v[0]} for s, v in sigs.items()}}


def format_text(summary: dict) -> str:
    """The summary as text: a table of counts by kind and outcome, then one line per failure."""
    out = [f"fuzz seed {summary['seed']}: {summary['cases']} cases in {summary['seconds']} s"]
    if summary.get("manifest_digest"):
        out.append("manifest digest for value edits: " + ", ".join(f"{k} {v}" for k, v in summary["manifest_digest"].items()))
    kinds = sorted(summary["counts"])
    out.append(f"{'outcome':<22}" + "".join(f"{k:>10}" for k in kinds) + f"{'total':>10}")
    for o in OUTCOMES:
        row = [summary["counts"][k][o] for k in kinds]
        out.append(f"{o:<22}" + "".join(f"{n:>10}" for n in row) + f"{sum(row):>10}")
    fails = summary["failures"]
    out.append(f"{len(fails)} failures, {len(summary['signatures'])} distinct signatures")
    for s, v in sorted(summary["signatures"].items(), key=lambda kv: -kv[1]["count"]):
        out.append(f"  [{v['count']}x] {s}  e.g. {v['first']}")
    for f in fails:
        out.append(f"{f['reproducer']}  # {f['outcome']}: {f['detail'][:200]} [{f['note'][:120]}]")
    return "\n".join(out)


def fuzz(seconds: float = None, seed: int = 0, kinds=KINDS, cases: int = None, only: int = None,
         timeout: float = 30.0, jobs: int = 1, root=None) -> dict:
    """Run the suite; -> summary dict (counts by kind and outcome, failures with reproducers)."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gtmkit-fuzz-", dir=root) as tmp:
        r = Runner(seed, kinds, timeout, jobs, Path(tmp))
        if set(kinds) & set(KINDS):  # the built-in kinds start from fixture artifacts
            r.fixtures()
        records = r.run(seconds, cases, only)
    s = summarize(records, seed, time.monotonic() - t0)
    s["manifest_digest"] = (r.ctx or {}).get("manifest_digest", {})
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gtmkit.testing.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="keep starting cases for this long")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help=f"comma-separated subset of {','.join(KINDS)} (or module:function case functions)")
    ap.add_argument("--cases", type=int, help="stop after this many cases")
    ap.add_argument("--case", type=int, dest="only", help="run only this case index of each kind")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds a case may run before it is a hang")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    a = ap.parse_args(argv)
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = sorted(k for k in set(kinds) - set(KINDS) if ":" not in k)
    if unknown:
        ap.error(f"unknown kinds {unknown} (known: {', '.join(KINDS)})")
    s = fuzz(a.seconds, a.seed, kinds, a.cases, a.only, a.timeout, a.jobs)
    print(json.dumps(s, indent=1) if a.json else format_text(s))
    return 1 if s["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
