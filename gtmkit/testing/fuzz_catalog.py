"""Fuzz kind "catalog": random catalogs and schemas, valid and malformed, through build_index.

Property: a malformed input is refused with one line and leaves nothing at the output path; a valid
one (or a malformed one gtmkit may accept) builds an index that answers like the plain-Python
reference."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..inputs.schema import parse_schema
from .fuzz_core import OK_SAME, REFUSED, Wrong, classify
from .fuzz_gen import check_against_catalog, random_spec, random_table, random_user

BIG_TOKENS = [-1, "V", 2**31 - 1, 2**31, 2**63 - 1, 2**64 - 1]


def _column(table, name, arr):
    return table.set_column(table.schema.get_field_index(name), name, arr)


def _row(rng, table) -> int:
    return int(rng.integers(table.num_rows))


def _sid_lists(table):
    return table.column("sid").to_pylist()


def _bad_utf8(rng, table, spec):
    cols = [a["column"] for g in ("bitmask", "bloom") for a in spec[g].values()]
    col = str(rng.choice(cols))
    lists = table.column(col).to_pylist()
    r = _row(rng, table)
    lists[r] = (lists[r] or []) + ["\x00BAD\x00"]
    flat = [s.encode() if s != "\x00BAD\x00" else bytes([0xFF, 0xFE, 0x41, 0xC3]) for row in lists for s in (row or [])]
    offsets = np.cumsum([0] + [len(row or []) for row in lists]).astype(np.int32)
    values = pa.array(flat, pa.binary()).view(pa.string())
    return _column(table, col, pa.ListArray.from_arrays(pa.array(offsets), values)), f"bad UTF-8 in {col} row {r}"


def _token(rng, table, spec):
    tok = BIG_TOKENS[int(rng.integers(len(BIG_TOKENS)))]
    tok = spec["sid"]["vocab"] if tok == "V" else tok
    sids = _sid_lists(table)
    r = _row(rng, table)
    sids[r][int(rng.integers(len(sids[r])))] = tok
    typ = pa.uint64() if tok >= 2**63 else pa.int64() if not -2**31 <= tok < 2**31 else pa.int32()
    return _column(table, "sid", pa.array(sids, pa.list_(typ))), f"token {tok} in row {r}"


def _nulls(rng, table, spec):
    where = ["ad_id", "sid", "sid element"][int(rng.integers(3))]
    r = _row(rng, table)
    if where == "ad_id":
        ids = table.column("ad_id").to_pylist()
        ids[r] = None
        return _column(table, "ad_id", pa.array(ids, pa.int64())), f"null ad_id row {r}"
    sids = _sid_lists(table)
    if where == "sid":
        sids[r] = None
    else:
        sids[r][0] = None
    return _column(table, "sid", pa.array(sids, pa.list_(pa.int32()))), f"null {where} row {r}"


def _types(rng, table, spec):
    what = int(rng.integers(5))
    if what == 0:
        return _column(table, "ad_id", pa.array([str(x) for x in table.column("ad_id").to_pylist()])), "ad_id strings"
    if what == 1:
        return _column(table, "ad_id", pa.array([float(x) for x in table.column("ad_id").to_pylist()])), "ad_id floats"
    if what == 2:
        ids = table.column("ad_id").to_pylist()
        ids[_row(rng, table)] = 2**64 - 1
        return _column(table, "ad_id", pa.array(ids, pa.uint64())), "ad_id 2**64-1"
    if what == 3:
        return _column(table, "sid", pa.array([[str(t) for t in s] for s in _sid_lists(table)])), "sid strings"
    cols = [a["column"] for g in ("bitmask", "bloom") for a in spec[g].values()]
    col = str(rng.choice(cols))
    return _column(table, col, pa.array([[1, 2]] * table.num_rows)), f"{col} integers"


def _length(rng, table, spec):
    sids = _sid_lists(table)
    r = _row(rng, table)
    sids[r] = sids[r] + [0] if rng.random() < 0.5 or len(sids[r]) == 1 else sids[r][:-1]
    return _column(table, "sid", pa.array(sids, pa.list_(pa.int32()))), f"SID of length {len(sids[r])} row {r}"


def _duplicate(rng, table, spec):
    if table.num_rows < 2:
        return pa.concat_tables([table, table]), "duplicate ad id"
    ids = table.column("ad_id").to_pylist()
    ids[1] = ids[0]
    return _column(table, "ad_id", pa.array(ids, pa.int64())), "duplicate ad id"


def _domain(rng, table, spec):
    dom = [a for a in spec["bitmask"].values() if a.get("domain")]
    if not dom:
        return _duplicate(rng, table, spec)
    a = dom[0]
    lists = table.column(a["column"]).to_pylist()
    lists[_row(rng, table)] = ["NOT-IN-DOMAIN"]
    return _column(table, a["column"], pa.array(lists, pa.list_(pa.string()))), "value outside the domain"


TABLE_BAD = [_bad_utf8, _token, _nulls, _types, _length, _duplicate, _domain,
             lambda rng, t, s: (t.slice(0, 0), "no rows"),
             lambda rng, t, s: (t.drop_columns([t.column_names[int(rng.integers(t.num_columns))]]), "missing column")]

BAD_VALUES = [0, -1, 2**40, 1.5, True, None, "6", [], {}]


def _schema_bad(rng, spec, table):
    """-> (spec, what); every edit makes the schema invalid for this table."""
    s = json.loads(json.dumps(spec))
    attrs = [(g, n) for g in ("bitmask", "bloom") for n in s[g]]
    g, n = attrs[int(rng.integers(len(attrs)))]
    a = s[g][n]
    what = int(rng.integers(9))
    if what == 0:
        key = ["length", "vocab"][int(rng.integers(2))]
        s["sid"][key] = BAD_VALUES[int(rng.integers(len(BAD_VALUES)))]
        if key == "vocab" and rng.random() < 0.5:
            s["sid"]["vocab"] = 1 if max(max(x) for x in _sid_lists(table)) > 0 else 0
        return s, f"sid.{key} = {s['sid'][key]!r}"
    if what == 1 and g == "bloom":
        key = ["bits", "hashes", "seed"][int(rng.integers(3))]
        a[key] = {"bits": [0, 63, 100, 2**21, "64"], "hashes": [0, 33, -1, 2.0],
                  "seed": [-1, 2**32, "x", None]}[key][int(rng.integers(4))]
        return s, f"{g}.{n}.{key} = {a[key]!r}"
    if what == 2:
        if not a.get("exclude_column"):
            a["exclude_column"] = a["column"]
        else:
            a["column"] = a["exclude_column"]
        return s, f"{g}.{n}: exclude_column == column"
    if what == 3 and len(attrs) > 1:
        g2, n2 = attrs[(attrs.index((g, n)) + 1) % len(attrs)]
        s[g2][n2]["column"] = a["column"]
        return s, f"{g}.{n} and {g2}.{n2} share column {a['column']}"
    if what == 4 and g == "bitmask":
        a["domain"] = [["US", "US"], ["US", 3], "US"][int(rng.integers(3))]
        return s, f"bitmask.{n}.domain = {a['domain']!r}"
    if what == 5:
        (s if rng.random() < 0.5 else a)["colour"] = 1
        return s, "unknown key"
    if what == 6:
        s["partition"] = [{"mode": "x"}, {"mode": "static", "k": [1] * 9}, {"mode": "static", "k": 0},
                          {"mode": "dynamic", "target_fill": 0.0}, {"mode": "dynamic", "k_max": 0},
                          {"mode": "dynamic", "target_fill": "half"}][int(rng.integers(6))]
        return s, f"partition {s['partition']}"
    if what == 7:
        a["column"] = ["", "no_such_column", 5][int(rng.integers(3))]
        return s, f"{g}.{n}.column = {a['column']!r}"
    s["bitmask"], s["bloom"] = {}, {}
    return s, "no attributes"


def _write_schema(rng, path: Path, spec) -> str:
    """Write the schema file; sometimes as broken bytes. -> what was broken ('' if nothing)."""
    r = rng.random()
    if r < 0.04:
        path.write_bytes(b'{"ad_id": "\xff\xfe"}')
        return "schema not UTF-8"
    if r < 0.07:
        path.write_text(json.dumps(spec)[:-3])
        return "schema not JSON"
    if r < 0.09:
        path.write_text("[1, 2]")
        return "schema a JSON list"
    path.write_text(json.dumps(spec))
    return ""


def _catalog_path(rng, work: Path, table):
    """Where the catalog is read from; sometimes not a Parquet file at all. -> (path, what or '')."""
    cat = work / "catalog.parquet"
    r = rng.random()
    if r < 0.02:
        os.mkfifo(cat)
        return cat, "catalog is a FIFO"
    if r < 0.04:
        cat.mkdir()
        return cat, "catalog is a directory"
    if r < 0.06:
        cat.write_bytes(b"PAR1" + bytes(rng.integers(0, 256, 64, dtype=np.uint8)) + b"PAR1")
        return cat, "catalog is garbage"
    pq.write_table(table, cat)
    return cat, ""


def _out_path(rng, work: Path):
    r = rng.random()
    if r < 0.03:
        (work / "plain_file").write_text("x")
        return work / "plain_file" / "index", "output under a regular file"
    if r < 0.05:
        return Path("/proc/gtmkit-fuzz-index"), "output in /proc"
    return work / "index", ""


def _partition(rng, L):
    mode = ["none", "static", "dynamic"][int(rng.integers(3))]
    if mode == "static":
        return {"partition": "static", "k": [int(x) for x in rng.integers(1, 4, size=L)]}
    if mode == "dynamic":
        return {"partition": "dynamic", "target_fill": float(rng.choice([0.3, 0.6])), "k_max": int(rng.integers(1, 5))}
    return {}


def make_inputs(rng, work: Path) -> dict:
    """A random build: catalog and schema files, output path and partition arguments, and what in
    them is malformed (bad: [] when the build must succeed)."""
    spec = random_spec(rng)
    table = random_table(rng, spec)
    bad = []
    r = rng.random()
    if r < 0.45:
        table, what = TABLE_BAD[int(rng.integers(len(TABLE_BAD)))](rng, table, spec)
        bad.append(what)
    elif r < 0.75:
        spec, what = _schema_bad(rng, spec, table)
        bad.append(what)
    cat, what = _catalog_path(rng, work, table)
    bad += [what] if what else []
    schema_path = work / "catalog.schema.json"
    what = _write_schema(rng, schema_path, spec)
    bad += [what] if what else []
    out, what = _out_path(rng, work)
    bad += [what] if what else []
    L = spec["sid"]["length"] if isinstance(spec["sid"].get("length"), int) else 1
    return {"spec": spec, "table": table, "catalog": cat, "schema": schema_path, "out": out,
            "partition": _partition(rng, max(1, min(L, 8))), "bad": bad}


def leftovers(work: Path) -> list:
    """Names an aborted build must not leave beside its output."""
    return [p.name for p in work.iterdir() if p.name.startswith((".index", "index"))]


def case(rng, ctx) -> str:
    from .. import build_index

    work = Path(ctx["work"])
    x = make_inputs(rng, work)
    bad = x["bad"]
    ctx["note"] = f"input: {', '.join(bad) or 'valid'}"
    try:
        idx = build_index(x["catalog"], x["out"], schema=x["schema"], **x["partition"])
    except Exception as exc:  # noqa: BLE001  (every exception is an outcome)
        outcome, detail = classify(exc)
        if outcome != REFUSED:
            raise
        if leftovers(work):
            raise Wrong(f"refused ({detail}) but left {leftovers(work)} at the output path") from None
        if not bad:
            raise Wrong(f"refused a valid catalog: {detail}") from None
        return REFUSED
    if bad:
        raise Wrong(f"accepted a malformed input: {', '.join(bad)}")
    spec = x["spec"]
    check_against_catalog(idx, x["table"], parse_schema(spec), [random_user(rng, spec) for _ in range(4)], rng)
    return OK_SAME
