"""Shard rebuilds (indexer/update/rebuild.py): ads on SIDs the trie lacks added by rebuilding only the first-token
subtrees they fall in. When every change is on such a SID, the new version's arrays are a fresh build's of the
changed catalog, byte for byte, in every partition mode, from a single-process or a sharded base; mixed with edits
applied in place, the post-filter equals brute force over the changed catalog; failures write nothing."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gtmkit
from gtmkit.errors import RequestError, UpdateError
from gtmkit.inputs.schema import parse_schema
from gtmkit.indexer.update import rebuild as rebuild_mod
from gtmkit.matcher.matcher import Matcher
from gtmkit.testing.gtm import catalog_rows

from support.catalogs import random_catalog, random_user, schema_dict, write
from support.indexes import MODES
from support.exact import serves_exactly
from support.pause_cases import changes_for


def _checksums(index) -> dict:
    return {name: f["sha256"] for name, f in index.manifest["files"].items()}


def _no_bloom(table, sd):
    sd = dict(sd)
    del sd["bloom"]
    return table.drop_columns(["location", "location_exclude"]), sd


def _to_new_sids(table, seed: int, moved: int, new: int, V: int, L: int):
    """(changes, catalog after): `moved` ads given SIDs the catalog lacks (targeting kept) and `new` ads, copies of
    random ones with fresh ids, on such SIDs. The catalog after edits the moved rows where they stand and appends
    the new ones, so it holds the same strings as before (the same dictionaries, the same layout)."""
    rng = np.random.default_rng(seed)
    d = table.to_pydict()
    have = {tuple(s) for s in d["sid"]}
    off = [s for s in itertools.product(range(V), repeat=L) if s not in have]
    picks = rng.choice(len(off), size=min(len(off), moved + new), replace=False)
    rows = []
    for j, i in enumerate(rng.choice(len(d["ad_id"]), size=min(moved, len(d["ad_id"])), replace=False)):
        d["sid"][i] = list(off[picks[j]])
        rows.append({k: d[k][i] for k in d})
    fresh = itertools.count(10**7)
    for j in range(len(rows), len(picks)):
        row = {k: d[k][int(rng.integers(len(d["ad_id"])))] for k in d}
        row["ad_id"], row["sid"] = next(fresh), list(off[picks[j]])
        rows.append(row)
        for k in d:
            d[k].append(row[k])
    return pa.Table.from_pylist(rows, schema=table.schema), pa.table(d, schema=table.schema)


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n_ads=st.integers(1, 120), moved=st.integers(0, 6), new=st.integers(0, 6),
       shards=st.sampled_from([None, 1, 3]), bloom=st.booleans(), mode=st.sampled_from(MODES))
def test_rebuilt_version_equals_a_fresh_build_of_the_changed_catalog(tmp_path_factory, seed, n_ads, moved, new,
                                                                     shards, bloom, mode):
    tmp = tmp_path_factory.mktemp("r")
    V, L = 12, 3
    table, sd = random_catalog(seed, n_ads=n_ads, L=L, V=V, n_sids=max(1, n_ads // 3)), schema_dict(L=L, V=V)
    if not bloom:
        table, sd = _no_bloom(table, sd)
    idx = gtmkit.build_index(write(tmp, table, sd, "c0.parquet"), tmp / "idx", partition=mode[0], shards=shards,
                             **mode[1])
    changes, after = _to_new_sids(table, seed, moved, new, V, L)
    moved_from = [a["sid"] for a, b in zip(table.to_pylist(), after.to_pylist()) if a["sid"] != b["sid"]]
    touched = {s[0] for s in moved_from} | {s[0] for s in changes.column("sid").to_pylist()}
    new_idx, rep = gtmkit.rebuild_shards(idx, changes)
    fresh = gtmkit.build_index(write(tmp, after, sd, "c1.parquet"), tmp / "fresh", partition=mode[0], **mode[1])
    a, b = _checksums(new_idx), _checksums(fresh)
    assert {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} == set()
    r = rep.as_dict()
    assert r["ads_on_new_sids"] == 0 and rep.edited == len(moved_from)
    assert rep.added == changes.num_rows - rep.edited
    if changes.num_rows:
        assert r["rebuilt"]["subtrees"] + r["rebuilt"]["dropped"] == len(touched)
        assert r["rebuilt"]["of"] == len({s[0] for s in after.column("sid").to_pylist()})
        assert new_idx.manifest["updates"]["updates"] == 1 and new_idx.version != idx.version
    assert idx.num_ads == n_ads  # the old version still serves while open
    idx.close()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n_ads=st.integers(2, 150), moved=st.integers(0, 8), new=st.integers(1, 8),
       task_ads=st.integers(1, 40), hot=st.floats(0.0, 1.0), bloom=st.booleans(), mode=st.sampled_from(MODES))
def test_a_hot_subtree_cut_between_second_tokens_equals_a_fresh_build(tmp_path_factory, seed, n_ads, moved, new,
                                                                      task_ads, hot, bloom, mode):
    """A share `hot` of the ads on one first token and tasks of at most `task_ads` ads: a subtree larger than that
    is rebuilt by several tasks cut between its second tokens, and the version is still a fresh build's."""
    tmp = tmp_path_factory.mktemp("h")
    V, L = 12, 3
    table, sd = random_catalog(seed, n_ads=n_ads, L=L, V=V, n_sids=max(1, n_ads // 2)), schema_dict(L=L, V=V)
    if not bloom:
        table, sd = _no_bloom(table, sd)
    rng = np.random.default_rng(seed)
    sids = [[0] + s[1:] if rng.random() < hot else s for s in table.column("sid").to_pylist()]
    table = table.set_column(table.schema.get_field_index("sid"), "sid", pa.array(sids, table.schema.field("sid").type))
    idx = gtmkit.build_index(write(tmp, table, sd, "c0.parquet"), tmp / "idx", partition=mode[0], **mode[1])
    changes, after = _to_new_sids(table, seed, moved, new, V, L)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rebuild_mod, "_task_ads", lambda workers, worker_memory=None: task_ads)
        new_idx, rep = gtmkit.rebuild_shards(idx, changes)
    fresh = gtmkit.build_index(write(tmp, after, sd, "c1.parquet"), tmp / "fresh", partition=mode[0], **mode[1])
    a, b = _checksums(new_idx), _checksums(fresh)
    assert {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} == set()
    idx.close()


def test_one_hot_first_token_is_rebuilt_by_several_tasks(tmp_path, monkeypatch):
    """Every ad on first token 0: the one rebuilt subtree is cut between its second tokens into tasks of about the
    budget's ads, and the version equals a fresh build's."""
    V, L = 12, 3
    table, sd = random_catalog(5, n_ads=200, L=L, V=V, n_sids=90), schema_dict(L=L, V=V)
    sids = [[0] + s[1:] for s in table.column("sid").to_pylist()]
    table = table.set_column(table.schema.get_field_index("sid"), "sid", pa.array(sids, table.schema.field("sid").type))
    idx = gtmkit.build_index(write(tmp_path, table, sd, "c0.parquet"), tmp_path / "idx", partition="static",
                             k=[2, 3, 2])
    changes, _ = _to_new_sids(table, 6, 0, 5, V, L)
    have = {tuple(s) for s in sids}
    missing = [[0, a, b] for a in range(V) for b in range(V) if (0, a, b) not in have]
    fresh_sids = [missing[i] for i in np.linspace(0, len(missing) - 1, 5).astype(int)]  # SIDs the trie lacks
    changes = changes.set_column(changes.schema.get_field_index("sid"), "sid",
                                 pa.array(fresh_sids, changes.schema.field("sid").type))
    after = pa.concat_tables([table, changes])
    monkeypatch.setattr(rebuild_mod, "_task_ads", lambda workers, worker_memory=None: 40)
    new, rep = gtmkit.rebuild_shards(idx, changes)
    fresh = gtmkit.build_index(write(tmp_path, after, sd, "c1.parquet"), tmp_path / "fresh", partition="static",
                               k=[2, 3, 2])
    assert _checksums(new) == _checksums(fresh)
    assert rep.rebuilt["subtrees"] == 1 and rep.rebuilt["ads"] == 205
    assert 2 <= rep.rebuilt["tasks"] <= -(-205 // 40)  # cut between second tokens, each task about 40 ads


def test_a_subtree_whose_ads_all_move_away_is_gone(tmp_path):
    V, L = 8, 3
    table = random_catalog(3, n_ads=60, L=L, V=V, n_sids=20)
    sd = schema_dict(L=L, V=V)
    gtmkit.build_index(write(tmp_path, table, sd, "c0.parquet"), tmp_path / "idx", partition="static", k=[2, 3, 2])
    d = table.to_pydict()
    gone = d["sid"][0][0]
    have = {tuple(s) for s in d["sid"]}
    targets = [s for s in itertools.product(range(V), repeat=L) if s not in have and s[0] != gone]
    rows = []
    for i, sid in enumerate(d["sid"]):
        if sid[0] == gone:
            d["sid"][i] = list(targets[i % 5])
            rows.append({k: d[k][i] for k in d})
    after = pa.table(d, schema=table.schema)
    new, rep = gtmkit.rebuild_shards(tmp_path / "idx", pa.Table.from_pylist(rows, schema=table.schema))
    fresh = gtmkit.build_index(write(tmp_path, after, sd, "c1.parquet"), tmp_path / "fresh", partition="static",
                               k=[2, 3, 2])
    assert _checksums(new) == _checksums(fresh)
    assert gone not in new.children(0)[0].tolist() and rep.edited == len(rows) and rep.added == 0
    assert rep.rebuilt["dropped"] == 1 and rep.rebuilt["of"] == len(new.children(0)[0])


def _brute_force(m, rows, schema, rng, paused=()):
    serves_exactly(m, rows, schema, [random_user(rng) for _ in range(5)], paused)


@pytest.mark.parametrize("mode,kw", MODES)
def test_mixed_changes_equal_brute_force_and_keep_pauses(tmp_path, mode, kw):
    """Edits (some to other SIDs), new ads on SIDs the trie holds (in place) and on SIDs it lacks (rebuilt), on an
    index already updated once, with ads paused: the new version serves the changed catalog exactly."""
    V, L = 10, 3
    table, sd = random_catalog(8, n_ads=120, L=L, V=V, n_sids=40), schema_dict(L=L, V=V)
    schema = parse_schema(sd)
    gtmkit.build_index(write(tmp_path, table, sd), tmp_path / "idx", partition=mode, **kw)
    rows = catalog_rows(table, schema)
    paused = {ad["ad_id"] for ad in rows[::7]}
    rows = _write_in_place(tmp_path / "idx", rows, schema, sorted(paused))
    rng = np.random.default_rng(2)
    for step in range(2):
        idx = gtmkit.load_index(tmp_path / "idx")
        changes, kept, left_out = changes_for(rows, schema, 60 + step, 10, 10, 6, L=L, V=V)
        rows = kept + [ad for ad in catalog_rows(changes, schema) if ad["ad_id"] in set(left_out)]
        new, rep = gtmkit.rebuild_shards(idx, changes)
        assert rep.rebuilt is not None and rep.new_sids == [] and len(left_out) == 6
        assert set(new.paused_ad_ids.tolist()) == paused
        m = Matcher(new)
        m.pause_ads(sorted(paused))
        _brute_force(m, rows, schema, rng, paused)
        assert gtmkit.load_index(tmp_path / "idx", verify=True).version == new.version
    assert new.manifest["updates"]["updates"] == 3


def _write_in_place(path, rows, schema, paused):
    """One in-place update (a few edits and new ads) written with the ads `paused` paused: -> the rows after it."""
    from gtmkit.indexer.update import read_changes
    from gtmkit.indexer.update.write import write_changes
    idx = gtmkit.load_index(path)
    changes, after, _ = changes_for(rows, schema, 7, 5, 5, 0, L=idx.sid_length, V=idx.vocab_size)
    assert write_changes(idx, read_changes(idx, changes), np.asarray(paused, np.int64))[2]
    return after


def test_changes_all_on_known_sids_are_applied_in_place(tmp_path):
    table, sd = random_catalog(4, n_ads=60, L=3, V=6, n_sids=20), schema_dict(L=3, V=6)
    schema = parse_schema(sd)
    idx = gtmkit.build_index(write(tmp_path, table, sd), tmp_path / "idx")
    changes, after, left_out = changes_for(catalog_rows(table, schema), schema, 3, 5, 5, 0, L=3, V=6)
    new, rep = gtmkit.rebuild_shards(idx, changes)
    assert rep.rebuilt is None and left_out == [] and rep.edited == 5 and rep.added == 5
    assert rep.version == new.version == gtmkit.load_index(tmp_path / "idx").version
    _brute_force(Matcher(new), after, schema, np.random.default_rng(1))


def _versions(path) -> list:
    return sorted(n for n in os.listdir(path) if not n.startswith("."))


def test_slack_passed_or_a_failing_task_writes_nothing(tmp_path, monkeypatch):
    table, sd = random_catalog(5, n_ads=80, L=3, V=8, n_sids=30), schema_dict(L=3, V=8)
    schema = parse_schema(sd)
    idx = gtmkit.build_index(write(tmp_path, table, sd), tmp_path / "idx", slack=0)
    before = _versions(tmp_path / "idx")
    rows = catalog_rows(table, schema)
    changes, _, _ = changes_for(rows, schema, 9, 2, 3, 3, L=3, V=8)
    with pytest.raises(UpdateError, match="rebuild it"):  # the new ads on known SIDs pass the slack of 0
        gtmkit.rebuild_shards(idx, changes)
    assert _versions(tmp_path / "idx") == before

    off_only, _ = _to_new_sids(table, 1, 2, 2, 8, 3)

    def boom(*args):
        raise RuntimeError("disk full")
    monkeypatch.setattr(rebuild_mod, "build_subtrees", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        gtmkit.rebuild_shards(idx, off_only)
    assert _versions(tmp_path / "idx") == before
    assert gtmkit.load_index(tmp_path / "idx").version == idx.version
    with pytest.raises(RequestError, match="unknown ad id 77"):
        gtmkit.rebuild_shards(idx, off_only, paused=[77])
    assert _versions(tmp_path / "idx") == before


@contextlib.contextmanager
def _local_cluster():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.CRITICAL) as lc, Client(lc) as client:
        yield client


def test_dask_workers_rebuild_the_same_arrays(tmp_path):
    pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    V, L = 12, 3
    table, sd = random_catalog(6, n_ads=150, L=L, V=V, n_sids=50), schema_dict(L=L, V=V)
    changes, _ = _to_new_sids(table, 2, 4, 8, V, L)
    out = []
    for name in ("here", "dask"):
        gtmkit.build_index(write(tmp_path, table, sd), tmp_path / name, partition="dynamic", target_fill=0.3, k_max=4)
        if name == "here":
            new, rep = gtmkit.rebuild_shards(tmp_path / name, changes)
        else:
            with _local_cluster() as client:
                new, rep = gtmkit.rebuild_shards(tmp_path / name, changes, client=client)
            assert rep.rebuilt["workers"] == 2
        out.append(_checksums(new))
        assert rep.rebuilt["tasks"] >= 1
    assert out[0] == out[1]


def test_rebuilt_subtrees_cut_into_tasks_give_the_same_arrays(tmp_path, monkeypatch):
    """Tasks of one subtree or less each (a tiny memory budget: every subtree is cut between its second tokens)
    rebuild what one task does."""
    V, L = 12, 3
    table, sd = random_catalog(9, n_ads=150, L=L, V=V, n_sids=60), schema_dict(L=L, V=V)
    changes, _ = _to_new_sids(table, 4, 6, 10, V, L)
    out = []
    for name, task_ads in (("one", None), ("many", 1)):
        gtmkit.build_index(write(tmp_path, table, sd), tmp_path / name, partition="static", k=[2, 3, 2])
        if task_ads:
            monkeypatch.setattr(rebuild_mod, "_task_ads", lambda workers, worker_memory=None: task_ads)
        new, rep = gtmkit.rebuild_shards(tmp_path / name, changes)
        out.append((_checksums(new), rep.rebuilt["tasks"]))
    assert out[0][0] == out[1][0] and out[1][1] > out[0][1]
    assert out[1][1] > rep.rebuilt["subtrees"] and rep.rebuilt["dropped"] == 0  # subtrees cut into several tasks


def test_rebuild_tasks_fit_the_workers_reported_memory():
    """A rebuild task holds what fits a worker's memory limit as the scheduler reports it; without a report, a
    worker's share of this machine's memory."""
    from gtmkit.indexer.shards.plan import SHARD_BYTES_PER_AD
    assert rebuild_mod._task_ads(2, 8 << 30) == (8 << 30) // SHARD_BYTES_PER_AD
    assert rebuild_mod._task_ads(2, 1 << 20) < rebuild_mod._task_ads(2, 1 << 30)
    assert rebuild_mod._task_ads(2, None) == rebuild_mod._task_ads(2)
