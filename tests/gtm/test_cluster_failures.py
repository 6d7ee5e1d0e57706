"""Cluster failures of the sharded builds (`gtmkit build`, `update --rebuild-shards`, `trie build` and their library
forms) are one line each and none waits forever, with a real scheduler and real worker processes: a port that is
not a scheduler's, a scheduler without workers, workers or the scheduler killed mid-build, a worker that cannot
start, a task that kills its worker every time, a Ctrl-C or SIGTERM; inputs given as relative paths reach workers
that run in another folder."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

distributed = pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")

import gtmkit  # noqa: E402
from gtmkit import cli  # noqa: E402
from gtmkit.errors import GtmkitError  # noqa: E402
from gtmkit.artifact import layout  # noqa: E402
from gtmkit.sharding import cluster as cluster_mod  # noqa: E402

ADS, PARTS = 20_000, 4
KEYS = 4_000

# worker preloads: the first task of each sharded command sleeps (a build that is surely mid-way), or kills its worker
TASKS = [("gtmkit.indexer.shards.split", "split_file"), ("gtmkit.trie.shards", "split_keys"),
         ("gtmkit.indexer.update.subtree_task", "build_subtrees")]
PRELOAD = """import importlib, os, time
def wrap(task, act):
    def run(*args, **kwargs):
        act()
        return task(*args, **kwargs)
    return run
for module, name in {tasks!r}:
    m = importlib.import_module(module)
    setattr(m, name, wrap(getattr(m, name), {act}))
"""
SLOW = PRELOAD.format(tasks=TASKS, act="lambda: time.sleep(2)")
KILL = PRELOAD.format(tasks=TASKS, act="lambda: os._exit(1)")
FAIL = "raise RuntimeError('this worker cannot start')\n"

def _own_group() -> None:
    """A child in its own process group, with the default Ctrl-C and SIGTERM a terminal's program starts with: a
    stopped CLI run earlier in this process leaves SIGINT ignored here, which a child would inherit."""
    os.setpgrp()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)



def _one_line(err: str) -> str:
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A catalog in PARTS files (cat/, schema cat.schema.json), a key file, an index of the catalog and changes
    with SIDs it lacks, all in one folder; built here once so the kernels are compiled before workers load them."""
    from gtmkit.synth.catalog import catalog_schema, synth_catalog
    root = tmp_path_factory.mktemp("inputs")
    table = synth_catalog(ADS, seed=3)
    (root / "cat").mkdir()
    for i in range(PARTS):
        pq.write_table(table.slice(i * ADS // PARTS, ADS // PARTS), root / "cat" / f"part-{i}.parquet")
    (root / "cat.schema.json").write_text(json.dumps(catalog_schema(ADS, seed=3)))
    rng = np.random.default_rng(0)
    keys = [rng.integers(0, 500, rng.integers(1, 6)).tolist() for _ in range(KEYS)]
    pq.write_table(pa.table({"key": pa.array(keys, pa.list_(pa.int32()))}), root / "keys.parquet")
    gtmkit.build_index(root / "cat", root / "index").close()
    gtmkit.build_index(root / "cat", root / "sharded", shards=2).close()
    changes = table.slice(0, 50)
    sids = rng.integers(0, 512, (50, 4))  # SIDs of L=4 tokens the index lacks, most of them
    changes = changes.set_column(0, "ad_id", pa.array(np.arange(10**9, 10**9 + 50), pa.int64()))
    i = changes.schema.get_field_index("sid")
    changes = changes.set_column(i, "sid", pa.array(sids.tolist(), changes.schema.field("sid").type))
    pq.write_table(changes, root / "changes.parquet")
    return root


def _work(inputs, tmp_path):
    """A fresh copy of the index (update writes into it) next to the inputs, in tmp_path."""
    import shutil
    for name in ("cat", "cat.schema.json", "keys.parquet", "changes.parquet"):
        src = inputs / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    shutil.copytree(inputs / "index", tmp_path / "index", symlinks=True)
    return tmp_path


def _commands(out):
    """Each sharded command's arguments, writing at out (update: into the copied index)."""
    return {"build": ["build", "cat", "-o", out, "-s"],
            "update": ["update", "index", "changes.parquet", "--rebuild-shards", "-s"],
            "trie": ["trie", "build", "keys.parquet", "-o", out, "-s"]}


def _left(work, command, out) -> list:
    """What the command left behind: staging folders in the index (update), or anything at out."""
    if command == "update":
        return [p.name for p in (work / "index").iterdir() if p.name.startswith(".staging")]
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


# --- a port that is not a Dask scheduler's ---------------------------------------------------------------------

@pytest.fixture
def silent_port():
    """A socket that accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    held, stop = [], threading.Event()

    def accept():
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(s.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield s.getsockname()[1]
    stop.set()
    t.join()
    for c in held:
        c.close()
    s.close()


@pytest.fixture
def http_port():
    """A tiny local HTTP server (a dashboard's port, say)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("command", ["build", "update", "trie"])
@pytest.mark.parametrize("port, says", [("silent_port", "the server there accepts connections but sent no Dask "
                                         "handshake within 1 s"),
                                        ("http_port", "an HTTP server (a dashboard's port? a scheduler's is usually "
                                         "8786) accepts connections but sent no Dask handshake within 1 s")],
                         ids=["silent", "http"])
def test_a_port_that_is_not_a_schedulers_is_refused_within_seconds(inputs, tmp_path, monkeypatch, request, command,
                                                                    port, says):
    port = request.getfixturevalue(port)
    work = _work(inputs, tmp_path)
    monkeypatch.chdir(work)
    monkeypatch.setattr(cluster_mod, "HANDSHAKE_TIMEOUT", 1.0)
    out = work / "out"
    t0 = time.monotonic()
    r = CliRunner().invoke(cli.cli, [str(a) for a in _commands(out)[command]] +
                           ["--scheduler", f"tcp://127.0.0.1:{port}"])
    took = time.monotonic() - t0
    assert r.exit_code == 1 and r.stdout == "", r.output
    assert _one_line(r.stderr) == f"Error: --scheduler tcp://127.0.0.1:{port}: not a Dask scheduler: {says}"
    assert took < 8, took
    assert _left(work, command, out) == []


@pytest.mark.slow  # waits out the 10 s bound
def test_the_handshake_bound_holds_at_its_default(inputs, tmp_path, silent_port):
    """The command line as a user runs it: refused in about HANDSHAKE_TIMEOUT seconds, not distributed's hang."""
    work = _work(inputs, tmp_path)
    t0 = time.monotonic()
    rc, out, err = _finish(_gtmkit(["build", "cat", "-o", "out", "-s", "--scheduler",
                                    f"tcp://127.0.0.1:{silent_port}"], work), 60)
    assert rc == 1 and "sent no Dask handshake within 10 s" in _one_line(err)
    assert time.monotonic() - t0 < 25
    assert not (work / "out").exists()


@pytest.fixture
def eager_http_port():
    """A server that answers every connection at once with an HTTP error, as some proxies do."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    stop = threading.Event()

    def serve():
        s.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                c = s.accept()[0]
                c.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield s.getsockname()[1]
    stop.set()
    t.join()
    s.close()


def test_the_library_refuses_the_same_ports(silent_port, http_port, eager_http_port):
    t0 = time.monotonic()
    with pytest.raises(GtmkitError, match=r"not a Dask scheduler: an HTTP server \(a dashboard's port\? a scheduler's "
                       r"is usually 8786\) answered the Dask handshake with something else \(no Dask frame\)$"):
        cluster_mod.connect(f"tcp://127.0.0.1:{eager_http_port}", timeout=5)
    assert time.monotonic() - t0 < 3  # an HTTP reply read as a frame's length: no exabytes asked for, no wait
    with pytest.raises(GtmkitError, match="sent no Dask handshake within 0.5 s"):
        cluster_mod.connect(f"tcp://127.0.0.1:{silent_port}", timeout=0.5)
    with pytest.raises(GtmkitError, match="an HTTP server"):
        cluster_mod.connect(f"127.0.0.1:{http_port}", timeout=0.5)
    with pytest.raises(GtmkitError, match="not a Dask scheduler address"):
        cluster_mod.connect("http://127.0.0.1:8786", timeout=0.5)
    with pytest.raises(GtmkitError, match=r"cannot reach a Dask scheduler there \(Connection refused\)"):
        cluster_mod.connect("tcp://127.0.0.1:1", timeout=0.5)


@pytest.mark.slow  # an external scheduler and worker process
def test_the_library_names_a_worker_and_takes_a_scheduler(tmp_path):
    with _external(tmp_path, workers=1) as c, distributed.Client(c.address) as client:
        worker = next(iter(client.scheduler_info()["workers"]))
        with pytest.raises(GtmkitError, match="a Dask worker answers there, not a scheduler"):
            cluster_mod.connect(worker, timeout=2)
        cluster_mod.connect(c.address, timeout=2).close()


# --- an external cluster: `dask scheduler` and `dask worker` processes, in a folder of their own ---------------------

def _spawn(args, cwd, env=None):
    """A process leading a process group of its own: the whole group is stopped at the end."""
    return subprocess.Popen([sys.executable, "-m", *map(str, args)], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=_own_group)


def _kill(proc) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


class _Cluster:
    def __init__(self, address, scheduler, workers):
        self.address, self.scheduler, self.workers = address, scheduler, workers


@contextlib.contextmanager
def _external(tmp_path, workers: int, preload: str = None):
    """A scheduler and `workers` worker processes (each with its nanny), run from their own folder."""
    home = tmp_path / "dask-cluster"
    home.mkdir()
    env = dict(os.environ)
    extra = []
    if preload:
        (home / "preload.py").write_text(preload)
        extra = ["--preload", str(home / "preload.py")]
    procs = []
    try:
        procs.append(_spawn(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                             "--dashboard-address", ":0", "--scheduler-file", home / "scheduler.json"], home, env))
        end = time.monotonic() + 30
        while not (home / "scheduler.json").exists():
            assert time.monotonic() < end and procs[0].poll() is None, "the scheduler did not start"
            time.sleep(0.05)
        time.sleep(0.1)  # written whole
        address = json.loads((home / "scheduler.json").read_text())["address"]
        ws = [_spawn(["distributed.cli.dask_worker", address, "--nthreads", "1", "--no-dashboard", *extra], home, env)
              for _ in range(workers)]
        procs += ws
        if workers:
            with distributed.Client(address, timeout=10) as client:
                client.wait_for_workers(workers, timeout=40)
        yield _Cluster(address, procs[0], ws)
    finally:
        for p in procs:
            _kill(p)


def _gtmkit(args, cwd, env=None):
    return subprocess.Popen([sys.executable, "-m", "gtmkit", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_own_group)


def _finish(proc, timeout: float) -> tuple:
    """(exit code, stdout, stderr) of a gtmkit process, stopped (and the test failed) past timeout."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.communicate()
        pytest.fail(f"gtmkit still ran after {timeout} s")
    return proc.returncode, out, err


def _when_working(work, command, out, proc, timeout: float = 60) -> None:
    """Until the command's tasks run: its staging folder holds their working folder."""
    where = work / "index" if command == "update" else out
    end = time.monotonic() + timeout
    while not any((d / sub).is_dir() for d in where.glob(".staging-*") for sub in ("shards", "subtrees")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the tasks did not start"
        time.sleep(0.02)


@pytest.mark.slow  # an external scheduler and a gtmkit process
@pytest.mark.parametrize("command", ["build", "update", "trie"])
def test_a_scheduler_without_workers_fails_after_the_no_worker_timeout(inputs, tmp_path, command):
    work = _work(inputs, tmp_path)
    with _external(tmp_path, workers=0) as c:
        t0 = time.monotonic()
        rc, out, err = _finish(_gtmkit([*_commands(work / "out")[command], "--scheduler", c.address,
                                        "--no-worker-timeout", 2], work), 60)
        took = time.monotonic() - t0
    assert rc == 1 and out == ""
    line = _one_line(err)
    assert line == f"Error: {'subtrees' if command == 'update' else 'split'}: no live Dask worker for 2 s: the " \
                   f"scheduler at {c.address} has none (none joined, or all died); --no-worker-timeout / " \
                   "no_worker_timeout sets the wait", line
    assert took < 20, took
    assert _left(work, command, work / "out") == []


@pytest.mark.slow  # an external scheduler process
def test_the_library_forms_take_no_worker_timeout(inputs, tmp_path):
    from gtmkit.trie.trie import SuccinctTrie
    from gtmkit.indexer.update.rebuild import rebuild_shards
    work = _work(inputs, tmp_path)
    with _external(tmp_path, workers=0) as c, distributed.Client(c.address) as client:
        with pytest.raises(GtmkitError, match="split: no live Dask worker for 1 s"):
            gtmkit.build_index(work / "cat", work / "out", client=client, no_worker_timeout=1)
        with pytest.raises(GtmkitError, match="split: no live Dask worker for 1 s"):
            SuccinctTrie.build_dataset(work / "keys.parquet", work / "trie", client=client, no_worker_timeout=1)
        with pytest.raises(GtmkitError, match="subtrees: no live Dask worker for 1 s"):
            rebuild_shards(work / "index", work / "changes.parquet", client=client, no_worker_timeout=1)
        with pytest.raises(GtmkitError, match="no_worker_timeout must be a positive number of seconds"):
            gtmkit.build_index(work / "cat", work / "out", client=client, no_worker_timeout=0)
    assert not (work / "out").exists() and not (work / "trie").exists() and _left(work, "update", None) == []


def test_the_option_goes_with_a_cluster(inputs, tmp_path):
    r = CliRunner().invoke(cli.cli, ["build", str(inputs / "cat"), "-o", str(tmp_path / "out"),
                                     "--no-worker-timeout", "5"])
    assert r.exit_code == 2 and "--no-worker-timeout goes with --workers or --scheduler" in r.output
    for command in (["build"], ["update"], ["trie", "build"]):
        r = CliRunner().invoke(cli.cli, [*command, "--help"])
        assert "--no-worker-timeout SECONDS" in r.output and "[default: 300]" in " ".join(r.output.split())


@pytest.mark.slow  # an external cluster killed under a gtmkit process
@pytest.mark.parametrize("lost", ["workers", "scheduler"])
def test_a_cluster_killed_mid_build_is_one_line(inputs, tmp_path, lost):
    """All workers killed (with their nannies): no live worker for the timeout; the scheduler killed: lost at once."""
    work = _work(inputs, tmp_path)
    with _external(tmp_path, workers=2, preload=SLOW) as c:
        proc = _gtmkit(["build", "cat", "-o", "out", "-s", "--scheduler", c.address, "--no-worker-timeout", 2], work)
        _when_working(work, "build", work / "out", proc)
        t0 = time.monotonic()
        for p in (c.workers if lost == "workers" else [c.scheduler]):
            os.killpg(p.pid, signal.SIGKILL)
        rc, out, err = _finish(proc, 60)
        took = time.monotonic() - t0
    assert rc == 1 and out == ""
    line = _one_line(err)
    if lost == "workers":
        assert f"split: no live Dask worker for 2 s: the scheduler at {c.address} has none" in line, line
        assert took < 20, took
    else:
        assert line == f"Error: split: lost the Dask scheduler at {c.address} (the connection closed: it stopped, " \
                       "or the network failed)"
        assert took < 10, took
    assert _left(work, "build", work / "out") == []


# --- a local cluster (--workers) whose workers fail --------------------------------------------------------------

def _preload_env(tmp_path, source: str, **config) -> dict:
    """The environment of a gtmkit process whose Dask workers run `source` first (dask config passes to them)."""
    (tmp_path / "preload.py").write_text(source)
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__PRELOAD=json.dumps([str(tmp_path / "preload.py")]))
    env.update({f"DASK_DISTRIBUTED__{k.upper()}": str(v) for k, v in config.items()})
    return env


@pytest.mark.slow  # a gtmkit process starting worker processes
def test_a_worker_that_cannot_start_is_one_line(inputs, tmp_path):
    work = _work(inputs, tmp_path)
    t0 = time.monotonic()
    rc, out, err = _finish(_gtmkit(["build", "cat", "-o", "out", "-s", "--workers", 2], work,
                                   _preload_env(tmp_path, FAIL)), 90)
    assert rc == 1 and out == "" and time.monotonic() - t0 < 30
    assert _one_line(err) == "Error: a local Dask cluster of 2 worker processes could not start: a worker failed to " \
                             "start (RuntimeError: this worker cannot start)"
    assert not (work / "out").exists()


@pytest.mark.slow  # a gtmkit process whose worker processes die
@pytest.mark.parametrize("command, phase", [("build", "split"), ("update", "subtrees"), ("trie", "split")])
def test_a_task_that_kills_its_worker_every_time_is_one_line(inputs, tmp_path, command, phase):
    work = _work(inputs, tmp_path)
    env = _preload_env(tmp_path, KILL, scheduler__allowed_failures=1)
    t0 = time.monotonic()
    rc, out, err = _finish(_gtmkit([*_commands(work / "out")[command], "--workers", 2], work, env), 90)
    assert rc == 1 and out == "" and time.monotonic() - t0 < 40
    line = _one_line(err)
    assert line.startswith(f"Error: {phase}: Dask workers died running one task, every time it ran (2 times, task "
                           f"gtmkit-{phase}-"), line
    assert line.endswith("on the local cluster's 2 worker processes): a crash in the task, or a worker's memory "
                         "limit"), line
    assert _left(work, command, work / "out") == []


def _worker_processes(pid: int) -> list:
    """The Dask worker processes among pid's children (multiprocessing's spawned ones)."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            for child in open(f"/proc/{pid}/task/{task}/children").read().split():
                with contextlib.suppress(OSError):
                    if b"spawn_main" in open(f"/proc/{child}/cmdline", "rb").read():
                        out.append(int(child))
    return out


@pytest.mark.slow  # a gtmkit process whose worker processes are killed
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="finds the worker processes in /proc")
def test_workers_that_keep_dying_fail_in_one_line(inputs, tmp_path):
    """`--workers 2` whose worker processes are killed as soon as they come back: the build ends in one line, no
    live worker for the timeout (or a task whose every worker died)."""
    work = _work(inputs, tmp_path)
    proc = _gtmkit(["build", "cat", "-o", "out", "-s", "--workers", 2, "--no-worker-timeout", 2], work,
                   _preload_env(tmp_path, SLOW))
    _when_working(work, "build", work / "out", proc)
    t0, kills = time.monotonic(), 0
    while proc.poll() is None and time.monotonic() - t0 < 60:
        for pid in _worker_processes(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                kills += 1
        time.sleep(0.05)
    rc, out, err = _finish(proc, 30)
    assert kills and rc == 1 and out == "" and time.monotonic() - t0 < 40
    line = _one_line(err)
    assert ("no live Dask worker for 2 s: the local cluster's 2 worker processes keep dying" in line
            or "Dask workers died running one task" in line), line
    assert not (work / "out").exists()


# --- Ctrl-C and SIGTERM ----------------------------------------------------------------------------------------------

# each command once, the two signals shared among them (a run costs a local cluster's start)
@pytest.mark.slow  # a signal to a gtmkit process and its workers
@pytest.mark.parametrize("command, stop", [("build", "SIGINT"), ("update", "SIGTERM"), ("trie", "SIGINT")])
def test_a_stop_with_workers_is_one_line_and_says_nothing_was_published(inputs, tmp_path, command, stop):
    """Ctrl-C at a terminal reaches the whole process group, workers included: one line, no worker's traceback."""
    work = _work(inputs, tmp_path)
    before = layout.served(work / "index")
    proc = _gtmkit([*_commands(work / "out")[command], "--workers", 2], work, _preload_env(tmp_path, SLOW))
    _when_working(work, command, work / "out", proc)
    os.killpg(proc.pid, getattr(signal, stop))
    rc, out, err = _finish(proc, 60)
    end = time.monotonic() + 15
    while _group_alive(proc.pid):  # the workers stop with the build
        assert time.monotonic() < end, "a process of the build outlived it"
        time.sleep(0.1)
    what = "Ctrl-C" if stop == "SIGINT" else "SIGTERM"
    assert rc == 128 + getattr(signal, stop) and out == ""
    if command == "update":
        assert _one_line(err) == f"gtmkit: stopped by {what}; nothing was published: index serves {before} as before"
        assert layout.served(work / "index") == before
    else:
        assert _one_line(err) == f"gtmkit: stopped by {what}; nothing was published at {work / 'out'} (nothing is " \
                                 "left there)"
    assert _left(work, command, work / "out") == []


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("previous", [False, True])
def test_a_stop_after_the_pointer_switch_names_the_version_published(inputs, tmp_path, monkeypatch, stop, previous):
    out = tmp_path / "out"
    if previous:
        gtmkit.build_index(inputs / "cat", out).close()
    old = layout.served(out) if previous else None
    switch = layout.write_pointer

    def then_stop(root, name):
        switch(root, name)
        if stop == "SIGINT":
            raise KeyboardInterrupt
        monkeypatch.setitem(cli._stopped, "signal", signal.SIGTERM)  # as cli._stop records it
        raise SystemExit(128 + signal.SIGTERM)

    monkeypatch.setattr(layout, "write_pointer", then_stop)
    r = CliRunner().invoke(cli.cli, ["build", str(inputs / "cat"), "-o", str(out), "-s", "--shards", "2"]
                           + (["--force"] if previous else []))
    monkeypatch.undo()
    now = layout.served(out)
    assert now != old and r.stdout == ""
    what = "Ctrl-C" if stop == "SIGINT" else "SIGTERM"
    assert r.exit_code == 128 + getattr(signal, stop)
    assert _one_line(r.stderr) == f"gtmkit: stopped by {what} after the new version was published: {out} serves {now}"
    assert gtmkit.load_index(out, verify=True).num_ads == ADS


def test_a_stop_before_the_pointer_switch_says_what_is_served(inputs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    gtmkit.build_index(inputs / "cat", out).close()
    old = layout.served(out)

    def stop(root, name):
        raise KeyboardInterrupt

    monkeypatch.setattr(layout, "write_pointer", stop)
    r = CliRunner().invoke(cli.cli, ["build", str(inputs / "cat"), "-o", str(out), "-s", "--force"])
    monkeypatch.undo()
    assert r.exit_code == 130 and layout.served(out) == old
    assert _one_line(r.stderr) == f"gtmkit: stopped by Ctrl-C; nothing was published: {out} serves {old} as before"


# --- inputs resolved on the driver -------------------------------------------------------------------------------

@pytest.mark.slow  # five commands against one external cluster
def test_relative_inputs_reach_workers_that_run_elsewhere(inputs, tmp_path):
    """The workers run in their own folder: a relative catalog, key file or `~` path is resolved before tasks
    start, and a bad file is named as given, as the single-process build names it."""
    work = _work(inputs, tmp_path / "work")
    bad = work / "bad"
    bad.mkdir()
    t = pq.read_table(work / "cat" / "part-1.parquet").slice(0, 100)
    pq.write_table(pq.read_table(work / "cat" / "part-0.parquet").slice(0, 100), bad / "part-0.parquet")
    pq.write_table(t.set_column(0, "ad_id", pa.array([None] * 100, pa.int64())), bad / "part-1.parquet")
    (work / "bad.schema.json").write_text((work / "cat.schema.json").read_text())
    (tmp_path / "link").symlink_to(work / "cat")
    env = dict(os.environ, HOME=str(work))
    with _external(tmp_path, workers=1) as c:
        runs = [_finish(_gtmkit(args, work, env), 90) for args in (
            ["build", "cat", "-o", "a", "-s", "--scheduler", c.address],
            ["build", "~/cat", "-o", "b", "-s", "--scheduler", c.address, "--schema", "cat.schema.json"],
            ["build", "../link", "-o", "c", "-s", "--scheduler", c.address, "--schema", "cat.schema.json"],
            ["trie", "build", "keys.parquet", "-o", "t", "-s", "--scheduler", c.address],
            ["build", "bad", "-o", "d", "-s", "--scheduler", c.address],
        )]
    for rc, out, err in runs[:4]:
        assert rc == 0 and err == "", err
    single = gtmkit.load_index(inputs / "index")
    for name in "abc":
        assert gtmkit.load_index(work / name).num_ads == single.num_ads
    rc, out, err = runs[4]
    assert rc == 1 and _one_line(err) == "Error: bad/part-1.parquet: column 'ad_id', row 0: null ad_id"
    assert not (work / "d").exists()
