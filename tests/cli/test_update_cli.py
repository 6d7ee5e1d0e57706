"""`gtmkit update`: changed ads written as the index's new version, checked against the updated catalog by
`verify --catalog` and brute force; the slack a build sets, reported by `stats`; bad changes refused whole."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli
from gtmkit.inputs.schema import parse_schema
from gtmkit.matcher.matcher import Matcher
from gtmkit.testing.gtm import catalog_rows, eligible

from support.catalogs import random_catalog, random_user, schema_dict, write
from support.pause_cases import changes_for


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _updated_catalog(table, changes, left_out):
    """The catalog after the update, as one table: the edited rows replaced, the new ads (on known SIDs) added."""
    changed = set(changes.column("ad_id").to_pylist())
    keep = [i for i, x in enumerate(table.column("ad_id").to_pylist()) if x not in changed]
    applied = [i for i, x in enumerate(changes.column("ad_id").to_pylist()) if x not in set(left_out)]
    return pa.concat_tables([table.take(keep), changes.take(applied)])


def test_update_writes_a_version_that_verifies_against_the_updated_catalog(tmp_path):
    sd = schema_dict(L=3, V=6)
    schema = parse_schema(sd)
    table = random_catalog(3, n_ads=200, L=3, V=6, n_sids=60)
    cat = write(tmp_path, table, sd)
    out = tmp_path / "idx"
    assert run("build", cat, "-o", out, "--partition", "dynamic", "-s", "--slack", "0.5").exit_code == 0
    old = gtmkit.load_index(out)
    changes, after, left_out = changes_for(catalog_rows(table, schema), schema, 4, 12, 12, 3, L=3, V=6)
    pq.write_table(changes, tmp_path / "changes.parquet")
    r = run("update", out, tmp_path / "changes.parquet", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert (rep["edited"], rep["added"]) == (12, 12) and sorted(rep["new_sid_ad_ids"]) == sorted(left_out)
    assert rep["slack_left"] == 100 - 12
    s = json.loads(run("stats", out, "--json").stdout)
    assert s["ads"] == 212 and s["updates"] == {"applied": 1, "ads_added": 12, "slack_ads": 100, "slack_left": 88,
                                               "paused_ads": 0}
    updated = _updated_catalog(table, changes, left_out)
    write(tmp_path, updated, sd, "updated.parquet")
    r = run("verify", out, "--catalog", tmp_path / "updated.parquet")
    assert r.exit_code == 0, r.output
    r = run("verify", out, "--catalog", cat)  # the old catalog no longer matches
    assert r.exit_code == 1
    # the written version serves exactly the updated catalog; an index loaded before still serves the old one
    idx = gtmkit.load_index(out)
    assert idx.version != old.version and old.num_ads == 200
    rows = catalog_rows(updated, schema)
    rng = np.random.default_rng(2)
    m = Matcher(idx)
    users = [random_user(rng) for _ in range(4)]
    leaves = np.tile(np.arange(idx.first_leaf, idx.num_nodes), (4, 1))
    for b, (ads, rank) in enumerate(m.postfilter(leaves, [idx.encode_request(u) for u in users])):
        want = sorted((idx.find(ad["sid"]) - idx.first_leaf, ad["ad_id"]) for ad in rows if eligible(ad, users[b], schema))
        assert list(zip(rank.tolist(), ads.tolist())) == want


def test_update_past_the_slack_or_with_bad_rows_changes_nothing(tmp_path):
    sd = schema_dict(L=3, V=6)
    table = random_catalog(5, n_ads=100, L=3, V=6, n_sids=30)
    cat = write(tmp_path, table, sd)
    out = tmp_path / "idx"
    assert run("build", cat, "-o", out, "-s", "--slack", "0.05").exit_code == 0
    before = gtmkit.load_index(out).version
    many = random_catalog(6, n_ads=8, L=3, V=6, n_sids=8).to_pydict()
    many["ad_id"] = [10**7 + i for i in range(8)]
    many["sid"] = table.column("sid").to_pylist()[:8]
    pq.write_table(pa.table(many, schema=table.schema), tmp_path / "many.parquet")
    r = run("update", out, tmp_path / "many.parquet")
    assert r.exit_code == 1 and "rebuild" in r.output and "Traceback" not in r.output
    bad = dict(many, country=[["XX"]] * 8)  # a value outside the index's domain
    bad["ad_id"] = many["ad_id"][:8]
    pq.write_table(pa.table(bad, schema=table.schema), tmp_path / "bad.parquet")
    r = run("update", out, tmp_path / "bad.parquet")
    assert r.exit_code == 1 and "country" in r.output and "Traceback" not in r.output
    assert gtmkit.load_index(out).version == before


def test_a_sid_left_without_ads_is_pruned_after_a_reload(tmp_path):
    """Every ad of one SID moved to another: the updated artifact, loaded fresh, prunes that SID in CD (mask and
    step, GTM off) and its post-filter holds nothing there."""
    sd = schema_dict(L=3, V=6)
    table = random_catalog(8, n_ads=120, L=3, V=6, n_sids=30)
    cat = write(tmp_path, table, sd)
    out = tmp_path / "idx"
    assert run("build", cat, "-o", out, "-s").exit_code == 0
    sids = [tuple(s) for s in table.column("sid").to_pylist()]
    gone, target = sids[0], next(s for s in sids if s != sids[0])
    moved = [i for i, s in enumerate(sids) if s == gone]
    changes = table.take(moved).to_pydict()
    changes["sid"] = [list(target)] * len(moved)
    pq.write_table(pa.table(changes, schema=table.schema), tmp_path / "move.parquet")
    rep = json.loads(run("update", out, tmp_path / "move.parquet", "--json").stdout)
    assert rep["edited"] == len(moved) and rep["empty_sids"] >= 1
    idx = gtmkit.load_index(out)
    m = Matcher(idx)
    leaf = idx.find(gone)
    parent = idx.parent(leaf)
    req = idx.encode_request({})
    mask = m.mask(np.array([parent]), np.array([0]), [req], gtm=False)[0]
    tokens, nodes = idx.children(parent)
    for t, n in zip(tokens, nodes):  # a child's token is allowed iff its SID still holds an ad
        assert bool((mask[t >> 5] >> (t & 31)) & 1) == (len(idx.sid_ads(int(n))) > 0)
    assert not (mask[gone[-1] >> 5] >> (gone[-1] & 31)) & 1
    ads, _ = m.postfilter(np.array([[leaf]]), [req])[0]
    assert len(ads) == 0


def test_paused_ads_are_kept_by_the_artifact(tmp_path):
    """`gtmkit update --pause/--resume` writes the paused ads into the new version: a fresh load serves them
    paused (never returned; stats counts them), a later update keeps them, bad id files are refused whole."""
    sd = schema_dict(L=3, V=6)
    table = random_catalog(9, n_ads=80, L=3, V=6, n_sids=25)
    cat = write(tmp_path, table, sd)
    out = tmp_path / "idx"
    assert run("build", cat, "-o", out, "-s").exit_code == 0
    ids = table.column("ad_id").to_pylist()
    (tmp_path / "p.txt").write_text("# paused campaigns\n" + "\n".join(map(str, ids[:10])) + "\n\n")
    (tmp_path / "r.txt").write_text(f"{ids[0]}\n")
    r = run("update", out, "--pause", tmp_path / "p.txt", "--resume", tmp_path / "r.txt", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["paused_ads"] == 9
    assert json.loads(run("stats", out, "--json").stdout)["updates"]["paused_ads"] == 9
    idx = gtmkit.load_index(out)
    m = Matcher(idx)
    assert m.num_paused == 9 and m.paused_ads().tolist() == sorted(ids[1:10])
    leaves = np.tile(np.arange(idx.first_leaf, idx.num_nodes), (1, 1))
    got = {int(a) for ads, _ in m.postfilter(leaves, [idx.encode_request({})]) for a in ads}
    assert not got & set(ids[1:10])
    pq.write_table(table.slice(20, 5), tmp_path / "edit.parquet")  # an update keeps the pauses
    assert run("update", out, tmp_path / "edit.parquet").exit_code == 0
    assert Matcher(gtmkit.load_index(out)).num_paused == 9
    version = gtmkit.load_index(out).version
    for text, what in (("12x\n", "line 1"), (f"{max(ids) + 1}\n", "unknown ad id")):
        (tmp_path / "bad.txt").write_text(text)
        r = run("update", out, "--pause", tmp_path / "bad.txt")
        assert r.exit_code == 1 and what in r.output and "Traceback" not in r.output
    assert run("update", out).exit_code == 1
    assert gtmkit.load_index(out).version == version


def test_an_empty_change_set_changes_nothing(tmp_path):
    """A period without changes (a change file with the catalog's columns and no rows) is not an error: nothing is
    applied and no version written; a change file without the catalog's columns still is."""
    sd = schema_dict(L=3, V=5)
    table = random_catalog(6, n_ads=60, L=3, V=5, n_sids=20)
    out = tmp_path / "idx"
    assert run("build", write(tmp_path, table, sd), "-o", out, "-s").exit_code == 0
    version = gtmkit.load_index(out).version
    pq.write_table(table.slice(0, 0), tmp_path / "none.parquet")
    r = run("update", out, tmp_path / "none.parquet", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["written"] is False and (rep["edited"], rep["added"]) == (0, 0) and rep["version"] == version
    assert gtmkit.load_index(out).version == version
    m = Matcher(gtmkit.load_index(out))
    assert m.update_ads(table.slice(0, 0)).version == version and m.version == version
    pq.write_table(table.slice(0, 0).drop_columns(["age"]), tmp_path / "bad.parquet")
    r = CliRunner().invoke(cli, ["update", str(out), str(tmp_path / "bad.parquet")])
    assert r.exit_code == 1 and "age" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_id_files_that_are_not_regular_text_files_are_refused(tmp_path):
    """--pause / --resume read regular UTF-8 files only: a FIFO (which would block the command forever), a
    directory or undecodable bytes are one line each."""
    import os

    sd = schema_dict(L=3, V=5)
    out = tmp_path / "idx"
    assert run("build", write(tmp_path, random_catalog(7, n_ads=30, L=3, V=5, n_sids=10), sd), "-o", out,
               "-s").exit_code == 0
    os.mkfifo(tmp_path / "ids.fifo")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\n")
    for path, what in ((tmp_path / "ids.fifo", "not a regular file"), (tmp_path / "bad.txt", "not UTF-8"),
                       (tmp_path, "directory")):
        r = CliRunner().invoke(cli, ["update", str(out), "--pause", str(path)])
        assert r.exit_code in (1, 2) and what in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("Error:")


def test_rebuild_shards_adds_ads_on_new_sids_and_verifies(tmp_path):
    """--rebuild-shards: the ads on SIDs the index lacks are added (their subtrees rebuilt), edits and new ads on
    known SIDs applied in place; the version verifies against the whole changed catalog; pauses of new ads given
    in the same command are kept, an unknown id is refused before anything is written."""
    sd = schema_dict(L=3, V=8)
    schema = parse_schema(sd)
    table = random_catalog(5, n_ads=200, L=3, V=8, n_sids=50)
    cat = write(tmp_path, table, sd)
    out = tmp_path / "idx"
    assert run("build", cat, "-o", out, "--partition", "static", "--k", "2,2,2", "-s").exit_code == 0
    changes, _, left_out = changes_for(catalog_rows(table, schema), schema, 8, 10, 10, 5, L=3, V=8)
    pq.write_table(changes, tmp_path / "changes.parquet")
    (tmp_path / "bad.txt").write_text(f"{left_out[0]}\n777\n")
    before = gtmkit.load_index(out).version
    r = run("update", out, tmp_path / "changes.parquet", "--rebuild-shards", "--pause", tmp_path / "bad.txt")
    assert r.exit_code == 1 and "unknown ad id 777" in r.output and gtmkit.load_index(out).version == before
    (tmp_path / "pause.txt").write_text(f"{left_out[0]}\n")
    r = run("update", out, tmp_path / "changes.parquet", "--rebuild-shards", "--pause", tmp_path / "pause.txt",
            "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["written"] and rep["ads_on_new_sids"] == 0 and (rep["edited"], rep["added"]) == (10, 15)
    assert rep["rebuilt"]["subtrees"] >= 1 and rep["rebuilt"]["tasks"] >= 1 and rep["paused_ads"] == 1
    write(tmp_path, _updated_catalog(table, changes, []), sd, "updated.parquet")
    r = run("verify", out, "--catalog", tmp_path / "updated.parquet")
    assert r.exit_code == 0, r.output
    idx = gtmkit.load_index(out)
    assert idx.paused_ad_ids.tolist() == [left_out[0]] and idx.manifest["build"]["rebuilt"]["from_version"] == before
    s = run("stats", out)
    assert s.exit_code == 0 and "1 paused" in s.output and "first-token subtrees" in s.output
    r = run("update", out, tmp_path / "changes.parquet", "--workers", "2")
    assert r.exit_code == 2 and "--rebuild-shards" in r.output


def test_rebuild_shards_refuses_a_bad_scheduler_address_in_one_line(tmp_path):
    pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    sd = schema_dict(L=3, V=8)
    table = random_catalog(5, n_ads=60, L=3, V=8, n_sids=20)
    out = tmp_path / "idx"
    assert run("build", write(tmp_path, table, sd), "-o", out, "-s").exit_code == 0
    pq.write_table(table.slice(0, 5), tmp_path / "changes.parquet")
    for address in ("not a url", "foo://bar"):  # refused in one line before anything is read
        r = run("update", out, tmp_path / "changes.parquet", "--rebuild-shards", "--scheduler", address)
        assert r.exit_code == 1 and "not a Dask scheduler address" in r.output and "Traceback" not in r.output


@pytest.mark.slow  # starts a LocalCluster of two worker processes
def test_rebuild_shards_on_local_dask_workers_writes_the_same_arrays(tmp_path):
    pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    sd = schema_dict(L=3, V=8)
    schema = parse_schema(sd)
    table = random_catalog(6, n_ads=150, L=3, V=8, n_sids=40)
    cat = write(tmp_path, table, sd)
    changes, _, _ = changes_for(catalog_rows(table, schema), schema, 3, 6, 6, 8, L=3, V=8)
    pq.write_table(changes, tmp_path / "changes.parquet")
    sums = []
    for name, extra in (("here", []), ("dask", ["--workers", "2"])):
        assert run("build", cat, "-o", tmp_path / name, "-s").exit_code == 0
        r = run("update", tmp_path / name, tmp_path / "changes.parquet", "--rebuild-shards", "--json", *extra)
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["rebuilt"]["workers"] == (2 if extra else 1)
        sums.append({k: v["sha256"] for k, v in gtmkit.load_index(tmp_path / name).manifest["files"].items()})
    assert sums[0] == sums[1]
