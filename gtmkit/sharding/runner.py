"""Where a sharded build's tasks run: in this process one after another, or on a Dask cluster with its
failures (a lost scheduler, dead workers, Ctrl-C) turned into one line (docs/design.md §3)."""

from __future__ import annotations

import functools
import os
import time
import uuid

import numpy as np

from ..errors import GtmkitError
from ..inputs.stores import resolve_input
from ..progress import report
from .cluster import NO_WORKER_TIMEOUT, in_thread, seconds_arg, start_local, worker_env


POLL_S = 1.0  # seconds between checks of the cluster while no task ends
ASK_S = 10.0  # seconds the scheduler has to answer one question
CLOSE_S = 30.0  # seconds a build's own local cluster has to close


def count_arg(x, name: str, lo: int) -> int:
    """A build's shard, worker or byte count: an integer >= lo (bools refused)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < lo:
        raise GtmkitError(f"{name} must be an integer >= {lo}, got {x!r}")
    return int(x)


class _Lazy:
    """A task of this process, run when its value is first needed (by collect, or by a task that takes it)."""

    def __init__(self, fn, args: tuple):
        self.fn, self.args, self.done, self.value = fn, args, False, None

    def get(self):
        if not self.done:
            self.value, self.done = self.fn(*_resolve(self.args)), True
            self.fn = self.args = None
        return self.value


def _resolve(x):
    """x with the tasks in it (in lists and tuples too, as Dask resolves futures) replaced by their values."""
    if isinstance(x, _Lazy):
        return x.get()
    if isinstance(x, (list, tuple)):
        return type(x)(_resolve(y) for y in x)
    return x


class Pieces:
    """Where a runner's tasks keep their pieces: a --staging location (a local path or URL, a folder of this build
    made under it on first use and removed by clear_pieces), or the runner's default."""
    staging = None
    _at = None

    def pieces_at(self, local) -> str | None:
        """The folder tasks write their pieces into (None: they return them); local: the driver's own folder."""
        if self.staging is None:
            return self._default(local)
        if self._at is None:
            from .pieces import Staging
            self._at = Staging(self.staging)
        return self._at.root

    def clear_pieces(self) -> None:
        if self._at is not None:
            at, self._at = self._at, None
            at.remove()


class InProcess(Pieces):
    """Tasks run here, one after another: a shard at a time in memory, the pieces between phases in local files."""
    workers = 1
    address = None

    def __init__(self, staging: str | None = None):
        self.staging = staging

    def _default(self, local) -> str:
        return str(local)

    def paths(self, source, files: list) -> tuple:
        return source, files

    def worker_memory(self) -> int | None:
        return None  # this machine's memory: shard_count shares it

    def later(self, fn, *args, phase: str = "task"):
        return _Lazy(fn, args)

    def share(self, obj):
        return obj

    def collect(self, handles: list, progress, phase: str, land=None, fetch: bool = True, after=None):
        """The tasks' values in order (fetch False: the handles, run). land(i): a folder of this machine where
        task i's {"meta", "piece"} lands, its value then (meta, the piece as files there). after(i): called once
        task i's value is in hand."""
        out = []
        for i, h in enumerate(handles):
            v = h.get()
            if land is not None:
                from .pieces import land as land_piece
                v = (v["meta"], land_piece(v["piece"], land(i)))
                h.value = None  # landed: the piece's arrays are freed
            out.append(v if fetch else h)
            if after is not None:
                after(i)
            report(progress, i + 1, len(handles), phase)
        return out

    def map(self, fn, args: list, progress, phase: str, land=None, after=None) -> list:
        return self.collect([self.later(fn, *a) for a in args], progress, phase, land, after=after)

    def keep(self, fn, args: list, progress, phase: str) -> list:
        """Tasks run, their values kept where they are for later tasks to take (here: in this process)."""
        return self.collect([self.later(fn, *a) for a in args], progress, phase, fetch=False)

    def release(self, handles) -> None:
        pass

    def drop(self, handles) -> None:
        pass

    def close(self) -> None:
        pass


class OnDask(Pieces):
    """Tasks on a dask.distributed cluster: a Client given, or a LocalCluster of `workers` processes. No wait is
    unbounded: a map fails in one line when the cluster has had no live worker for no_worker_timeout seconds, when
    the scheduler is lost, or when one task kills every worker that runs it."""

    def __init__(self, client=None, workers: int | None = None, memory_limit: int | None = None,
                 no_worker_timeout: float | None = None, staging: str | None = None):
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise GtmkitError("a build on Dask workers needs dask and distributed: "
                              "pip install 'gtmkit[dist]'") from None
        self.staging = staging
        self.no_worker_timeout = NO_WORKER_TIMEOUT if no_worker_timeout is None else \
            seconds_arg(no_worker_timeout, "no_worker_timeout")
        self._own = None
        self._given = {}  # task paths resolved on this side -> as the caller gave them, for error lines
        if client is None:
            self._own, client = start_local(workers, memory_limit or "auto", worker_env(workers))
            self.where = f"the local cluster's {workers} worker processes"
            self._none = f"the local cluster's {workers} worker processes keep dying"
        else:
            self.where = f"the Dask scheduler at {client.scheduler.address}"
            self._none = f"the scheduler at {client.scheduler.address} has none (none joined, or all died)"
        self.client = client
        self._none_since = None
        self.workers = max(1, self._alive() or 0)
        # a LocalCluster of this build is named by its size alone: its address is gone with it
        self.address = None if self._own is not None else client.scheduler.address

    def _default(self, local) -> None:
        return None  # pieces move as task results: no task touches a path of this machine

    def paths(self, source, files: list) -> tuple:
        """source and files as the tasks read them: absolute, ~ and links resolved here, where the caller gave them
        (a worker may run elsewhere, in another folder); a task's error names them as given."""
        def resolve(p):
            r = resolve_input(str(p))  # a URL as it is
            if r != str(p):
                self._given[r] = str(p)
            return r
        return resolve(source), [resolve(f) for f in files]

    def later(self, fn, *args, phase: str = "task", where: str | None = None):
        """A task submitted now, its result left on the worker that computes it (a future; futures in args are its
        inputs, moved to it by Dask). where: a worker's address to run it on while that worker lives (else any)."""
        key = f"gtmkit-{phase}-{uuid.uuid4().hex[:12]}"
        if where is None:
            return self.client.submit(fn, *args, key=key, pure=False)
        return self.client.submit(fn, *args, key=key, pure=False, workers=[where], allow_other_workers=True)

    def holder(self, f) -> str | None:
        """The address of a worker holding f's result; None where the scheduler names none (or does not answer)."""
        try:
            who = in_thread(lambda: self.client.who_has([f]), ASK_S)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception:  # unreachable or closed: the caller's wait reports the cluster
            return None
        return next(iter(who.get(f.key) or ()), None)

    def share(self, obj):
        """obj as a task's input for many tasks: held in the scheduler's graph, so a worker that dies loses
        nothing that cannot be computed again (scattered data could not be)."""
        return self.later(_same, obj, phase="shared")

    def map(self, fn, args: list, progress, phase: str, land=None, after=None) -> list:
        """The tasks' values in order. With land (collect's), a task is submitted once one of the `workers` before
        it has landed its piece: a worker's only thread would otherwise be running its next task while the piece it
        holds waits for the small tasks that hand it over, and the worker would hold that piece and the next
        task's memory at once."""
        if land is None:
            return self.collect([self.later(fn, *a, phase=phase) for a in args], progress, phase, after=after)
        tasks = [functools.partial(self.later, fn, *a, phase=phase) for a in args]
        return self.collect(tasks, progress, phase, land, after=after, window=self.workers)

    def keep(self, fn, args: list, progress, phase: str) -> list:
        """Tasks run, their results left on the workers for later tasks to take (futures)."""
        return self.collect([self.later(fn, *a, phase=phase) for a in args], progress, phase, fetch=False)

    def release(self, futures) -> None:
        """The futures cancelled, and the tasks that take them."""
        if self._connected():
            try:
                self.client.cancel(list(futures))
            except Exception:  # a scheduler lost meanwhile keeps no task of ours
                pass

    def drop(self, futures) -> None:
        """This client's hold on the futures let go, the tasks that take them left to run: the scheduler frees each
        result once those have run (and can still compute it again for them where a worker dies)."""
        for f in futures:
            f.release()

    def collect(self, futures: list, progress, phase: str, land=None, fetch: bool = True, after=None,
                window: int | None = None) -> list:
        """The futures' results in order, each fetched as its task ends; fetch False: the futures, once every task
        has ended (results left where they are). land(i): a folder of this machine where task i's {"meta", "piece"}
        lands a block of rows at a time (fetch.py), its value then (meta, the piece as files there), the result then
        released. after(i): called once task i's value is in hand. futures may also be callables that submit a task
        (its future): these are submitted in order, at most `window` tasks out at once (submitted and not yet in
        hand). A task's error raises: the first in order among the failing ones, as InProcess would."""
        from distributed import KilledWorker
        from .fetch import land_remote
        todo, futures = list(futures), []  # futures: those submitted, in order
        place = {}
        out = {}
        self._none_since = None  # the driver's own work between maps is not the workers' absence
        ok = False
        try:
            while len(out) < len(todo):
                pending = [f for f in futures if f.key not in out]
                # with a window, tasks that have ended are taken before another is submitted, which Dask might give
                # to a worker holding one of them: the small tasks landing it would wait for that task
                while len(futures) < len(todo) and (window is None or (
                        len(pending) < window and not any(f.done() for f in pending))):
                    f = todo[len(futures)]
                    f = f() if callable(f) else f
                    place[f.key] = len(futures)
                    futures.append(f)
                    pending.append(f)
                for f in self._wait_any(pending, phase):
                    if f.status == "error":
                        if not isinstance(f.exception(), GtmkitError):  # a dead worker's error: no file's order
                            raise f.exception()
                        # the first failing task in order raises, as InProcess would: with several bad files the
                        # error is the single-process build's, whichever task ends first
                        before = futures[:place[f.key]]
                        self._wait_all(before, phase)
                        for g in before + [f]:
                            if g.status == "error":
                                raise self._as_given(g.exception())
                    if not fetch:
                        out[f.key] = f
                        report(progress, len(out), len(todo), phase)
                        continue
                    # fetched as each ends: a result held by a worker that dies later would be computed again
                    i = place[f.key]
                    got = self._result(f, phase) if land is None else (land_remote(self, f, land(i), phase),)
                    if got is not None:
                        out[f.key] = got[0]
                        if land is not None:
                            f.release()
                        if after is not None:
                            after(i)
                        report(progress, len(out), len(todo), phase)
            ok = True
            return [out[f.key] for f in futures]
        except KilledWorker as exc:
            # the scheduler ran the task again on other workers (distributed.scheduler.allowed-failures times)
            tries = exc.allowed_failures + 1
            raise GtmkitError(f"{phase}: Dask workers died running one task, every time it ran ({tries} times, task "
                              f"{exc.task} on {self.where}): a crash in the task, or a worker's memory limit") from None
        finally:
            if self._connected() and (fetch or not ok):
                try:
                    self.client.cancel(futures)
                except Exception:  # a scheduler lost meanwhile keeps no task of ours
                    pass
                if not ok:
                    self._wait_stopped(list(place))

    def _result(self, f, phase: str):
        """(f's result,), or None when its worker died holding it (the scheduler computes it again)."""
        import distributed
        try:
            return (f.result(timeout=ASK_S),)
        except (TimeoutError, distributed.TimeoutError):
            return None
        except Exception:  # cancelled meanwhile: only a lost connection cancels ours
            if f.status == "cancelled" or not self._connected():
                raise self._lost(phase) from None
            raise

    def value(self, f, phase: str):
        """f's result once its task has ended (computed again, and waited for, where its worker died holding it)."""
        while True:
            self._wait_all([f], phase)
            if f.status == "error":
                raise self._as_given(f.exception())
            got = self._result(f, phase)
            if got is not None:
                return got[0]

    def _wait_any(self, pending: list, phase: str) -> list:
        """Those of pending that are done, once one is; the cluster checked while none is."""
        from distributed import wait
        while True:
            if not self._connected():
                raise self._lost(phase)
            try:
                wait(pending, timeout=POLL_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                pass
            except Exception:  # futures cancelled by a lost connection: their states say so below
                if self._connected() and not any(f.status == "cancelled" for f in pending):
                    raise
            ready = [f for f in pending if f.done()]
            if any(f.status == "cancelled" for f in ready) or not self._connected():
                raise self._lost(phase)  # only the client's lost connection cancels ours
            if ready:
                return ready
            self._check(phase)

    def _wait_all(self, futures: list, phase: str) -> None:
        while futures:
            self._wait_any(futures, phase)
            futures = [f for f in futures if not f.done()]

    def _connected(self) -> bool:
        return self.client.status == "running"

    def worker_memory(self) -> int | None:
        """The smallest memory limit the scheduler reports for its workers, in bytes; None where it reports none
        (no limit set) or does not answer: shard sizes then share this machine's memory."""
        try:
            workers = in_thread(self.client.scheduler_info, ASK_S).get("workers", {})
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception:  # unreachable or closed: sizing falls back, the build's own checks report the cluster
            return None
        limits = [int(w.get("memory_limit") or 0) for w in workers.values()]
        return min((x for x in limits if x > 0), default=None)

    def _alive(self) -> int | None:
        """Live workers the scheduler counts; None when it does not answer."""
        try:
            return len(self.client.nthreads(callback_timeout=ASK_S))
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception:  # unreachable or closed: the caller's bound decides
            return None

    def _check(self, phase: str) -> None:
        """GtmkitError once the cluster has had no live worker (or the scheduler no answer) for no_worker_timeout."""
        n = self._alive()
        if n:
            self._none_since = None
            return
        now = time.monotonic()
        if self._none_since is None:
            self._none_since = now
        if now - self._none_since < self.no_worker_timeout:
            return
        t = f"{self.no_worker_timeout:g} s"
        if n is None:
            raise GtmkitError(f"{phase}: {self.where} has not answered for {t}")
        raise GtmkitError(f"{phase}: no live Dask worker for {t}: {self._none}; --no-worker-timeout / "
                          f"no_worker_timeout sets the wait")

    def _lost(self, phase: str) -> GtmkitError:
        return GtmkitError(f"{phase}: lost {self.where} (the connection closed: it stopped, or the network "
                           f"failed)")

    def _as_given(self, exc: BaseException) -> BaseException:
        """A task's error naming its paths as the caller gave them."""
        if not self._given or not isinstance(exc, GtmkitError) or [type(a) for a in exc.args] != [str]:
            return exc
        msg = exc.args[0]
        for resolved in sorted(self._given, key=len, reverse=True):
            msg = msg.replace(resolved, self._given[resolved])
        exc.args = (msg,)
        return exc

    def _wait_stopped(self, keys: list, timeout: float = 60.0) -> None:
        """Until no worker runs any of these tasks: a cancelled task runs on to its end, and one that wrote into
        the staging directory while the build removed it would leave that directory behind."""
        if self._own is not None:
            return  # this build's own workers stop with it, before its files are removed
        end = time.monotonic() + timeout
        while time.monotonic() < end and self._connected():
            try:
                busy = self.client.run(_running, keys, callback_timeout=ASK_S)
            except Exception:  # a worker gone or unreachable runs nothing of ours
                return
            if not any(busy.values()):
                return
            time.sleep(0.02)

    def close(self) -> None:
        if self._own is not None:
            own, self._own = self._own, None
            for close in (self.client.close, lambda: own.close(timeout=CLOSE_S)):
                try:
                    close()
                except Exception:  # distributed's close fails on a worker mid-restart: the build's error is the line
                    pass


class Held:
    """The task results a build holds, in named groups: released (cancelled, with the tasks that take them) when the
    build ends or fails, or a group dropped earlier (let go, the tasks that take them left to run: OnDask.drop)."""

    def __init__(self, run):
        self.run, self.groups = run, {}

    def add(self, name, futures: list) -> None:
        self.groups[name] = list(futures)

    def drop(self, name) -> None:
        self.run.drop(self.groups.pop(name, []))

    def release(self) -> None:
        groups, self.groups = self.groups, {}
        self.run.release([f for fs in groups.values() for f in fs])


def _same(obj):
    return obj


def _running(keys: list, dask_worker=None) -> list:
    """Those of the keys this worker still executes (a cancelled task's thread runs to its end)."""
    tasks = dask_worker.state.tasks
    return [k for k in keys if k in tasks and tasks[k].state in ("executing", "long-running", "cancelled", "resumed")]


def runner(client=None, workers: int | None = None, memory_limit: int | None = None,
           no_worker_timeout: float | None = None, staging: str | None = None):
    """InProcess, or OnDask with a client or `workers` local processes. staging: a local path or URL where tasks
    keep their pieces between phases (for pieces larger than the cluster's memory; default: in memory on Dask)."""
    if staging is not None and not isinstance(staging, (str, os.PathLike)):
        raise GtmkitError(f"staging must be a local path or a URL, got {staging!r}")
    staging = None if staging is None else os.fspath(staging)
    if client is None and not workers:
        return InProcess(staging)
    return OnDask(client, workers, memory_limit, no_worker_timeout, staging)
