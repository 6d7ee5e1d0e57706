"""Writers of one path never lose each other's work: an update publishes only over the version it read (a
compare-and-switch under the lock of the pointer switch) and is applied again on a version another writer published
first; a write from an index that is no longer current is refused; `build --force` and `trie build --force` say
which version they replaced. Four real processes updating one index at once keep every change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli
from gtmkit.artifact import layout
from gtmkit.artifact.staging import Staging, VersionChanged
from gtmkit.indexer.update import publish
from gtmkit.indexer.update.publish import update_path

from support.catalogs import random_catalog, schema_dict, write

ROOT = Path(__file__).resolve().parents[2]
# each writer imports gtmkit, says it is ready, then waits for the start file: all load and publish at once
CHILD = """
import os, sys, time
from gtmkit.cli import main
open(sys.argv[1] + ".ready", "w").close()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.005)
sys.exit(main(sys.argv[3:]))
"""


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _base(tmp_path, seed=3):
    """A built index with room for 100 new ads: -> (path, catalog table, schema dict)."""
    sd = schema_dict(L=3, V=6)
    table = random_catalog(seed, n_ads=200, L=3, V=6, n_sids=60)
    out = tmp_path / "idx"
    gtmkit.build_index(write(tmp_path, table, sd), out, slack=0.5).close()
    return out, table, sd


def _new_ads(table, k: int, first_id: int, seed: int) -> pa.Table:
    """k new ads (ids first_id...) on SIDs the index holds, with random targeting."""
    rng = np.random.default_rng(seed)
    t = random_catalog(seed + 100, n_ads=k, L=3, V=6).to_pydict()
    sids = table.column("sid").to_pylist()
    t["ad_id"] = list(range(first_id, first_id + k))
    t["sid"] = [sids[int(i)] for i in rng.integers(0, len(sids), k)]
    return pa.table(t, schema=table.schema)


def _ids(path) -> tuple:
    """(ad ids, paused ad ids) of the version the path serves, loaded with every check."""
    with gtmkit.load_index(path) as idx:
        return set(np.asarray(idx.ad_ids_sorted).tolist()), set(np.asarray(idx.paused_ad_ids).tolist())


def _before_switch(monkeypatch, other, times: int = 1) -> list:
    """Run `other()` in a thread of its own (another writer) just before each of this thread's next `times`
    pointer switches; -> the errors it raised."""
    orig, me, errors, fired = Staging.publish, threading.get_ident(), [], [0]

    def publish_(self):
        if threading.get_ident() == me and fired[0] < times:
            fired[0] += 1

            def go():
                try:
                    other()
                except Exception as exc:  # noqa: BLE001  (reported by the test)
                    errors.append(exc)
            t = threading.Thread(target=go)
            t.start()
            t.join()
        return orig(self)

    monkeypatch.setattr(Staging, "publish", publish_)
    return errors


@pytest.mark.parametrize("mine,theirs", [("ads", "ads"), ("ads", "pause"), ("pause", "ads"), ("rebuild", "pause")])
def test_an_update_is_applied_again_over_a_version_published_meanwhile(tmp_path, monkeypatch, mine, theirs):
    """`gtmkit update idx a.parquet` beside `gtmkit update idx b.parquet` (or --pause; or a.parquet holding ads on
    SIDs the trie lacks, with --rebuild-shards): both exit 0 and the index holds both writers' ads and pauses."""
    out, table, _ = _base(tmp_path)
    base = [int(x) for x in table.column("ad_id").to_pylist()]
    have = {tuple(s) for s in table.column("sid").to_pylist()}
    work = {}
    for who, kind, first in (("mine", mine, 10**7), ("theirs", theirs, 2 * 10**7)):
        if kind in ("ads", "rebuild"):
            t = _new_ads(table, 5, first, first % 97)
            if kind == "rebuild":  # two of them on SIDs the trie lacks
                off = [[a, b, c] for a in range(6) for b in range(6) for c in range(6) if (a, b, c) not in have]
                t = t.set_column(1, "sid", pa.array(t.column("sid").to_pylist()[:3] + off[:2], pa.list_(pa.int32())))
            pq.write_table(t, tmp_path / f"{who}.parquet")
            work[who] = {"changes": tmp_path / f"{who}.parquet", "ads": set(range(first, first + 5)), "paused": set()}
        else:
            ids = base[:4] if who == "mine" else base[4:8]
            (tmp_path / f"{who}.txt").write_text("\n".join(map(str, ids)) + "\n")
            work[who] = {"pause": np.asarray(ids, np.int64), "ads": set(), "paused": set(ids)}
    t = work["theirs"]
    errors = _before_switch(monkeypatch, lambda: update_path(out, t.get("changes"), t.get("pause")))
    start = layout.served(out)
    args = {"ads": [tmp_path / "mine.parquet"], "rebuild": [tmp_path / "mine.parquet", "--rebuild-shards"],
            "pause": ["--pause", tmp_path / "mine.txt"]}[mine]
    r = run("update", out, *args, "--json")
    assert r.exit_code == 0 and not errors, (r.output, errors)
    rep = json.loads(r.stdout)
    assert rep["tries"] == 2 and rep["base_version"] not in (None, start) and rep["written"]
    assert bool(rep["rebuilt"]) == (mine == "rebuild")
    ads, paused = _ids(out)
    assert ads == set(base) | work["mine"]["ads"] | work["theirs"]["ads"]
    assert paused == work["mine"]["paused"] | work["theirs"]["paused"]


def test_an_update_that_keeps_losing_the_race_fails_naming_both_versions(tmp_path, monkeypatch):
    out, table, _ = _base(tmp_path)
    base = [int(x) for x in table.column("ad_id").to_pylist()]
    pq.write_table(_new_ads(table, 5, 10**7, 1), tmp_path / "a.parquet")
    monkeypatch.setattr(publish, "TRIES", 3)
    turn = iter(range(10))
    errors = _before_switch(monkeypatch, lambda: update_path(out, pause=[base[next(turn)]]), times=3)
    start = layout.served(out)
    r = run("update", out, tmp_path / "a.parquet", "-s")
    assert r.exit_code == 1 and not errors, (r.output, errors)
    line = r.output.strip()
    now = layout.served(out)
    assert "\n" not in line and "Traceback" not in line and "3 times" in line
    assert start in line and now in line and "nothing was written" in line
    ads, paused = _ids(out)
    assert ads == set(base) and paused == set(base[:3])  # the other writer's three pauses, none of these ads


def test_a_write_from_an_index_that_is_no_longer_current_is_refused(tmp_path):
    """The library's writers compare too: an index loaded before another writer published cannot be written over
    it, in place or by a shard rebuild, and nothing is left behind."""
    from gtmkit.indexer.update import read_changes
    from gtmkit.indexer.update.write import write_changes
    out, table, _ = _base(tmp_path)
    stale = gtmkit.load_index(out)
    a, b = _new_ads(table, 3, 10**7, 1), _new_ads(table, 3, 2 * 10**7, 2)
    update_path(out, a)
    now = layout.served(out)
    with pytest.raises(VersionChanged, match=f"{stale.version}.*{now}"):
        write_changes(stale, read_changes(stale, b), stale.paused_ad_ids)
    off = b.to_pydict()
    off["sid"] = [[5, 5, 5], [5, 5, 4], [5, 4, 5]]  # SIDs the trie may lack: the rebuild path when so
    with pytest.raises(VersionChanged):
        gtmkit.rebuild_shards(stale, pa.table(off, schema=b.schema))
    assert layout.served(out) == now
    assert not [p for p in out.iterdir() if layout.STAGING.fullmatch(p.name)]
    assert _ids(out)[0] == set(table.column("ad_id").to_pylist()) | set(range(10**7, 10**7 + 3))
    stale.close()


def test_build_force_says_which_version_it_replaced(tmp_path, monkeypatch):
    out, table, sd = _base(tmp_path)
    cat = tmp_path / "catalog.parquet"
    start = layout.served(out)
    r = run("build", cat, "-o", out, "--force", "-s")
    assert r.exit_code == 0 and f"replaced version {start}" in r.output and "another writer" not in r.output
    mine = layout.served(out)
    errors = _before_switch(monkeypatch, lambda: update_path(out, _new_ads(table, 2, 10**7, 1)))
    r = run("build", cat, "-o", out, "--force", "--json")
    assert r.exit_code == 0 and not errors, (r.output, errors)
    rep = json.loads(r.stdout)
    assert rep["version_at_start"] == mine and rep["replaced_version"] not in (None, mine)
    errors = _before_switch(monkeypatch, lambda: update_path(out, _new_ads(table, 2, 10**7, 1)))
    before = layout.served(out)
    r = run("build", cat, "-o", out, "--force", "-s")
    assert r.exit_code == 0 and not errors, (r.output, errors)
    line = r.output.strip().splitlines()[-1]
    assert "another writer published while this build ran" in line and before in line
    assert layout.served(out) not in line


def test_trie_build_force_says_which_version_it_replaced(tmp_path, monkeypatch):
    from gtmkit.trie.trie import SuccinctTrie
    keys = tmp_path / "k.parquet"
    pq.write_table(pa.table({"key": pa.array([[1, 2], [1, 3], [2, 5]], pa.list_(pa.int32()))}), keys)
    out = tmp_path / "t"
    r = run("trie", "build", keys, "-o", out, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["replaced_version"] is None
    first = layout.served(out)
    other = SuccinctTrie.build([[7, 7], [7, 8]])
    errors = _before_switch(monkeypatch, lambda: other.save(out, overwrite=True))
    r = run("trie", "build", keys, "-o", out, "-f")
    assert r.exit_code == 0 and not errors, (r.output, errors)
    assert "another writer published while this build ran" in r.output and first in r.output


def _child_env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_NUM_THREADS="1")


@pytest.mark.slow  # four writer processes at once
def test_four_processes_updating_one_index_lose_no_change(tmp_path):
    """Four `gtmkit update` processes started together on one index, each adding its own ads, two pausing ads
    and one editing ads too: every process exits 0 having its changes in the final index (or fails with one line,
    changing nothing), and the final index is the base catalog with every successful writer's changes."""
    out, table, sd = _base(tmp_path)
    base = [int(x) for x in table.column("ad_id").to_pylist()]
    writers = []
    for w in range(4):
        t = _new_ads(table, 5, 10**7 * (w + 1), w)
        if w == 2:  # edits of two base ads: new targeting, same SIDs
            edit = table.slice(20, 2).to_pydict()
            edit["country"] = [["JP"], ["DE", "FR"]]
            t = pa.concat_tables([t, pa.table(edit, schema=table.schema)])
        pq.write_table(t, tmp_path / f"c{w}.parquet")
        args = ["update", str(out), str(tmp_path / f"c{w}.parquet"), "--json", "-s"]
        pause = base[10 * w:10 * w + 3] if w % 2 else []
        if pause:
            (tmp_path / f"p{w}.txt").write_text("\n".join(map(str, pause)) + "\n")
            args += ["--pause", str(tmp_path / f"p{w}.txt")]
        writers.append((t, set(pause), args))
    warm = tmp_path / "warm"  # compile here, once: the writers read numba's cache
    shutil.copytree(out, warm)
    assert run("update", warm, tmp_path / "c2.parquet", "--pause", tmp_path / "p1.txt", "-s").exit_code == 0
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / f"w{w}"), str(go), *args], cwd=ROOT,
                              env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w, (_, _, args) in enumerate(writers)]
    t0 = time.monotonic()
    while not all((tmp_path / f"w{w}.ready").exists() for w in range(4)) and time.monotonic() - t0 < 120:
        time.sleep(0.01)
    go.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    kept, ads, paused, tries = [], set(base), set(), []
    for (t, pause, _), p, (stdout, stderr) in zip(writers, procs, outs):
        if p.returncode != 0:  # gave up: one line naming both versions
            assert p.returncode == 1 and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
            continue
        rep = json.loads(stdout)
        tries.append(rep["tries"])
        kept.append(t)
        ads |= set(t.column("ad_id").to_pylist())
        paused |= pause
    assert kept, "no writer succeeded"
    assert _ids(out) == (ads, paused)
    # every successful writer's rows are served exactly: the base catalog with their edits in place and ads added
    changed = pa.concat_tables(kept)
    ids = set(changed.column("ad_id").to_pylist())
    rest = table.filter(pa.array([x not in ids for x in table.column("ad_id").to_pylist()]))
    write(tmp_path, pa.concat_tables([rest, changed]), sd, "after.parquet")
    r = run("verify", out, "--catalog", tmp_path / "after.parquet")
    assert r.exit_code == 0, r.output
    assert len(kept) == 4, f"tries {tries}; {[o[1].strip() for o in outs]}"
