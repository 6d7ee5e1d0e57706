"""A new user's own index in `gtmkit match` and `gtmkit eval`: beam sizes fitted to the SID length by default, a
wrong --beams named, and eval without synthetic users pointing to --users-file and its format."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli

from support.catalogs import random_catalog, schema_dict, write


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def index3(tmp_path_factory):
    d = tmp_path_factory.mktemp("own")
    gtmkit.build_index(write(d, random_catalog(1, n_ads=80, L=3, V=6), schema_dict(L=3, V=6)), d / "idx")
    return d / "idx"


def test_match_fits_its_beams_to_the_sid_length(index3):
    r = run("match", index3, "--user", '{"country": "US"}', "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["sids_returned"] > 0


@pytest.mark.parametrize("cmd", ["match", "eval"])
def test_a_wrong_beams_names_the_flag(index3, cmd):
    extra = ["--user", '{"country": "US"}'] if cmd == "match" else []
    r = run(cmd, index3, *extra, "--beams", "1,512,1024,1024")
    assert r.exit_code == 1 and "--beams" in r.output and "3 sizes" in r.output
    assert len(r.output.strip().splitlines()[-1]) > 20 and "Traceback" not in r.output


def test_eval_without_synthetic_users_explains_users_file(index3, tmp_path):
    r = run("eval", index3, "-s")
    assert r.exit_code == 1 and "--users-file" in r.output and "JSON object a line" in r.output
    users = tmp_path / "users.jsonl"
    users.write_text(json.dumps({"country": "US", "age": "25-34"}) + "\n" + json.dumps({"location": ["US"]}) + "\n")
    r = run("eval", index3, "--users-file", users, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["beams"] == [1, 512, 1024]


def test_the_demo_hint_names_a_path_that_exists(tmp_path):
    r = run("demo", "--ads", 3000, "--users", 2, "--device", "cpu", "-s")
    assert r.exit_code == 0, r.output
    hint = r.output.strip().splitlines()[-1]
    assert "--workdir" in hint and "gtmkit-demo-" not in hint
    r = run("demo", "--ads", 3000, "--users", 2, "--device", "cpu", "-s", "--workdir", tmp_path / "d")
    hint = r.output.strip().splitlines()[-1]
    path = hint.split("gtmkit match ")[1].split(" --user")[0]
    assert r.exit_code == 0 and (tmp_path / "d" / "index").samefile(path)


def test_synth_parts_below_the_minimum_warn(tmp_path):
    from gtmkit.synth.catalog import parts_written
    r = CliRunner().invoke(cli, ["synth", "catalog", "--ads", "3000", "--parts", "4", "-o", str(tmp_path / "c/"), "-s"])
    assert r.exit_code == 0 and "4 parts asked" in r.output and "make 1" in r.output
    assert len(list((tmp_path / "c").glob("*.parquet"))) == parts_written(3000, 4) == 1


def test_a_wide_bitmask_attribute_is_warned_at_build_and_noted_in_stats(tmp_path, caplog, index3):
    import logging

    import pyarrow as pa
    t = random_catalog(3, n_ads=400, L=3, V=6)
    d = t.to_pydict()
    d["country"] = [[f"C{i:04d}"] for i in range(t.num_rows)]  # 400 values: past the 256 a bitmask should hold
    d["country_exclude"] = [[] for _ in range(t.num_rows)]
    sd = schema_dict(L=3, V=6, domain=False)
    cat = write(tmp_path, pa.table(d, schema=t.schema), sd)
    r = CliRunner().invoke(cli, ["build", str(cat), "-o", str(tmp_path / "idx")])
    assert r.exit_code == 0
    assert "warning: bitmask attribute 'country' (400 values" in r.output and "Bloom" in r.output
    s = run("stats", tmp_path / "idx")
    assert "note" in s.output and "'country' (400 values" in s.output
    assert json.loads(run("stats", tmp_path / "idx", "--json").output)["wide_bitmask"] == {"country": 400}
    with caplog.at_level(logging.WARNING, logger="gtmkit"):
        gtmkit.build_index(cat, tmp_path / "idx2")
    assert any("'country' (400 values" in rec.message for rec in caplog.records)
    assert "wide_bitmask" not in gtmkit.load_index(index3).stats()  # a narrow attribute is not noted
