"""Fuzz kind "update": change sets, well-formed or not, given to a copy of a fixture index by `gtmkit update` (with
and without --rebuild-shards), `gtmkit.rebuild_shards` and `Matcher.update_ads`.

Property: refused with one line, the copy still serving the version it served; or accepted, and then the version
that serves (written, or the matcher's) passes `load_index(verify=True)` where written and answers exactly as the
changed catalog: the fixture's rows with the edits in place of theirs and the new ads added; ads on SIDs the trie
lacks only where a rebuild ran (elsewhere they are left out, an edit of that kind keeping the ad as it was)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .fuzz_cli import check_refusal, invoke
from .fuzz_core import OK_CHANGED, REFUSED, Wrong
from .fuzz_gen import check_against_catalog, random_table, random_user

FLAWS = ("null id", "repeated id", "token past the vocabulary", "negative token", "short SID", "missing column",
         "ad id as text", "value outside the domain")


def _changes(rng, ctx, fixture: pa.Table) -> tuple:
    """-> (change table, its flaws): edits of fixture ads and new ads, on the fixture's SIDs and on others."""
    spec = ctx["spec"]
    L, V = spec["sid"]["length"], spec["sid"]["vocab"]
    n = int(rng.integers(0, 9))
    t = random_table(rng, spec, n_ads=max(n, 1)).slice(0, n)
    ids = fixture.column("ad_id").to_pylist()
    fresh = (x for x in itertools.count(10**6 + int(rng.integers(10**6))) if x not in set(ids))
    have = [tuple(s) for s in fixture.column("sid").to_pylist()]
    off = [s for s in itertools.product(range(V), repeat=L) if s not in set(have)]
    new_ids, sids = [], []
    for _ in range(n):
        new_ids.append(int(rng.choice(ids)) if rng.random() < 0.4 else next(fresh))
        pool = off if off and rng.random() < 0.35 else have
        sids.append(list(pool[int(rng.integers(len(pool)))]))
    new_ids = list(dict.fromkeys(new_ids))  # edits of one ad once
    t = t.slice(0, len(new_ids))
    sids = sids[:len(new_ids)]
    t = t.set_column(0, "ad_id", pa.array(new_ids, pa.int64()))
    t = t.set_column(1, "sid", pa.array(sids, pa.list_(pa.int32())))
    flaws = []
    if t.num_rows and rng.random() < 0.35:
        flaw = str(rng.choice(FLAWS))
        flawed = _flaw(rng, t, flaw, spec)
        if flawed is not None:  # else this table cannot carry that flaw: it stays well-formed
            t, flaws = flawed, [flaw]
    return t, flaws


def _flaw(rng, t: pa.Table, flaw: str, spec: dict):
    """t with one flaw, or None where this table cannot carry it."""
    i = int(rng.integers(t.num_rows))
    d = t.to_pydict()
    if flaw == "null id":
        d["ad_id"][i] = None
    elif flaw == "repeated id":
        if t.num_rows < 2:
            return None
        d["ad_id"][i] = d["ad_id"][(i + 1) % t.num_rows]
    elif flaw in ("token past the vocabulary", "negative token"):
        d["sid"][i][int(rng.integers(len(d["sid"][i])))] = spec["sid"]["vocab"] if flaw[0] == "t" else -1
    elif flaw == "short SID":
        d["sid"][i] = d["sid"][i][:-1]
    elif flaw == "missing column":
        return t.drop_columns(["sid"])
    elif flaw == "ad id as text":
        return t.set_column(0, "ad_id", pa.array([str(x) for x in d["ad_id"]], pa.string()))
    elif flaw == "value outside the domain":
        if not spec["bitmask"]:
            return None
        col = spec["bitmask"][sorted(spec["bitmask"])[0]]["column"]
        d[col][i] = ["XX-never-seen"]
    return pa.table(d, schema=t.schema)


def _after(fixture: pa.Table, changes: pa.Table, rebuilt: bool) -> pa.Table:
    """The changed catalog: edits in place of the fixture's rows, new ads appended; a change on a SID the fixture
    lacks counts only when rebuilt."""
    have = {tuple(s) for s in fixture.column("sid").to_pylist()}
    rows = {r["ad_id"]: r for r in fixture.to_pylist()}
    for r in changes.select(fixture.column_names).to_pylist():
        if rebuilt or tuple(r["sid"]) in have:
            rows[r["ad_id"]] = r
    return pa.Table.from_pylist(list(rows.values()), schema=fixture.schema)


def case(rng, ctx) -> str:
    from .. import Matcher, load_index, rebuild_shards
    from ..inputs.schema import parse_schema

    work = Path(ctx["work"])
    name = str(rng.choice(["fixed", "jagged"]))
    copy = work / "index"
    shutil.copytree(ctx["paths"][name], copy)
    fixture = pq.read_table(ctx["catalog"])
    changes, flaws = _changes(rng, ctx, fixture)
    path = work / "changes.parquet"
    pq.write_table(changes, path)
    how = str(rng.choice(["cli", "cli --rebuild-shards", "rebuild_shards", "update_ads"]))
    ctx["note"] = f"{how} on {name}: {changes.num_rows} rows, {', '.join(flaws) or 'well-formed'}"
    before = load_index(copy, verify=False).version
    rebuilt = "rebuild" in how
    try:
        if how.startswith("cli"):
            args = ["update", copy, path, "--json"] + (["--rebuild-shards"] if rebuilt else [])
            code, out, err = invoke(args)
            if code != 0:
                check_refusal(code, err, f"gtmkit {how[4:] or 'update'}")
                raise _Refused(err.strip())
            served = load_index(copy, verify=True)
        elif how == "rebuild_shards":
            served, _ = rebuild_shards(copy, path)
            served = load_index(copy, verify=True)
        else:
            m = Matcher(load_index(copy))
            m.update_ads(path)
            served = m.current().index
    except _Refused:
        return _refused(flaws, copy, before, how)
    except Exception as exc:
        from ..errors import GtmkitError
        if isinstance(exc, GtmkitError) and "\n" not in str(exc).strip():
            return _refused(flaws, copy, before, how)
        raise
    if flaws:
        raise Wrong(f"{how} accepted changes with {', '.join(flaws)}")
    schema = parse_schema(ctx["spec"])
    users = ctx["users"] + [random_user(rng, ctx["spec"]) for _ in range(2)]
    check_against_catalog(served, _after(fixture, changes, rebuilt), schema, users, rng, exact_sids=False)
    json.dumps(served.stats())  # the reporting path reads the new version too
    return OK_CHANGED


class _Refused(Exception):
    pass


def _refused(flaws: list, copy: Path, before: str, how: str) -> str:
    from .. import load_index
    if not flaws:
        raise Wrong(f"{how} refused well-formed changes")
    if load_index(copy, verify=True).version != before:
        raise Wrong(f"{how} refused the changes but wrote a version")
    return REFUSED
