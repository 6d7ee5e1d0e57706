"""Fuzz kind "writers": two to four writers update one copy of a fixture index at once, each with its own well-formed
changes (new ads, edits of its own ads' targeting, pauses and resumes of its own ads, some with a shard rebuild for
ads on SIDs the trie lacks), as threads calling `update_path` (what `gtmkit update` runs) and as `gtmkit update`
processes.

Property: every writer succeeds, or is refused with one line naming both versions (it lost the race every time it
tried), having changed nothing; the index then loads with every check and holds exactly the fixture with every
successful writer's changes (no lost write): its ads, their targeting (answers equal brute force over that catalog)
and its paused ads. The writers' changes touch distinct ads and SIDs the others' cannot remove, so the result does
not depend on the order they published in."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .fuzz_core import OK_CHANGED, Wrong
from .fuzz_gen import check_against_catalog, random_table, random_user

PROCESS_SECONDS = 25  # a `gtmkit update` process; the case's own limit is the runner's


def _writers(rng, ctx, fixture: pa.Table, paused0: list) -> list:
    """Each writer's (changes table, pause ids, resume ids, rebuild, how): ads and SIDs split so that no writer's
    change depends on another's (an off-trie SID used without a rebuild is never one a rebuild adds)."""
    spec = ctx["spec"]
    L, V = spec["sid"]["length"], spec["sid"]["vocab"]
    ids = [int(x) for x in fixture.column("ad_id").to_pylist()]
    sids = [list(s) for s in fixture.column("sid").to_pylist()]
    have = {tuple(s) for s in sids}
    off = [list(s) for s in itertools.product(range(V), repeat=L) if s not in have]
    rng.shuffle(off)
    pools = {True: off[:len(off) // 2], False: off[len(off) // 2:]}  # rebuild writers' off-trie SIDs, the others'
    n = int(rng.integers(2, 5))
    free = [x for x in ids if x not in set(paused0)]
    rng.shuffle(free)
    held = list(paused0)
    out, processes = [], 0
    for w in range(n):
        rebuild = bool(rng.random() < 0.3)
        mine = free[w::n]  # this writer's own fixture ads: edits and pauses
        k_new, k_edit = int(rng.integers(0, 5)), int(rng.integers(0, 3))
        t = random_table(rng, spec, n_ads=max(k_new + k_edit, 1)).slice(0, k_new + k_edit)
        rows_sids, rows_ids = [], []
        for i in range(k_new):
            pool = pools[rebuild] if pools[rebuild] and rng.random() < 0.3 else sids
            rows_sids.append(pool[int(rng.integers(len(pool)))])
            rows_ids.append(10**6 * (w + 1) + i)  # distinct from every other writer's and the fixture's
        edited = mine[:min(k_edit, len(mine))]
        for x in edited:  # new targeting on the ad's own SID: no writer empties a SID another one adds to
            rows_ids.append(x)
            rows_sids.append(sids[ids.index(x)])
        t = t.slice(0, len(rows_ids))
        t = t.set_column(0, "ad_id", pa.array(rows_ids, pa.int64()))
        t = t.set_column(1, "sid", pa.array(rows_sids, pa.list_(pa.int32())))
        pause = [x for x in mine[len(edited):] if rng.random() < 0.3][:3]
        resume = held[w::n] if rng.random() < 0.6 else []
        how = "process" if processes < 2 and rng.random() < 0.4 else "thread"
        processes += how == "process"
        out.append((t, pause, resume, rebuild, how))
    return out


def _expected(fixture: pa.Table, done: list, paused0: list) -> tuple:
    """(the catalog after the successful writers' changes, its paused ids): a change on a SID the fixture lacks
    counts only where its writer rebuilt."""
    have = {tuple(s) for s in fixture.column("sid").to_pylist()}
    rows = {r["ad_id"]: r for r in fixture.to_pylist()}
    paused = set(paused0)
    for t, pause, resume, rebuild, _ in done:
        for r in t.select(fixture.column_names).to_pylist():
            if rebuild or tuple(r["sid"]) in have:
                rows[r["ad_id"]] = r
        paused = (paused | set(pause)) - set(resume)
    return pa.Table.from_pylist(list(rows.values()), schema=fixture.schema), paused


def _ids_file(path: Path, ids: list) -> Path:
    path.write_text("".join(f"{x}\n" for x in ids))
    return path


def _run_thread(path, changes, pause, resume, rebuild, result: list) -> None:
    from ..indexer.update.publish import update_path
    try:
        update_path(path, changes, pause, resume, rebuild)
        result.append(("ok", ""))
    except BaseException as exc:  # noqa: BLE001  (judged by the case in its own thread)
        result.append(("raised", exc))


def _start_process(work: Path, w: int, path, changes, pause, resume, rebuild) -> subprocess.Popen:
    args = [sys.executable, "-m", "gtmkit", "update", str(path), "--json", "-s"]
    if changes is not None:
        pq.write_table(changes, work / f"c{w}.parquet")
        args.append(str(work / f"c{w}.parquet"))
    if pause:
        args += ["--pause", str(_ids_file(work / f"p{w}.txt", pause))]
    if resume:
        args += ["--resume", str(_ids_file(work / f"r{w}.txt", resume))]
    if rebuild:
        args.append("--rebuild-shards")
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(x for x in (root, os.environ.get("PYTHONPATH")) if x),
               NUMBA_NUM_THREADS="1")
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _refused_line(text: str, who: str) -> None:
    """A writer that gave up must say so in one line naming the version it read and the one current."""
    lines = [x for x in str(text).splitlines() if x.strip()]
    if len(lines) != 1 or "Traceback" in lines[0] or lines[0].count("v-") < 2:
        raise Wrong(f"{who} failed without one line naming both versions: {[x[:120] for x in lines[:3]]}")


def case(rng, ctx) -> str:
    from .. import load_index
    from ..errors import GtmkitError
    from ..inputs.schema import parse_schema
    from ..artifact.staging import VersionChanged
    from ..indexer.update.publish import update_path

    work = Path(ctx["work"])
    name = str(rng.choice(["fixed", "jagged"]))
    copy = work / "index"
    shutil.copytree(ctx["paths"][name], copy)
    fixture = pq.read_table(ctx["catalog"])
    ids = fixture.column("ad_id").to_pylist()
    paused0 = sorted(int(x) for x in rng.choice(ids, size=int(rng.integers(0, 6)), replace=False))
    if paused0:
        update_path(copy, pause=paused0)  # some ads paused before the race, for the writers to resume
    writers = _writers(rng, ctx, fixture, paused0)
    ctx["note"] = f"{len(writers)} writers on {name}: " + "; ".join(
        f"{how}{' rebuild' if rb else ''} {t.num_rows} rows {len(p)} paused {len(r)} resumed"
        for t, p, r, rb, how in writers)
    results, threads, procs = [[] for _ in writers], [], {}
    for w, (t, pause, resume, rebuild, how) in enumerate(writers):
        changes = t if t.num_rows or not (pause or resume) else None
        if how == "process":
            procs[w] = _start_process(work, w, copy, changes, pause, resume, rebuild)
        else:
            th = threading.Thread(target=_run_thread, args=(copy, changes, pause or None, resume or None, rebuild,
                                                             results[w]))
            th.start()
            threads.append(th)
    for th in threads:
        th.join()
    for w, p in procs.items():
        try:
            out, err = p.communicate(timeout=PROCESS_SECONDS)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise Wrong(f"writer {w}: `gtmkit update` still running after {PROCESS_SECONDS} s") from None
        if p.returncode == 0:
            json.loads(out)
            results[w].append(("ok", ""))
        else:
            if p.returncode != 1:
                raise Wrong(f"writer {w}: `gtmkit update` exited {p.returncode}: {err.strip()[-200:]}")
            _refused_line(err.replace("Error: ", ""), f"writer {w}")
            results[w].append(("refused", err))
    done = []
    for w, (res, spec) in enumerate(zip(results, writers)):
        kind, what = res[0]
        if kind == "raised":
            if not isinstance(what, GtmkitError):
                raise what
            if not isinstance(what, VersionChanged):
                raise Wrong(f"writer {w} refused well-formed changes: {type(what).__name__}: {what}")
            _refused_line(str(what), f"writer {w}")
        elif kind == "ok":
            done.append(spec)
    want, paused = _expected(fixture, done, paused0)
    served = load_index(copy, verify=True)
    got_ids = set(np.asarray(served.ad_ids_sorted).tolist())
    want_ids = set(want.column("ad_id").to_pylist())
    if got_ids != want_ids:
        lost = sorted(want_ids - got_ids)[:5]
        raise Wrong(f"lost write: {len(want_ids - got_ids)} ads missing (e.g. {lost}), "
                    f"{len(got_ids - want_ids)} unexpected")
    got_paused = set(np.asarray(served.paused_ad_ids).tolist())
    if got_paused != paused:
        raise Wrong(f"lost write: paused ads {sorted(got_paused ^ paused)[:5]} differ from the writers' lists")
    served.paused_ad_ids = np.zeros(0, np.int64)  # eligibility is checked apart from the pauses, checked above
    schema = parse_schema(ctx["spec"])
    users = ctx["users"] + [random_user(rng, ctx["spec"]) for _ in range(2)]
    check_against_catalog(served, want, schema, users, rng, exact_sids=False)
    return OK_CHANGED
