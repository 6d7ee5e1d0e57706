"""Versioned artifacts: pointer and versions, readers holding old versions, cleanup, the flat layout,
refusals of --force / overwrite on anything not gtmkit's, killed builds, and serving while rebuilding."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli
from gtmkit.errors import ArtifactError
from gtmkit.artifact import layout
from gtmkit.artifact.container import ArtifactWriter, open_artifact
from gtmkit.artifact.locks import Lock
from gtmkit.artifact.output import check_output
from gtmkit.matcher.matcher import Matcher

from support.catalogs import random_catalog, random_user, schema_dict, write

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "index_v1"
FMT = "gtmkit-test"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def child_env() -> dict:
    """The worktree's gtmkit, one numba thread (two cores are shared), the same numba cache."""
    return dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_NUM_THREADS="1")


def snapshot(path: Path) -> dict:
    """Every entry below path (and path itself) with its kind and content hash."""
    out = {}
    for p in [path, *sorted(path.rglob("*"))] if path.is_dir() and not path.is_symlink() else [path]:
        kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "file"
        out[str(p)] = (kind, hashlib.sha256(p.read_bytes()).hexdigest() if kind == "file" else os.readlink(p)
                       if kind == "link" else "")
    return out


def write_art(path, value, overwrite=True):
    with ArtifactWriter(path, FMT, 1, overwrite=overwrite) as w:
        w.add_array("x", np.full(4, value, np.int64))
        return w.commit({"value": value})


def versions(path: Path) -> list:
    return sorted(p.name for p in path.iterdir() if layout.VERSION.fullmatch(p.name))


def staging(path: Path) -> list:
    return sorted(p.name for p in path.iterdir() if layout.STAGING.fullmatch(p.name))


@pytest.fixture()
def catalogs(tmp_path):
    """Two different catalogs of one schema, each with its schema JSON beside it."""
    d = tmp_path / "cats"
    d.mkdir()
    return [write(d, random_catalog(seed, n_ads=90), schema_dict(), f"cat{seed}.parquet") for seed in (1, 2)]


# --- layout, pointer, cleanup -----------------------------------------------------------------

def test_layout_pointer_and_cleanup(tmp_path):
    out = tmp_path / "art"
    write_art(out, 1, overwrite=False)
    (v1,) = versions(out)
    assert sorted(p.name for p in out.iterdir()) == sorted([layout.POINTER, layout.WRITE_LOCK, v1])
    assert (out / layout.POINTER).read_text() == v1 + "\n"
    assert sorted(p.name for p in (out / v1).iterdir()) == ["manifest.json", "x.npy"]
    with pytest.raises(ArtifactError, match="already exists"):
        write_art(out, 2, overwrite=False)
    write_art(out, 2)
    (v2,) = versions(out)  # nobody held v1: the write deleted it
    assert v2 != v1 and (out / layout.POINTER).read_text() == v2 + "\n"
    art = open_artifact(out, FMT, [1])
    assert art.path == out and art.dir == out / v2 and art.manifest["value"] == 2 and list(art.array("x")) == [2] * 4
    with pytest.raises(RuntimeError):
        with ArtifactWriter(out, FMT, 1, overwrite=True) as w:
            w.add_array("x", np.zeros(3))
            raise RuntimeError("build failed")
    assert staging(out) == [] and versions(out) == [v2]  # a failed write removes its staging, serves on


def test_loaded_reader_keeps_its_version_until_closed(tmp_path):
    out = tmp_path / "art"
    write_art(out, 1)
    old = open_artifact(out, FMT, [1])
    x_old = old.array("x")
    write_art(out, 2)
    write_art(out, 3)  # a later write still leaves the held version alone
    assert len(versions(out)) == 2 and old.dir.is_dir()
    assert list(x_old) == [1] * 4 and list(open_artifact(out, FMT, [1]).array("x")) == [3] * 4
    with open_artifact(out, FMT, [1]) as cur:  # readers of the current version never block its replacement
        write_art(out, 4)
        assert list(cur.array("x")) == [3] * 4
    old.close()
    old.close()  # idempotent
    write_art(out, 5)
    assert versions(out) == [layout.current(out).name]
    assert list(x_old) == [1] * 4  # arrays taken before close() stay readable after their files went


def test_dropped_reader_releases_its_version(tmp_path):
    out = tmp_path / "art"
    write_art(out, 1)
    held = open_artifact(out, FMT, [1])
    write_art(out, 2)
    assert len(versions(out)) == 2
    del held  # garbage collection releases the lock like close()
    write_art(out, 3)
    assert len(versions(out)) == 1


def test_index_and_trie_close_and_context_manager(tmp_path, catalogs):
    out = tmp_path / "idx"
    gtmkit.build_index(catalogs[0], out).close()
    with gtmkit.load_index(out) as idx:
        assert idx.path == out and idx.num_ads == 90
        gtmkit.build_index(catalogs[1], out, overwrite=True)
        assert len(versions(out)) == 2
        assert idx.artifact.dir.is_dir() and set(idx.sid_ad_ids.tolist()) == set(
            random_catalog(1, n_ads=90).column("ad_id").to_pylist())
    assert idx.artifact.closed
    gtmkit.build_index(catalogs[0], out, overwrite=True).close()
    assert len(versions(out)) == 1
    trie_dir = tmp_path / "trie"
    gtmkit.SuccinctTrie.build([[1, 2], [3]]).save(trie_dir)
    with gtmkit.SuccinctTrie.load(trie_dir) as t:
        gtmkit.SuccinctTrie.build([[4]]).save(trie_dir, overwrite=True)
        assert len(versions(trie_dir)) == 2 and t.lookup([1, 2]) >= 0
    gtmkit.SuccinctTrie.build([[5]]).save(trie_dir, overwrite=True)
    assert len(versions(trie_dir)) == 1 and len(gtmkit.SuccinctTrie.load(trie_dir)) == 1


def test_reader_rereads_the_pointer_when_its_version_goes_while_it_waits(tmp_path):
    """A version deleted between a reader's pointer read and its lock is never read: it takes the new one."""
    out = tmp_path / "art"
    write_art(out, 1)
    v1 = layout.current(out)
    writer_lock = Lock(v1 / "manifest.json")
    assert writer_lock.try_exclusive()  # a writer about to delete v1
    got = []
    reader = threading.Thread(target=lambda: got.append(open_artifact(out, FMT, [1])))
    reader.start()
    time.sleep(0.3)  # the reader has read the pointer and waits for v1's lock
    with ArtifactWriter(out, FMT, 1, overwrite=True) as w:
        w.add_array("x", np.full(4, 2, np.int64))
        w.commit({"value": 2})  # switches the pointer; v1 cannot be deleted by it (locked)
    layout.remove_dir(v1)
    writer_lock.close()
    reader.join(10)
    assert not reader.is_alive() and got[0].manifest["value"] == 2 and list(got[0].array("x")) == [2] * 4


def test_missing_or_bad_pointer_is_one_line(tmp_path):
    out = tmp_path / "art"
    write_art(out, 1)
    (out / layout.POINTER).write_text("v-1-deadbeef\n")
    with pytest.raises(ArtifactError, match="missing"):
        open_artifact(out, FMT, [1])
    (out / layout.POINTER).write_text("../elsewhere\n")
    with pytest.raises(ArtifactError, match="does not name a version"):
        open_artifact(out, FMT, [1])


def test_live_writer_staging_survives_other_writes(tmp_path):
    out = tmp_path / "art"
    write_art(out, 1)
    slow = ArtifactWriter(out, FMT, 1, overwrite=True)
    slow.add_array("x", np.full(4, 7, np.int64))
    write_art(out, 2)  # cleans up, but the slow writer's staging is locked by it
    assert len(staging(out)) == 1
    slow.commit({"value": 7})
    assert open_artifact(out, FMT, [1]).manifest["value"] == 7 and staging(out) == [] and len(versions(out)) == 1


# --- the old flat layout ---------------------------------------------------------------------

def test_flat_golden_loads_read_only():
    before = snapshot(GOLDEN)
    idx = gtmkit.load_index(GOLDEN)
    assert idx.artifact.dir == GOLDEN and idx.num_sids > 0 and idx.bloom_dictionaries
    idx.close()
    assert snapshot(GOLDEN) == before


def test_overwriting_a_flat_artifact_converts_it(tmp_path, catalogs):
    flat = tmp_path / "flat"
    shutil.copytree(GOLDEN, flat)
    g = gtmkit.load_index(GOLDEN).artifact
    golden = {n: np.array(g.array(n)) for n in g.names}
    with pytest.raises(ArtifactError, match="already exists"):
        gtmkit.build_index(catalogs[0], flat)
    held = gtmkit.load_index(flat)
    gtmkit.build_index(catalogs[0], flat, overwrite=True).close()
    assert (flat / "manifest.json").is_file()  # a loaded index still reads the flat files
    assert gtmkit.load_index(flat).num_ads == 90
    assert all(np.array_equal(held.artifact.array(n), a) for n, a in golden.items())
    held.close()
    gtmkit.build_index(catalogs[1], flat, overwrite=True).close()
    assert sorted(p.name for p in flat.iterdir()) == sorted([layout.POINTER, layout.WRITE_LOCK, *versions(flat)])
    assert len(versions(flat)) == 1 and gtmkit.load_index(flat).num_ads == 90


# --- refusals: --force replaces only a gtmkit artifact ---------------------------------------

def _refused(tmp_path, args, message, watched):
    before = {str(p): snapshot(p) for p in watched}
    r = run(*args)
    assert r.exit_code == 1 and message in r.stderr, r.output
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.output
    assert {str(p): snapshot(p) for p in watched} == before  # nothing deleted, nothing added


def test_force_refuses_files_and_foreign_folders(tmp_path, catalogs, monkeypatch):
    cat = catalogs[0]
    cats_dir = cat.parent
    _refused(tmp_path, ["build", cat, "-o", cats_dir, "--force", "-s"], "not a gtmkit artifact", [cats_dir])
    _refused(tmp_path, ["build", cat, "-o", catalogs[1], "--force", "-s"], "is a file", [cats_dir])
    foreign = tmp_path / "foreign"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    (foreign / "manifest.json").write_text('{"format": "not gtmkit"}')
    _refused(tmp_path, ["build", cat, "-o", foreign, "-f", "-s"], "not a gtmkit artifact", [foreign])
    monkeypatch.chdir(cats_dir)
    _refused(tmp_path, ["build", cat, "-o", ".", "--force", "-s"], "not a gtmkit artifact", [cats_dir])
    real = tmp_path / "real"
    gtmkit.build_index(cat, real).close()
    for target in (real, foreign):
        link = tmp_path / f"link-{target.name}"
        link.symlink_to(target)
        _refused(tmp_path, ["build", cat, "-o", link, "--force", "-s"], "symbolic link", [link, target])
    keys = tmp_path / "keys"
    keys.mkdir()
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"key": pa.array([[1, 2], [3]], pa.list_(pa.int32()))}), keys / "k.parquet")
    _refused(tmp_path, ["trie", "build", keys / "k.parquet", "-o", keys, "-f", "-s"], "not a gtmkit artifact", [keys])
    with pytest.raises(ArtifactError, match="not a gtmkit artifact"):
        gtmkit.SuccinctTrie.build([[1]]).save(foreign, overwrite=True)
    work = tmp_path / "work"
    (work / "index").mkdir(parents=True)
    (work / "index" / "data.csv").write_text("1,2\n")
    _refused(tmp_path, ["demo", "--ads", 100, "--workdir", work, "-s"], "not empty", [work])
    _refused(tmp_path, ["demo", "--ads", 100, "--workdir", work, "--force", "-s"], "not a gtmkit artifact", [work])


def test_output_location_checks(tmp_path, catalogs):
    cat = catalogs[0]
    under_file = catalogs[1] / "idx"
    for out, message in [(under_file, "which is a file"), (Path("/proc/gtmkit-index"), "pseudo filesystem"),
                         (Path("/sys/gtmkit-index"), "pseudo filesystem"), (Path("/dev/gtmkit-index"), "pseudo filesystem")]:
        with pytest.raises(ArtifactError, match=message):
            gtmkit.build_index(cat, out)
        r = run("build", cat, "-o", out, "-f", "-s")
        assert r.exit_code == 1 and message in r.stderr and r.stderr.count("\n") == 1, r.output
        assert not os.path.lexists(out)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_output(empty) == empty  # an empty folder is no one's data: written without --force


def test_unwritable_location_is_refused(tmp_path):
    """Run as an unprivileged user in a forked child (root may write anywhere)."""
    # outside pytest's folders and a private TMPDIR, which others may not search
    base = Path(tempfile.mkdtemp(prefix="gtmkit-ro-", dir="/tmp" if os.path.isdir("/tmp") else None))
    ro = base / "ro"
    ro.mkdir()
    os.chmod(base, 0o755)
    os.chmod(ro, 0o555)
    pid = os.fork()
    if pid == 0:  # child: exit 0 only if the check refuses with the expected line
        code = 1
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            check_output(ro / "idx")
        except ArtifactError as exc:
            code = 0 if "not writable" in str(exc) and "\n" not in str(exc) else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    try:
        assert os.waitstatus_to_exitcode(status) == 0
        assert list(ro.iterdir()) == []
    finally:
        shutil.rmtree(base)


# --- a build killed mid-write ----------------------------------------------------------------

KILLED_BUILD = """
import sys, time
import gtmkit

def progress(done, total, phase):
    if phase == "write" and done == 3:  # some members are in the staging directory
        print("writing", flush=True)
        time.sleep(120)

gtmkit.build_index(sys.argv[1], sys.argv[2], overwrite=True, progress=progress)
"""


@pytest.mark.slow  # a build process killed mid-write
def test_killed_build_keeps_old_version_and_next_write_cleans_up(tmp_path, catalogs):
    out = tmp_path / "idx"
    gtmkit.build_index(catalogs[0], out).close()
    old_ads = sorted(gtmkit.load_index(out).sid_ad_ids.tolist())
    child = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(catalogs[1]), str(out)], cwd=ROOT,
                             env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing", child.stderr.read()
        (stage,) = staging(out)
        assert any((out / stage).glob("*.npy"))
        child.send_signal(signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    assert staging(out) == [stage]  # a dead writer's staging stays until the next write
    with gtmkit.load_index(out) as idx:
        assert sorted(idx.sid_ad_ids.tolist()) == old_ads
    gtmkit.build_index(catalogs[1], out, overwrite=True).close()
    assert staging(out) == [] and len(versions(out)) == 1
    assert sorted(p.name for p in out.iterdir()) == sorted([layout.POINTER, layout.WRITE_LOCK, *versions(out)])


# --- serving from 4 threads while another process rebuilds the path -------------------------

USERS = [random_user(np.random.default_rng(s)) for s in range(6)]
BEAMS = (1, 4, 8)


def _logits(V):
    """Deterministic log-probs: a function of (step, previous token) only."""
    rng = np.random.default_rng(5)
    tables = rng.normal(size=(len(BEAMS), V + 1, V)).astype(np.float32)

    def fn(step, prev_tokens, parent_rows):
        return tables[step][np.asarray(prev_tokens) % (V + 1)]

    return fn


def serve(path, verify: bool) -> tuple:
    """One serving round on a freshly loaded index: CD+GTM beam search and the exact post-filter."""
    with gtmkit.load_index(path, verify=verify) as idx:
        m = Matcher(idx)
        reqs = [idx.encode_request(u) for u in USERS]
        res = gtmkit.beam_search(m, reqs, _logits(idx.vocab_size), BEAMS)
        leaves = np.asarray(res.leaf_nodes)
        post = m.postfilter(leaves, reqs)
        return (idx.num_ads, tuple(tuple(np.asarray(a).tolist()) for a, _ in res.ads),
                tuple(tuple(np.asarray(a).tolist()) for a, _ in post), leaves.tobytes())


@pytest.mark.slow
def test_serving_while_another_process_rebuilds(tmp_path, catalogs):
    out = tmp_path / "idx"
    expected = []
    for cat in catalogs:  # the two possible answers, from private builds
        tmp = tmp_path / f"ref-{cat.stem}"
        gtmkit.build_index(cat, tmp).close()
        expected.append(serve(tmp, True))
    assert expected[0] != expected[1]
    gtmkit.build_index(catalogs[0], out).close()

    stop, errors, seen, loads = threading.Event(), [], [], [0]

    def worker(w):
        i = 0
        while not stop.is_set():
            try:
                got = serve(out, verify=(i + w) % 2 == 0)
            except Exception as exc:  # every error fails the test
                errors.append(f"{type(exc).__name__}: {exc}")
                return
            if got not in expected:
                errors.append(f"an answer matching neither catalog (load {i} of thread {w})")
                return
            seen.append(expected.index(got))
            loads[0] += 1
            i += 1

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(4)]
    for t in threads:
        t.start()
    builds, t0 = 0, time.monotonic()
    try:
        # three builds (both catalogs published at least once after the first), at least 5 s of loads
        while (builds < 3 or time.monotonic() - t0 < 5) and time.monotonic() - t0 < 60 and not errors:
            cat = catalogs[(builds + 1) % 2]
            r = subprocess.run([sys.executable, "-m", "gtmkit", "build", str(cat), "-o", str(out), "--force", "-s",
                                "--json"], cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
            assert r.returncode == 0 and r.stderr == "", r.stderr
            builds += 1
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors[:3]
    assert not any(t.is_alive() for t in threads)
    assert builds >= 3 and loads[0] >= 20 and set(seen) == {0, 1}
    gtmkit.build_index(catalogs[0], out, overwrite=True).close()  # no reader left: one version remains
    assert len(versions(out)) == 1 and staging(out) == []
