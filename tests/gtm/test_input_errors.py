"""Bad catalogs, schemas, requests, user files and trie keys: each ends in ONE line of the right
GtmkitError subclass naming the file, column, row or key, before the build's heavy work; the CLI prints
that line with exit code 1 and leaves no output behind."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtmkit.cli import cli
from gtmkit.errors import CatalogError, GtmkitError, RequestError, SchemaError
from gtmkit.inputs.schema import Schema, parse_schema
from gtmkit.indexer import budget
from gtmkit.indexer.build import build_index
from gtmkit.inputs.keys import key_arrays

from support.catalogs import random_catalog, schema_dict, write

N = 40


@contextlib.contextmanager
def no_hang(seconds=20):
    """A blocking open (a FIFO read as a file) fails the test instead of hanging the run."""
    def _alarm(*_):
        raise AssertionError("blocked: the input was opened although it is not a regular file")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def one_line(msg: str) -> str:
    assert "\n" not in msg.strip() and "Traceback" not in msg, msg
    return msg


def run_fails(*args) -> str:
    """Run the CLI, expect exit 1 with one line on stderr and nothing on stdout; -> that line."""
    with no_hang():
        r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code == 1, (r.exit_code, r.output, r.exception)
    assert r.stdout == "" and r.stderr.count("\n") == 1, r.output
    return one_line(r.stderr)


def nothing_left(tmp_path, name="idx"):
    assert not [p.name for p in tmp_path.iterdir() if name in p.name]


def _set(table, name, arr):
    return table.set_column(table.schema.get_field_index(name), name, arr)


def _bad_utf8(i):
    return pa.array([b"US"] * i + [b"\xffUS"] + [b"US"] * (N - i - 1), pa.binary()).view(pa.string())


def _as_lists(strings):
    return pa.ListArray.from_arrays(pa.array(np.arange(N + 1, dtype=np.int32)), strings)


def _sids(row, bad, typ=pa.int32()):
    return pa.array([[1, 2, 3]] * row + [bad] + [[1, 2, 3]] * (N - row - 1), pa.list_(typ))


# name: (table -> bad table, column, text the one line must hold)
CATALOG_CASES = {
    "utf8 in a string column": (lambda t: _set(t, "country", _bad_utf8(5)), "country", "row 5: a string is not valid UTF-8"),
    "utf8 in a list column": (lambda t: _set(t, "age", _as_lists(_bad_utf8(6))), "age", "row 6: a string is not valid UTF-8"),
    "utf8 in an exclude column": (lambda t: _set(t, "location_exclude", _as_lists(_bad_utf8(7))), "location_exclude",
                                  "row 7: a string is not valid UTF-8"),
    "utf8 in a bloom column": (lambda t: _set(t, "location", _as_lists(_bad_utf8(8))), "location",
                               "row 8: a string is not valid UTF-8"),
    "sid of floats": (lambda t: _set(t, "sid", pa.array([[1.0, 2.0, 3.0]] * N)), "sid", "has type list<element: double>"),
    "sid as strings": (lambda t: _set(t, "sid", pa.array(["1,2,3"] * N)), "sid", "has type string, expected list<int>"),
    "ad_id as strings": (lambda t: _set(t, "ad_id", pa.array([str(i) for i in range(N)])), "ad_id", "has type string"),
    "attribute of ints": (lambda t: _set(t, "gender", pa.array([[1]] * N, pa.list_(pa.int64()))), "gender",
                          "has type list<element: int64>, expected list<string>"),
    "attribute of bytes": (lambda t: _set(t, "gender", pa.array([b"f"] * N, pa.binary())), "gender", "has type binary"),
    "null SID": (lambda t: _set(t, "sid", _sids(3, None)), "sid", "row 3: null SID"),
    "null token": (lambda t: _set(t, "sid", _sids(4, [1, None, 3])), "sid", "row 4: null token"),
    "null ad_id": (lambda t: _set(t, "ad_id", pa.array(list(range(9)) + [None] + list(range(10, N)), pa.int64())),
                   "ad_id", "row 9: null ad_id"),
    "null string in a list": (lambda t: _set(t, "age", pa.array([["18-24"]] * 2 + [["18-24", None]] + [[]] * (N - 3),
                                                                pa.list_(pa.string()))), "age", "row 2: null string"),
    "uint64 token": (lambda t: _set(t, "sid", _sids(6, [1, 2**64 - 1, 3], pa.uint64())), "sid",
                     "row 6: token 18446744073709551615 outside [0, 6)"),
    "int64 token": (lambda t: _set(t, "sid", _sids(2, [1, 2, 2**40], pa.int64())), "sid", "row 2: token 1099511627776"),
    "negative token": (lambda t: _set(t, "sid", _sids(1, [-3, 2, 1])), "sid", "row 1: token -3 outside [0, 6)"),
    "short SID": (lambda t: _set(t, "sid", _sids(5, [1, 2])), "sid", "row 5: SID has 2 tokens, expected 3"),
    "long SID": (lambda t: _set(t, "sid", _sids(0, [1, 2, 3, 4])), "sid", "row 0: SID has 4 tokens"),
    "duplicate ad_id": (lambda t: _set(t, "ad_id", pa.array(list(range(N - 1)) + [4], pa.int64())), "ad_id",
                        f"row {N - 1}: duplicate ad_id 4 (first at row 4)"),
    "ad_id overflows int64": (lambda t: _set(t, "ad_id", pa.array(list(range(N - 1)) + [2**64 - 1], pa.uint64())),
                              "ad_id", f"row {N - 1}: ad_id 18446744073709551615 does not fit int64"),
    "missing column": (lambda t: t.remove_column(t.schema.get_field_index("gender")), "gender", "missing column"),
    "no rows": (lambda t: t.slice(0, 0), None, "the catalog has no rows"),
}


@pytest.mark.parametrize("case", sorted(CATALOG_CASES))
def test_bad_catalog_library_and_cli(tmp_path, case):
    mutate, column, text = CATALOG_CASES[case]
    path = write(tmp_path, mutate(random_catalog(2, n_ads=N)), schema_dict())
    with pytest.raises(CatalogError) as e:
        build_index(path, tmp_path / "idx")
    msg = one_line(str(e.value))
    assert str(path) in msg and text in msg and (column is None or f"'{column}'" in msg), msg
    nothing_left(tmp_path)
    line = run_fails("build", path, "-o", tmp_path / "idx", "-s")
    assert text in line and str(path) in line
    nothing_left(tmp_path)


def _fifo(tmp_path):
    p = tmp_path / "fifo.parquet"
    os.mkfifo(p)
    return p


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "empty file", "not parquet", "missing"])
def test_catalog_must_be_a_readable_regular_file(tmp_path, kind):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(schema_dict()))
    if kind == "fifo":
        path, text = _fifo(tmp_path), "not a regular file"
    elif kind == "directory":
        path, text = tmp_path / "d.parquet", "a directory without Parquet files"  # a folder is a dataset
        path.mkdir()
    elif kind == "device":
        path, text = "/dev/zero", "not a regular file"
    elif kind == "missing":
        path, text = tmp_path / "nope.parquet", "no such file"
    else:
        path, text = tmp_path / "x.parquet", "not a readable Parquet file"
        path.write_bytes(b"" if kind == "empty file" else b"PAR1 this is not parquet at all PAR1")
    with no_hang(), pytest.raises(CatalogError, match=text) as e:
        build_index(path, tmp_path / "idx", schema=schema)
    assert str(path) in one_line(str(e.value))
    assert text in run_fails("build", path, "--schema", schema, "-o", tmp_path / "idx", "-s")
    nothing_left(tmp_path)


# --- schemas --------------------------------------------------------------------------------------

def _edit(fn):
    d = schema_dict()
    fn(d)
    return d


SCHEMA_CASES = {
    "bits not a multiple of 64": (lambda d: d["bloom"]["location"].update(bits=100), "bloom.location.bits"),
    "bits 2**40": (lambda d: d["bloom"]["location"].update(bits=2**40), "bloom.location.bits"),
    "bits a string": (lambda d: d["bloom"]["location"].update(bits="256"), "bloom.location.bits"),
    "hashes 0": (lambda d: d["bloom"]["location"].update(hashes=0), "bloom.location.hashes"),
    "hashes huge": (lambda d: d["bloom"]["location"].update(hashes=10**30), "bloom.location.hashes"),
    "seed negative": (lambda d: d["bloom"]["location"].update(seed=-1), "bloom.location.seed"),
    "seed past 32 bits": (lambda d: d["bloom"]["location"].update(seed=2**32), "bloom.location.seed"),
    "seed a float": (lambda d: d["bloom"]["location"].update(seed=1.5), "bloom.location.seed"),
    "length 0": (lambda d: d["sid"].update(length=0), "sid.length"),
    "length true": (lambda d: d["sid"].update(length=True), "sid.length"),
    "vocab 2**31": (lambda d: d["sid"].update(vocab=2**31), "sid.vocab"),
    "vocab negative": (lambda d: d["sid"].update(vocab=-4), "sid.vocab"),
    "domain a string": (lambda d: d["bitmask"]["age"].update(domain="18-24"), "bitmask.age.domain"),
    "domain of ints": (lambda d: d["bitmask"]["age"].update(domain=["18-24", 3]), "bitmask.age.domain[1]"),
    "domain repeats": (lambda d: d["bitmask"]["age"].update(domain=["a", "b", "a"]), "bitmask.age.domain lists 'a' twice"),
    "domain surrogate": (lambda d: d["bitmask"]["age"].update(domain=["a", "\ud800"]), "bitmask.age.domain[1]"),
    "column not a string": (lambda d: d["bitmask"]["age"].update(column=7), "bitmask.age.column"),
    "column with a newline": (lambda d: d["bitmask"]["age"].update(column="a\nb"), "bitmask.age.column"),
    "exclude_column == column": (lambda d: d["bitmask"]["country"].update(exclude_column="country"),
                                 "bitmask.country.exclude_column is the attribute's own column"),
    "bloom exclude_column == column": (lambda d: d["bloom"]["location"].update(exclude_column="location"),
                                       "bloom.location.exclude_column"),
    "two attributes one column": (lambda d: d["bitmask"]["age"].update(column="gender"),
                                  "column 'gender' is used by both bitmask.age.column and bitmask.gender.column"),
    "attribute reads the sid": (lambda d: d["bitmask"]["age"].update(column="sid"), "column 'sid' is used by both"),
    "exclude reads another attribute": (lambda d: d["bitmask"]["country"].update(exclude_column="location"),
                                        "column 'location' is used by both"),
    "ad_id reads the sid": (lambda d: d.update(ad_id="sid"), "column 'sid' is used by both ad_id and sid.column"),
    "unknown key": (lambda d: d.update(colour=1), "unknown schema key 'colour'"),
    "unknown attribute key": (lambda d: d["bitmask"]["age"].update(domian=[]), "unknown schema key 'domian' in bitmask.age"),
    "bitmask a list": (lambda d: d.update(bitmask=[["age"]]), "bitmask must be a JSON object"),
    "attribute named _x": (lambda d: d["bitmask"].update(_x={}), "must not start with '_'"),
    "static k a float": (lambda d: d.update(partition={"mode": "static", "k": 2.5}), "static k"),
    "target_fill huge": (lambda d: d.update(partition={"mode": "dynamic", "target_fill": 10**400}), "target_fill"),
    "meta not JSON": (lambda d: d.update(meta={"x": float("nan")}), "meta cannot be written as JSON"),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
def test_bad_schema_library_and_cli(tmp_path, case):
    edit, text = SCHEMA_CASES[case]
    d = _edit(edit)
    with pytest.raises(SchemaError) as e:
        parse_schema(copy.deepcopy(d))
    assert text in one_line(str(e.value)), str(e.value)
    if case == "meta not JSON":
        return  # no JSON file can hold it
    path = write(tmp_path, random_catalog(3, n_ads=N), {})
    schema_file = tmp_path / "catalog.schema.json"
    schema_file.write_text(json.dumps(d))
    line = run_fails("build", path, "-o", tmp_path / "idx", "-s")
    assert text in line and str(schema_file) in line
    nothing_left(tmp_path)


@pytest.mark.parametrize("content,text", [
    (b'{"sid": {"column": "s\xff"}}', "schema is not UTF-8 text (byte 21"),
    (b'{"sid": ', "not valid JSON (line 1 column 9"),
    (b"[" * 100000, "not valid JSON (nested too deeply)"),
    (b'{"sid": {"vocab": ' + b"9" * 5000 + b"}}", "not valid JSON (Exceeds the limit"),
    (b'{"bitmask": {"age": {}, "age": {}}}', "key 'age' appears twice"),
])
def test_bad_schema_file(tmp_path, content, text):
    path = write(tmp_path, random_catalog(3, n_ads=N), {})
    schema_file = tmp_path / "catalog.schema.json"
    schema_file.write_bytes(content)
    with pytest.raises(SchemaError, match="^" + str(schema_file)) as e:
        build_index(path, tmp_path / "idx")
    assert text in one_line(str(e.value))
    assert text in run_fails("build", path, "-o", tmp_path / "idx", "-s")
    nothing_left(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_schema_fifo_is_refused(tmp_path):
    path = write(tmp_path, random_catalog(3, n_ads=N), schema_dict())
    assert "not a regular file" in run_fails("build", path, "--schema", _fifo(tmp_path), "-o", tmp_path / "idx")
    nothing_left(tmp_path)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from([0, 1, 64, 256, 2**31, 2**32])
    | st.floats(allow_nan=True) | st.text(max_size=6) | st.sampled_from(["sid", "country", "ad_id", "\ud800", "_x"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)

SCHEMA_PATHS = [(), ("ad_id",), ("sid",), ("sid", "column"), ("sid", "length"), ("sid", "vocab"), ("bitmask",),
                ("bitmask", "age"), ("bitmask", "age", "column"), ("bitmask", "country", "exclude_column"),
                ("bitmask", "age", "domain"), ("bloom",), ("bloom", "location"), ("bloom", "location", "bits"),
                ("bloom", "location", "hashes"), ("bloom", "location", "seed"), ("bloom", "location", "column"),
                ("bloom", "location", "exclude_column"), ("partition",), ("partition", "mode"), ("partition", "k"),
                ("partition", "target_fill"), ("partition", "k_max"), ("meta",), ("extra",), ("bitmask", "new")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.sampled_from(SCHEMA_PATHS), json_values), min_size=1, max_size=3),
       mode=st.sampled_from([None, "static", "dynamic"]))
def test_random_schemas_are_valid_or_one_schema_error(edits, mode):
    d = schema_dict(partition={"mode": mode} if mode else None)
    for path, value in edits:
        node = d
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not path:
            d = value
        elif isinstance(node, dict):
            node[path[-1]] = value
    try:
        s = parse_schema(d)
    except SchemaError as exc:
        one_line(str(exc))
        return
    assert isinstance(s, Schema)
    again = parse_schema(json.loads(json.dumps(s.to_dict())))  # what the manifest records reads back the same
    assert again == s


# --- sizes ----------------------------------------------------------------------------------------

def test_build_too_large_for_memory_is_refused_before_reading(tmp_path, monkeypatch):
    sd = schema_dict(bits=1 << 20)
    path = write(tmp_path, random_catalog(4, n_ads=N), sd)
    monkeypatch.setattr(budget, "physical_memory", lambda: 1 << 20)
    need = budget.build_bytes(N, 3, 1 + (1 << 20) // 64)
    with pytest.raises(CatalogError) as e:
        build_index(path, tmp_path / "idx")
    msg = one_line(str(e.value))
    assert f"{path}: building an index of {N} ads would need at least" in msg and f"({need} bytes)" in msg
    assert f"({need} bytes)" in run_fails("build", path, "-o", tmp_path / "idx", "-s")
    nothing_left(tmp_path)


def test_rows_too_wide_for_memory_are_refused_once_domains_are_known(tmp_path, monkeypatch):
    t = random_catalog(5, n_ads=N)
    values = [[f"v{i}-{j}" for j in range(200)] for i in range(N)]  # 8000 inferred values: 126 words a row
    t = _set(t, "age", pa.array(values, pa.list_(pa.string())))
    path = write(tmp_path, t, schema_dict(domain=False))
    monkeypatch.setattr(budget, "physical_memory", lambda: 20000)  # above the estimate before reading
    with pytest.raises(CatalogError, match="targeting bits each would need at least") as e:
        build_index(path, tmp_path / "idx")
    assert str(path) in one_line(str(e.value))
    nothing_left(tmp_path)


# --- requests -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def index(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("idx")
    return build_index(write(tmp, random_catalog(6, n_ads=N), schema_dict()), tmp / "idx")


REQUEST_CASES = [
    ({"country": "\ud800"}, "'country': value 0 holds a lone surrogate '\\ud800'"),
    ({"location": ["US", "x\udcff"]}, "'location': value 1 holds a lone surrogate"),
    ({"country": b"US"}, "'country': expected a string or a list of strings, got bytes b'US'"),
    ({"age": [["18-24"]]}, "'age': expected a string or a list of strings, got list"),
    ({"age": ["18-24", None]}, "'age': expected a string or a list of strings, got NoneType"),
    ({"gender": 1}, "'gender': expected a string or a list of strings, got int 1"),
    ({"location": 2.5}, "'location': expected a string or a list of strings, got float 2.5"),
    ({"location": {"US": 1}}, "'location': expected a string or a list of strings, got dict"),
    ({"colour": "red"}, "unknown request attribute 'colour'"),
    ({7: "x"}, "unknown request attribute 7"),
    (None, "a request must be a JSON object"),
    (["US"], "a request must be a JSON object"),
]


@pytest.mark.parametrize("user,text", REQUEST_CASES)
def test_bad_request(index, user, text):
    with pytest.raises(RequestError) as e:
        index.encode_request(user)
    assert text in one_line(str(e.value))


def test_null_value_is_an_absent_attribute(index):
    a, b = index.encode_request({"country": None, "age": "18-24"}), index.encode_request({"age": "18-24"})
    assert np.array_equal(a.bitmask, b.bitmask)
    assert all(np.array_equal(x, y) for x, y in zip(a.bloom_sigs + a.bloom_codes, b.bloom_sigs + b.bloom_codes))


@pytest.mark.parametrize("user,text", [
    ('{"country": "\\ud800"}', "--user: request attribute 'country': value 0 holds a lone surrogate"),
    ('{"country": ', "--user: not valid JSON"),
    ('["US"]', "--user: a user must be a JSON object"),
    ('{"age": 25}', "--user: request attribute 'age': expected a string"),
    ('{"colour": "red"}', "--user: unknown request attribute 'colour'"),
])
def test_match_bad_user(index, user, text):
    assert text in run_fails("match", index.path, "--user", user)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_match_and_eval_user_files(index, tmp_path):
    bad = tmp_path / "u.json"
    bad.write_bytes(b'{"age": "\xff"}')
    assert f"{bad}: user file is not UTF-8 text" in run_fails("match", index.path, "--user", f"@{bad}")
    assert f"{bad}: users file is not UTF-8 text" in run_fails("eval", index.path, "--users-file", bad)
    fifo = _fifo(tmp_path)
    assert "not a regular file" in run_fails("match", index.path, "--user", f"@{fifo}")
    assert "not a regular file" in run_fails("eval", index.path, "--users-file", fifo)
    bad.write_text('{"age": "18-24"}\n\n{"location": ["\\ud800"]}\n')
    line = run_fails("eval", index.path, "--users-file", bad)
    assert f"{bad}: line 3: request attribute 'location': value 0 holds a lone surrogate" in line
    bad.write_text('{"age": "18-24"}\n[1, 2]\n')
    assert f"{bad}: line 2: a user must be a JSON object, got list" in run_fails("eval", index.path, "--users-file", bad)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_synth_users_bad_schema(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_bytes(b'{"sid": "\xfe"}')
    assert f"{bad}: schema is not UTF-8 text" in run_fails("synth", "users", "--schema", bad)
    assert "not a regular file" in run_fails("synth", "users", "--schema", _fifo(tmp_path))
    bad.write_text('{"sid": {"length": 3, "vocab": "many"}, "bitmask": {"a": {}}, "meta": {"world_seed": 0}}')
    assert f"{bad}: sid.vocab must be an integer" in run_fails("synth", "users", "--schema", bad)
    sd = schema_dict()
    sd["meta"] = {"generator": "gtmkit synth catalog", "world_seed": 0, "vocab": 10**12}
    bad.write_text(json.dumps(sd))
    assert "meta.vocab 1000000000000 differs from sid.vocab 6" in run_fails("synth", "users", "--schema", bad)


# --- succinct-trie keys ---------------------------------------------------------------------------

@pytest.mark.parametrize("keys,text", [
    ([[1, 2], [3, [4]]], "tokens must be integers: key 1 has [4] at position 1"),
    ([[1], [2.5]], "tokens must be integers: key 1 has 2.5"),
    ([[1], [2**64 - 1]], "key 1 has token above 2^31-1 18446744073709551615 at position 0"),
    ([[1], [2**70]], "key 1 has token above 2^31-1 1180591620717411303424"),
    ([[True], [False]], "tokens must be integers: key 0 has True"),
    ([[1], []], "key 1 is empty"),
    ([[1], "ab"], "key 1 is not a sequence of integers"),
    ([], "no keys"),
    (pa.array([[1], [2**64 - 1]], pa.list_(pa.uint64())), "key 1 has token above 2^31-1 18446744073709551615"),
    (pa.array([[1], None]), "key 1 is null"),
    (pa.array([["a"]]), "tokens must be integers"),
])
def test_bad_trie_keys(keys, text):
    with pytest.raises(GtmkitError) as e:
        key_arrays(keys)
    assert text in one_line(str(e.value))


@pytest.mark.parametrize("column,values,text", [
    ("key", pa.array([[1], [2**64 - 1]], pa.list_(pa.uint64())), "column 'key': row 1 has token above 2^31-1 "
                                                                  "18446744073709551615"),
    ("key", pa.array([[1], []], pa.list_(pa.int32())), "column 'key': row 1 is empty"),
    ("key", pa.array([[1], None], pa.list_(pa.int32())), "column 'key': row 1 is null"),
    ("key", pa.array(["a", "b"]), "column 'key': need a pyarrow list array of integers"),
    ("nope", pa.array([[1]]), "no column 'nope'"),
])
def test_trie_build_bad_keys_file(tmp_path, column, values, text):
    path = tmp_path / "keys.parquet"
    pq.write_table(pa.table({"key": values}), path)
    line = run_fails("trie", "build", path, "--column", column, "-o", tmp_path / "trie")
    assert text in line and str(path) in line
    nothing_left(tmp_path, "trie")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_trie_inputs_must_be_regular_files(tmp_path):
    fifo = _fifo(tmp_path)
    assert "not a regular file" in run_fails("trie", "build", fifo, "-o", tmp_path / "trie")
    nothing_left(tmp_path, "trie")
    keys = tmp_path / "keys.parquet"
    pq.write_table(pa.table({"key": pa.array([[1, 2], [3]], pa.list_(pa.int32()))}), keys)
    assert CliRunner().invoke(cli, ["trie", "build", str(keys), "-o", str(tmp_path / "trie"), "-s"]).exit_code == 0
    assert "not a regular file" in run_fails("trie", "search", tmp_path / "trie", "--proposals", fifo, "--bw", 2)
