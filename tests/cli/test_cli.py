"""CLI through CliRunner: build / stats / verify, bad input, corrupt artifacts, documented commands."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli
from gtmkit.artifact.container import manifest_path

from support.catalogs import random_catalog, schema_dict, write


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture()
def catalog(tmp_path):
    return write(tmp_path, random_catalog(11, n_ads=80), schema_dict())


def _leftovers(parent, name):
    return [p.name for p in parent.iterdir() if name in p.name]


def test_build_stats_verify(tmp_path, catalog):
    out = tmp_path / "idx"
    r = run("build", catalog, "-o", out, "--partition", "static", "--k", "1,2,2", "-s")
    assert r.exit_code == 0, r.output
    assert "SIDs" in r.output and "level" in r.output
    r = run("stats", out, "--json")
    s = json.loads(r.stdout)
    assert s["ads"] == 80 and s["partition"]["mode"] == "static" and len(s["levels"]) == 3
    assert set(s["build_seconds"]) >= {"read", "trie", "rows", "partitions", "dedup", "write", "total"}
    r = run("verify", out, "--catalog", catalog)
    assert r.exit_code == 0 and r.stdout.startswith("OK"), r.output
    r = run("verify", out, "--json")
    assert json.loads(r.stdout)["ok"] is True
    r = run("build", catalog, "-o", out)
    assert r.exit_code == 1 and "already exists" in r.output
    assert run("build", catalog, "-o", out, "-f", "--partition", "dynamic", "--target-fill", "0.3",
               "--k-max", "3", "--json").exit_code == 0


def test_stats_plot(tmp_path, catalog):
    pytest.importorskip("matplotlib", reason="needs the plot extra: pip install 'gtmkit[plot]'")
    out = tmp_path / "idx"
    assert run("build", catalog, "-o", out, "-s").exit_code == 0
    r = run("stats", out, "--plot", tmp_path / "s.png")
    assert r.exit_code == 0 and (tmp_path / "s.png").stat().st_size > 1000


def test_build_needs_a_schema(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(random_catalog(1), path)
    r = run("build", path, "-o", tmp_path / "idx")
    assert r.exit_code == 1 and "a schema is needed" in r.output
    assert not (tmp_path / "idx").exists()


def _bad(table, **changes):
    for name, values in changes.items():
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, values) if values is not None else table.remove_column(i)
    return table


BAD_CASES = {
    "missing column": (lambda t: _bad(t, age=None), "missing column 'age'"),
    "wrong type": (lambda t: _bad(t, gender=pa.array(np.arange(t.num_rows))), "column 'gender' has type int64"),
    "short SID": (lambda t: _bad(t, sid=pa.array([[1, 2, 3]] * 5 + [[1, 2]] + [[1, 2, 3]] * (t.num_rows - 6),
                                                  pa.list_(pa.int32()))), "column 'sid', row 5: SID has 2 tokens, expected 3"),
    "token range": (lambda t: _bad(t, sid=pa.array([[1, 2, 3]] * 7 + [[1, 9, 3]] + [[1, 2, 3]] * (t.num_rows - 8),
                                                    pa.list_(pa.int32()))), "column 'sid', row 7: token 9 outside [0, 6)"),
    "null SID": (lambda t: _bad(t, sid=pa.array([[1, 2, 3]] * 3 + [None] + [[1, 2, 3]] * (t.num_rows - 4),
                                                 pa.list_(pa.int32()))), "column 'sid', row 3: null SID"),
    "duplicate ad_id": (lambda t: _bad(t, ad_id=pa.array(list(range(t.num_rows - 1)) + [4], pa.int64())),
                        "column 'ad_id', row 79: duplicate ad_id 4 (first at row 4)"),
    "not in domain": (lambda t: _bad(t, country=pa.array([["US"]] * 9 + [["ZZ"]] + [["US"]] * (t.num_rows - 10),
                                                         pa.list_(pa.string()))),
                      "column 'country', row 9: value 'ZZ' is not in the schema's domain"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_catalog(tmp_path, case):
    mutate, message = BAD_CASES[case]
    path = write(tmp_path, mutate(random_catalog(2, n_ads=80)), schema_dict())
    r = run("build", path, "-o", tmp_path / "idx", "-s")
    assert r.exit_code == 1, r.output
    assert message in r.stderr and str(path) in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.output and r.stdout == ""
    assert not (tmp_path / "idx").exists() and not _leftovers(tmp_path, "idx")


def test_unknown_schema_key_and_bad_file(tmp_path):
    sd = schema_dict()
    sd["bitmask"]["age"]["domian"] = ["x"]
    path = write(tmp_path, random_catalog(3), sd)
    r = run("build", path, "-o", tmp_path / "idx")
    assert r.exit_code == 1 and "unknown schema key 'domian' in bitmask.age" in r.output
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"this is not parquet")
    (tmp_path / "junk.schema.json").write_text(json.dumps(schema_dict()))
    r = run("build", junk, "-o", tmp_path / "idx")
    assert r.exit_code == 1 and "not a readable Parquet file" in r.output
    r = run("build", tmp_path / "nope.parquet", "--schema", tmp_path / "junk.schema.json", "-o", tmp_path / "idx")
    assert r.exit_code == 1 and "no such file" in r.output
    assert not (tmp_path / "idx").exists()


def _corrupt_flip(d):
    p = d / "child_tokens.npy"
    b = bytearray(p.read_bytes())
    b[-1] ^= 0xFF
    p.write_bytes(bytes(b))


def _corrupt_truncate(d):
    p = d / "bitmask_table.npy"
    p.write_bytes(p.read_bytes()[:-8])


def _corrupt_version(d):
    m = json.loads((d / "manifest.json").read_text())
    m["format_version"] = 99
    (d / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("corrupt,message,fatal_without_checksums", [
    (_corrupt_flip, "checksum mismatch", False),
    (_corrupt_truncate, "truncated", True),
    (_corrupt_version, "version 99", True),
])
def test_corrupt_index_is_refused(tmp_path, catalog, corrupt, message, fatal_without_checksums):
    out = tmp_path / "idx"
    gtmkit.build_index(catalog, out)
    corrupt(manifest_path(out).parent)  # the files of the version the path serves
    with pytest.raises(gtmkit.ArtifactError, match=message):
        gtmkit.load_index(out)
    if fatal_without_checksums:
        with pytest.raises(gtmkit.ArtifactError):
            gtmkit.load_index(out, verify=False)
    r = run("verify", out)
    assert r.exit_code == 1 and message in r.output
    r = run("stats", out) if fatal_without_checksums else None
    if r is not None:
        assert r.exit_code == 1 and "Traceback" not in r.output


def test_verify_catches_wrong_content(tmp_path, catalog):
    """A consistent, checksummed index built from another catalog fails the recomputation."""
    out = tmp_path / "idx"
    gtmkit.build_index(catalog, out)
    other = write(tmp_path, random_catalog(12, n_ads=80), schema_dict(), "other.parquet")
    r = run("verify", out, "--catalog", other)
    assert r.exit_code == 1 and "FAIL" in r.output


def test_every_command_has_help_with_example():
    def walk(group, prefix):
        for name, cmd in group.commands.items():
            yield prefix + [name], cmd
            if hasattr(cmd, "commands"):
                yield from walk(cmd, prefix + [name])

    seen = 0
    for path, cmd in walk(cli, []):
        r = run(*path, "-h")
        assert r.exit_code == 0, path
        if not hasattr(cmd, "commands"):
            assert "Example:" in r.output, path
            seen += 1
    assert seen >= 5
    assert gtmkit.__version__ in run("--version").output
