"""One index either way: a catalog of part files that the single-process build refuses, the sharded build (in
this process, on a Dask cluster, `gtmkit build --workers 2`) refuses with the same one line, leaving nothing at
the output path; a part whose types differ from the other parts' only in how values are stored builds the same
index both ways. A shard rebuild reads its changes through the same checks."""

from __future__ import annotations

import json
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli
from gtmkit.errors import CatalogError
from gtmkit.inputs.catalog import read_catalog
from gtmkit.inputs.schema import parse_schema

from support.catalogs import random_catalog, schema_dict

PART = 30  # rows a part file
PARTS = 3


def _set(t: pa.Table, name: str, arr) -> pa.Table:
    return t.set_column(t.schema.get_field_index(name), name, arr)


def _row(t: pa.Table, name: str, row: int, value, typ=None) -> pa.Table:
    col = t.column(name)
    values = col.to_pylist()
    values[row] = value
    return _set(t, name, pa.array(values, typ or col.type))


def _bad_utf8(t: pa.Table, row: int) -> pa.Table:
    raw = [b"US"] * t.num_rows
    raw[row] = b"\xffUS"
    strings = pa.array(raw, pa.binary()).view(pa.string())
    return _set(t, "country", pa.ListArray.from_arrays(pa.array(np.arange(t.num_rows + 1, dtype=np.int32)), strings))


# a part file's fault: name -> (the part mutated, other parts -> bad part); the other parts are as written
TYPE_FAULTS = {
    "country a plain string": lambda t, o: _set(t, "country", pa.array(
        [x[0] if x else None for x in t.column("country").to_pylist()], pa.string())),
    "ad_id int32": lambda t, o: _set(t, "ad_id", t.column("ad_id").cast(pa.int32())),
    "missing column": lambda t, o: t.remove_column(t.schema.get_field_index("gender")),
    "sid of int64": lambda t, o: _set(t, "sid", t.column("sid").cast(pa.list_(pa.int64()))),
    "sid of floats": lambda t, o: _set(t, "sid", t.column("sid").cast(pa.list_(pa.float64()))),
    "sid fixed size": lambda t, o: _set(t, "sid", t.column("sid").cast(pa.list_(pa.int32(), 3))),
}
ROW_FAULTS = {
    "null ad_id": lambda t, o: _row(t, "ad_id", 4, None),
    "ad_id repeated in its part": lambda t, o: _row(t, "ad_id", 20, t.column("ad_id")[15].as_py()),
    "ad_id of another part": lambda t, o: _row(t, "ad_id", 9, o[0].column("ad_id")[3].as_py()),
    "token outside the vocab": lambda t, o: _row(t, "sid", 7, [1, 9, 2]),
    "short SID": lambda t, o: _row(t, "sid", 3, [1, 2]),
    "null token": lambda t, o: _row(t, "sid", 11, [1, None, 2]),
    "value outside the domain": lambda t, o: _row(t, "country", 5, ["BR"]),
    "excluded value outside the domain": lambda t, o: _row(t, "country_exclude", 12, ["XX"]),
    "null string in a list": lambda t, o: _row(t, "age", 2, ["18-24", None]),
    "invalid UTF-8": lambda t, o: _bad_utf8(t, 6),
}
FAULTS = {**TYPE_FAULTS, **ROW_FAULTS}


def _write(tmp, faults: dict, seed: int = 1):
    """A catalog of PARTS part files in tmp/cat with faults {part: fault name}, and its schema beside it."""
    table = random_catalog(seed, n_ads=PART * PARTS)
    parts = [table.slice(i * PART, PART) for i in range(PARTS)]
    root = tmp / "cat"
    root.mkdir()
    for i, p in enumerate(parts):
        if i in faults:
            p = FAULTS[faults[i]](p, parts)
        pq.write_table(p, root / f"part-{i:03d}.parquet")
    (tmp / "cat.schema.json").write_text(json.dumps(schema_dict()))
    return root


def _error(catalog, out, **kw) -> str:
    with pytest.raises(CatalogError) as e:
        gtmkit.build_index(catalog, out, **kw)
    msg = str(e.value)
    assert "\n" not in msg.strip() and "Traceback" not in msg, msg
    assert not out.exists(), sorted(p.name for p in out.iterdir())
    return msg


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.CRITICAL) as lc, distributed.Client(lc) as client:
        yield client


@pytest.mark.parametrize("part", [0, 1, 2])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_bad_part_is_refused_with_one_line_either_way(tmp_path, cluster, fault, part):
    if fault == "ad_id of another part" and part == 0:
        pytest.skip("the first part has no part before it to repeat")
    cat = _write(tmp_path, {part: fault})
    single = _error(cat, tmp_path / "idx")
    assert f"part-{part:03d}.parquet" in single or (fault in TYPE_FAULTS and part == 0), single
    assert _error(cat, tmp_path / "idx", shards=3) == single
    assert _error(cat, tmp_path / "idx", client=cluster, shards=3) == single


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


CLI_FAULTS = [*sorted(TYPE_FAULTS)[:4], "ad_id repeated in its part", "value outside the domain"]


def _cli_line(cat, out, *extra) -> str:
    r = _cli("build", cat, "-o", out, "-s", *extra)
    assert r.exit_code == 1 and r.stdout == "" and r.stderr.count("\n") == 1, r.output
    assert "Traceback" not in r.output and not out.exists()
    return r.stderr


@pytest.mark.parametrize("fault", CLI_FAULTS)
def test_cli_build_prints_the_library_line(tmp_path, fault):
    cat = _write(tmp_path, {1: fault})
    line = _cli_line(cat, tmp_path / "idx")
    assert line == f"Error: {_error(cat, tmp_path / 'idx')}\n" and "part-001.parquet" in line, line


@pytest.mark.slow  # each run starts a local cluster of worker processes
@pytest.mark.parametrize("fault", CLI_FAULTS)
def test_cli_build_and_build_with_workers_print_the_same_line(tmp_path, fault):
    pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    cat = _write(tmp_path, {1: fault})
    lines = [_cli_line(cat, tmp_path / "idx", *extra) for extra in ([], ["--workers", "2"])]
    assert lines[0] == lines[1] and "part-001.parquet" in lines[0], lines


def _several(n: int) -> list:
    """n catalogs' faults, two or three parts bad in each (a repeat of another part's id only after the first)."""
    rng = np.random.default_rng(7)
    names = sorted(ROW_FAULTS)
    out = []
    while len(out) < n:
        parts = sorted(rng.choice(PARTS, size=int(rng.integers(2, PARTS + 1)), replace=False).tolist())
        faults = {p: names[int(rng.integers(len(names)))] for p in parts}
        if faults.get(0) != "ad_id of another part":
            out.append(faults)
    return out


@pytest.mark.parametrize("faults", _several(16), ids=lambda f: ",".join(f"{p}:{x}" for p, x in f.items()))
def test_several_bad_parts_give_the_single_process_line(tmp_path, cluster, faults):
    """Whichever task fails first on the cluster, the line is the first failing file's, as read in order."""
    cat = _write(tmp_path, faults, seed=len(str(faults)))
    single = _error(cat, tmp_path / "idx")
    assert _error(cat, tmp_path / "idx", shards=2) == single
    assert _error(cat, tmp_path / "idx", client=cluster, shards=3) == single


def _stored(t: pa.Table) -> pa.Table:
    """The same values stored otherwise: 64-bit offsets, large strings, a dictionary-encoded list."""
    t = _set(t, "sid", t.column("sid").cast(pa.large_list(pa.int32())))
    t = _set(t, "country", t.column("country").cast(pa.list_(pa.large_string())))
    t = _set(t, "location", t.column("location").cast(pa.large_list(pa.string())))
    g = t.column("gender").combine_chunks()
    return _set(t, "gender", pa.ListArray.from_arrays(g.offsets, g.values.dictionary_encode(), mask=g.is_null()))


def test_parts_stored_otherwise_build_the_same_index_either_way(tmp_path, cluster):
    table = random_catalog(3, n_ads=PART * PARTS)
    (tmp_path / "cat").mkdir()
    for i in range(PARTS):
        p = table.slice(i * PART, PART)
        pq.write_table(_stored(p) if i == 1 else p, tmp_path / "cat" / f"part-{i:03d}.parquet")
    pq.write_table(table, tmp_path / "whole.parquet")
    schema = schema_dict()
    sums = lambda idx: {n: f["sha256"] for n, f in idx.manifest["files"].items()}  # noqa: E731
    want = sums(gtmkit.build_index(tmp_path / "whole.parquet", tmp_path / "whole", schema=schema))
    assert sums(gtmkit.build_index(tmp_path / "cat", tmp_path / "single", schema=schema)) == want
    assert sums(gtmkit.build_index(tmp_path / "cat", tmp_path / "dask", schema=schema, client=cluster,
                                   shards=3)) == want


def test_folder_values_are_typed_as_the_whole_catalog_types_them(tmp_path):
    """A key=value folder that holds an attribute: digits in one folder are still strings where another
    folder's value is not a number, in every task of a sharded build as in the single-process read."""
    table = random_catalog(4, n_ads=PART * PARTS)
    table = table.remove_column(table.schema.get_field_index("gender"))
    for i, g in enumerate(["1", "2", "f"]):
        (tmp_path / "cat" / f"gender={g}").mkdir(parents=True)
        pq.write_table(table.slice(i * PART, PART), tmp_path / "cat" / f"gender={g}" / "part.parquet")
    schema = schema_dict()
    schema["bitmask"]["gender"]["domain"] = None
    sums = lambda idx: {n: f["sha256"] for n, f in idx.manifest["files"].items()}  # noqa: E731
    single = gtmkit.build_index(tmp_path / "cat", tmp_path / "single", schema=schema)
    assert sums(gtmkit.build_index(tmp_path / "cat", tmp_path / "sharded", schema=schema, shards=2)) == sums(single)


@pytest.mark.parametrize("fault", ["country a plain string", "ad_id int32", "missing column", "sid of int64",
                                   "null ad_id", "value outside the domain"])
def test_shard_rebuild_reads_changes_through_the_same_checks(tmp_path, fault):
    from gtmkit.indexer.update.rebuild import rebuild_shards
    index_dir = tmp_path / "idx"
    whole = tmp_path / "whole"
    whole.mkdir()
    pq.write_table(random_catalog(5, n_ads=60), whole / "cat.parquet")
    gtmkit.build_index(whole / "cat.parquet", index_dir, schema=schema_dict()).close()
    before = sorted(p.name for p in index_dir.iterdir())
    changes = _write(tmp_path, {1: fault}, seed=6)
    with pytest.raises(CatalogError) as read:
        read_catalog(changes, parse_schema(schema_dict()))
    with pytest.raises(CatalogError) as rebuilt:
        rebuild_shards(gtmkit.load_index(index_dir), changes)
    assert str(rebuilt.value) == str(read.value)
    assert sorted(p.name for p in index_dir.iterdir()) == before
