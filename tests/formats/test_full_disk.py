"""A full disk or quota anywhere in a build, a trie build or an update (artifact/writes.py): one line naming the path,
the file, about the bytes needed and the bytes free, a non-zero exit, no traceback; the version served before is
still served and nothing the write began is left (no staging directory, no pointer temporary).

Two disks: a real small tmpfs (mounted here where the platform allows, else those tests skip saying why), every
command run onto it, Dask worker processes included; and, always, an ENOSPC injected under the writers' own
open() (a disk of a few bytes, or one that refuses one file), so any machine covers every write path."""

from __future__ import annotations

import builtins
import errno
import gc
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli
from gtmkit.errors import ArtifactError
from gtmkit.artifact import container as artifact, layout, writes
from gtmkit.artifact.writes import WriteError
from gtmkit.trie.trie import SuccinctTrie

ADS = 30_000  # an index of ~2.4 MB
KEYS = 100_000  # a trie of ~1.1 MB
NO_SPACE_LINE = r"no space left on device writing .+ \((about|at least) [0-9.]+ [kMG]?B needed, [0-9.]+ [kMG]?B free\)"


# --- the inputs, once ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A catalog, edits of its ads on its SIDs, ads on SIDs its index lacks, ids to pause, keys."""
    import pyarrow as pa

    from gtmkit.synth.catalog import catalog_schema, synth_catalog
    from gtmkit.synth.keys import synth_keys

    d = tmp_path_factory.mktemp("full-disk-inputs")
    table = synth_catalog(ADS, seed=4)
    pq.write_table(table, d / "cat.parquet")
    (d / "cat.schema.json").write_text(json.dumps(catalog_schema(ADS, seed=4)))
    pq.write_table(table.slice(0, 40), d / "edits.parquet")
    sids = table.column("sid").to_pylist()[:40]
    used = {tuple(s) for s in table.column("sid").to_pylist()}
    moved = [[s[0], *[(t + 7) % 512 for t in s[1:]]] for s in sids]
    assert not any(tuple(s) in used for s in moved)
    i = table.schema.get_field_index("sid")
    pq.write_table(table.slice(0, 40).set_column(i, "sid", pa.array(moved, table.schema.field("sid").type)),
                   d / "moves.parquet")
    (d / "pause.txt").write_text("\n".join(str(x) for x in table.column("ad_id").to_pylist()[:20]) + "\n")
    pq.write_table(pa.table({"key": synth_keys(KEYS, seed=2)}), d / "keys.parquet")
    return d


def _leftovers(root) -> list:
    """What an interrupted write would leave: staging directories and pointer temporaries, anywhere below root."""
    return sorted(str(p) for pat in (".staging-*", ".CURRENT.tmp-*") for p in root.rglob(pat))


def _one_line(text: str, path) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text and str(path) in lines[0], text
    return lines[0]


# --- an injected ENOSPC: always ---------------------------------------------------------------------------------


class _File:
    def __init__(self, f, disk, path):
        self._f, self._disk, self._path = f, disk, str(path)

    def write(self, data):
        n = memoryview(data).nbytes if not isinstance(data, str) else len(data.encode())
        if self._disk.refuses(self._path, n):
            raise OSError(self._disk.errno, os.strerror(self._disk.errno), self._path)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


class _Disk:
    """The writers' open(), onto a disk of `size` bytes (writes past it fail), or one that fails writing the first
    file whose name holds `refuse`: the errno a full device (ENOSPC) or quota (EDQUOT) gives."""

    def __init__(self, size: int = 1 << 62, refuse: str = None, code: int = errno.ENOSPC):
        self.left, self.refuse, self.errno, self.failed = size, refuse, code, []

    def refuses(self, path: str, n: int) -> bool:
        if (self.refuse is not None and self.refuse in os.path.basename(path)) or n > self.left:
            self.failed.append(path)
            self.left = 0
            return True
        self.left -= n
        return False

    def open(self, path, mode="r", *args, **kwargs):
        f = builtins.open(path, mode, *args, **kwargs)
        return _File(f, self, path) if any(c in mode for c in "wa+") else f


@pytest.fixture
def disk(monkeypatch):
    """install(_Disk): the artifact writer, the pointer and the working files write through it."""
    def install(d: _Disk) -> _Disk:
        for mod in (artifact, layout, writes):
            monkeypatch.setattr(mod, "open", d.open, raising=False)
        return d
    return install


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _base(inputs, out):
    gtmkit.build_index(inputs / "cat.parquet", out).close()
    idx = gtmkit.load_index(out)
    version = idx.version
    idx.close()
    return version


CLI_CASES = {  # name: (the command's arguments after the output path, whether a version is there first)
    "build": (lambda d, out: ["build", d / "cat.parquet", "-o", out, "-s"], False),
    "build --shards 3": (lambda d, out: ["build", d / "cat.parquet", "-o", out, "--shards", "3", "-s"], False),
    "build --force": (lambda d, out: ["build", d / "cat.parquet", "-o", out, "--force", "-s"], True),
    "update": (lambda d, out: ["update", out, d / "edits.parquet", "-s"], True),
    "update --rebuild-shards": (lambda d, out: ["update", out, d / "moves.parquet", "--rebuild-shards", "-s"], True),
    "update --pause": (lambda d, out: ["update", out, "--pause", d / "pause.txt", "-s"], True),
}


@pytest.mark.parametrize("budget", [0.2, 0.9], ids=["early", "late"])
@pytest.mark.parametrize("case", list(CLI_CASES))
def test_injected_enospc_in_the_command_line_is_one_line(inputs, tmp_path, disk, case, budget):
    """The disk fills after a share of the index's bytes: in the working files of a sharded build or a rebuild, in
    the members, at the end."""
    args, based = CLI_CASES[case]
    out = tmp_path / "idx"
    before = _base(inputs, out) if based else None
    size = 2_400_000 if case != "update --rebuild-shards" or budget > 0.5 else 40_000
    d = disk(_Disk(int(size * budget)))
    r = _cli(*args(inputs, out))
    assert d.failed, "the write never reached the full disk"
    assert r.exit_code == 1
    line = _one_line(r.output, out)
    assert line.startswith(f"Error: {out}: ") and re.search(NO_SPACE_LINE, line), line
    assert _leftovers(tmp_path) == []
    if before is None:
        assert not out.exists()
    else:
        with gtmkit.load_index(out) as idx:
            assert idx.version == before


@pytest.mark.parametrize("refuse", ["manifest.json", ".CURRENT.tmp-", "sid_ad_ids", "token_offsets", "counts1"])
def test_every_kind_of_file_refused_is_one_error_and_nothing_is_left(inputs, tmp_path, disk, refuse):
    """A full disk met writing the manifest, the pointer, a member, a split piece or a shard piece."""
    out = tmp_path / "idx"
    before = _base(inputs, out)
    d = disk(_Disk(refuse=refuse))
    with pytest.raises(WriteError) as e:
        gtmkit.build_index(inputs / "cat.parquet", out, overwrite=True, shards=2)
    assert d.failed and refuse in os.path.basename(d.failed[0])
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{out}: no space left on device writing ")
    assert _leftovers(tmp_path) == []
    with gtmkit.load_index(out) as idx:
        assert idx.version == before


def test_a_quota_says_so(inputs, tmp_path, disk):
    disk(_Disk(size=10_000, code=errno.EDQUOT))
    with pytest.raises(WriteError, match=r"disk quota exceeded writing .+ needed") as e:
        gtmkit.build_index(inputs / "cat.parquet", tmp_path / "idx")
    assert e.value.no_space and not (tmp_path / "idx").exists()


def test_another_os_error_is_one_line_too(inputs, tmp_path, disk):
    disk(_Disk(refuse="bitmask_table", code=errno.EIO))
    with pytest.raises(WriteError, match=r"cannot write bitmask_table.npy \(Input/output error\)$"):
        gtmkit.build_index(inputs / "cat.parquet", tmp_path / "idx")
    assert not (tmp_path / "idx").exists()


def test_library_writers_raise_one_line_and_print_nothing(inputs, tmp_path, disk, capfd):
    """build_index, rebuild_shards, SuccinctTrie.save and the update writer (Matcher.update_ads's, write_changes)."""
    from gtmkit.indexer.update.changes import read_changes
    from gtmkit.indexer.update.rebuild import rebuild_shards
    from gtmkit.indexer.update.write import write_changes

    out = tmp_path / "idx"
    before = _base(inputs, out)
    trie = SuccinctTrie.build(pq.read_table(inputs / "keys.parquet").column("key"))
    capfd.readouterr()
    disk(_Disk(size=50_000))
    with gtmkit.load_index(out) as idx:
        ch = read_changes(idx, inputs / "edits.parquet")
        calls = {
            "build_index": lambda: gtmkit.build_index(inputs / "cat.parquet", tmp_path / "new"),
            "rebuild_shards": lambda: rebuild_shards(idx, inputs / "moves.parquet"),
            "write_changes": lambda: write_changes(idx, ch, np.zeros(0, np.int64)),
            "SuccinctTrie.save": lambda: trie.save(tmp_path / "trie"),
        }
        for name, call in calls.items():
            with pytest.raises(ArtifactError) as e:
                call()
            assert "\n" not in str(e.value) and "no space left on device writing" in str(e.value), name
    assert capfd.readouterr() == ("", "")
    assert _leftovers(tmp_path) == [] and not (tmp_path / "new").exists() and not (tmp_path / "trie").exists()
    with gtmkit.load_index(out) as idx:
        assert idx.version == before


@pytest.mark.parametrize("extra", [[], ["--shards", "2"], ["--force"]], ids=["whole", "sharded", "force"])
def test_injected_enospc_in_trie_build_is_one_line(inputs, tmp_path, disk, extra):
    out = tmp_path / "trie"
    before = None
    if "--force" in extra:
        assert _cli("trie", "build", inputs / "keys.parquet", "-o", out, "-s").exit_code == 0
        before = layout.served(out)
    disk(_Disk(size=300_000))
    r = _cli("trie", "build", inputs / "keys.parquet", "-o", out, "-s", *extra)
    assert r.exit_code == 1
    assert re.search(NO_SPACE_LINE, _one_line(r.output, out))
    assert _leftovers(tmp_path) == []
    if before is None:
        assert not out.exists()
    else:
        assert layout.served(out) == before
        with SuccinctTrie.load(out) as trie:
            assert trie.num_keys == KEYS


def test_a_dask_task_s_full_disk_comes_back_as_the_same_line(inputs, tmp_path, disk):
    """On Dask workers (threads here, so the injected disk is theirs too): the task's WriteError is the build's."""
    distributed = pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    disk(_Disk(size=200_000))
    with distributed.LocalCluster(n_workers=2, processes=False, dashboard_address=":0") as lc, \
            distributed.Client(lc) as client:
        with pytest.raises(WriteError, match=NO_SPACE_LINE):
            gtmkit.build_index(inputs / "cat.parquet", tmp_path / "idx", client=client, shards=3)
    assert not (tmp_path / "idx").exists()


def test_write_errors_survive_pickling_and_numpy_s_short_write():
    """A worker process's WriteError reaches the build whole; np.save's tofile says only 'N requested and M
    written' on a full disk, which is read as one."""
    e = WriteError.of(OSError(errno.ENOSPC, "No space left on device"), "/x/i/.staging-1-0123abcd/shards/a.npy", 10)
    back = pickle.loads(pickle.dumps(e.at("/x/i", 5_000_000)))
    assert str(back) == str(e.at("/x/i", 5_000_000)) and back.no_space and back.need == 5_000_000
    assert "/x/i: no space left on device writing shards/a.npy (about 5.0 MB needed, " in str(back)
    short = WriteError.of(OSError("30001 requested and 9200 written"), "/x/i/.staging-1-0123abcd/b.npy", 30_001)
    assert short.no_space and "no space left on device writing b.npy (at least 30 kB needed)" in str(short)


# --- a real small tmpfs: where the platform allows --------------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size): a fresh tmpfs of that size (e.g. "1m") at a new folder; skipped where it cannot be mounted."""
    mounted = []

    def mount(size: str):
        if not sys.platform.startswith("linux") or shutil.which("mount") is None:
            pytest.skip("a tmpfs disk needs Linux and mount(8)")
        where = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
        where.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({(r.stderr.strip().splitlines() or ['not permitted'])[-1]})")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _gtmkit(*args):
    """(exit code, what it printed) of a command run in this process; with --workers, its Dask workers are
    processes of their own, writing to the same disk."""
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    return r.exit_code, r.output


TMPFS_CASES = {  # name: (tmpfs size, what is written there first: index, trie or nothing; the command)
    "build": ("1m", None, lambda d, out: ["build", d / "cat.parquet", "-o", out, "-s"]),
    "build --workers 2": ("1m", None, lambda d, out: ["build", d / "cat.parquet", "-o", out, "--workers", "2", "-s"]),
    "build --force": ("4m", "index", lambda d, out: ["build", d / "cat.parquet", "-o", out, "--force", "-s"]),
    "update": ("4m", "index", lambda d, out: ["update", out, d / "edits.parquet", "-s"]),
    "update --rebuild-shards": ("4m", "index",
                                lambda d, out: ["update", out, d / "moves.parquet", "--rebuild-shards", "-s"]),
    "update --rebuild-shards --workers 2": ("4m", "index", lambda d, out: [
        "update", out, d / "moves.parquet", "--rebuild-shards", "--workers", "2", "-s"]),
    "update --pause": ("4m", "index", lambda d, out: ["update", out, "--pause", d / "pause.txt", "-s"]),
    "trie build": ("512k", None, lambda d, out: ["trie", "build", d / "keys.parquet", "-o", out, "-s"]),
    "trie build --workers 2": ("512k", None,
                               lambda d, out: ["trie", "build", d / "keys.parquet", "-o", out, "--workers", "2", "-s"]),
    "trie build --force": ("1600k", "trie", lambda d, out: ["trie", "build", d / "keys.parquet", "-o", out, "-f", "-s"]),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if "--workers" in c else c  # worker processes
                                  for c in TMPFS_CASES])
def test_a_full_tmpfs_is_one_line_and_the_old_version_stays(inputs, tmpfs, monkeypatch, case):
    size, first, args = TMPFS_CASES[case]
    if "--workers" in case:
        pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
        monkeypatch.setenv("GTMKIT_COMPILE_NOTICE", "0")  # a worker's first compile notice is not this test's subject
    mnt = tmpfs(size)
    out = mnt / ("trie" if case.startswith("trie") else "idx")
    before = None
    if first == "index":
        before = _base(inputs, out)
    elif first == "trie":
        SuccinctTrie.build(pq.read_table(inputs / "keys.parquet").column("key")).save(out)
        before = layout.served(out)
    used = shutil.disk_usage(mnt).used
    rc, text = _gtmkit(*args(inputs, out))
    assert rc == 1, text
    line = _one_line(text, out)
    assert line.startswith(f"Error: {out}: ") and re.search(NO_SPACE_LINE, line), line
    gc.collect()  # the command ran in this process: its error's frames may map removed files until collected
    assert _leftovers(mnt) == [] and shutil.disk_usage(mnt).used == used
    if before is None:
        assert not out.exists()
    elif first == "index":
        with gtmkit.load_index(out) as idx:
            assert idx.version == before
    else:
        assert layout.served(out) == before
        with SuccinctTrie.load(out) as trie:
            assert trie.num_keys == KEYS


def test_a_full_temporary_folder_under_changes_given_as_a_table_is_one_line(inputs, tmp_path, monkeypatch):
    """Changes given as a pyarrow Table are read through a temporary Parquet file: a full temporary folder is one
    line naming it, and the index is left as it was."""
    import pyarrow.parquet as pq_module

    from gtmkit.matcher.matcher import Matcher

    out = tmp_path / "idx"
    before = _base(inputs, out)
    table = pq.read_table(inputs / "edits.parquet")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pq_module, "write_table", full)
    with gtmkit.load_index(out) as idx:
        with pytest.raises(WriteError, match=r"no space left on device writing gtmkit-changes-\w+/changes.parquet"):
            Matcher(idx).update_ads(table)
    with gtmkit.load_index(out) as idx:
        assert idx.version == before
