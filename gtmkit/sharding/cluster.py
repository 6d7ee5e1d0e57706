"""Reaching a Dask cluster within a bound: a scheduler's address checked by a handshake before a Client connects,
and a local cluster started whose worker processes leave a Ctrl-C to the build (docs/design.md §3)."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import socket
import threading

from ..errors import GtmkitError

HANDSHAKE_TIMEOUT = 10.0  # seconds a scheduler has to accept a connection and answer the Dask handshake
NO_WORKER_TIMEOUT = 300.0  # seconds a build waits while its cluster has no live worker, by default
START_TIMEOUT = 120.0  # seconds a local cluster's worker processes have to start


def seconds_arg(x, name: str) -> float:
    """A timeout in seconds: a positive number (inf: no bound)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x) or x <= 0:
        raise GtmkitError(f"{name} must be a positive number of seconds, got {x!r}")
    return float(x)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def in_thread(fn, seconds: float, close=None):
    """fn() run in a thread, waited for at most `seconds` (TimeoutError after): a connection that never answers
    cannot hold the caller. A value that comes after the caller gave up (a timeout, a Ctrl-C) is passed to close."""
    box, lock = {}, threading.Lock()

    def run():
        try:
            value, error = fn(), None
        except BaseException as exc:  # handed to the caller, which raises it in its own thread
            value, error = None, exc
        with lock:
            box.update(value=value, error=error, done=True)
            late = box.get("abandoned", False)
        if late and value is not None and close is not None:
            close(value)

    t = threading.Thread(target=run, name="gtmkit-dask-start", daemon=True)
    t.start()
    try:
        t.join(seconds)
    finally:
        with lock:
            if not box.get("done"):
                box["abandoned"] = True
    if not box.get("done"):
        raise TimeoutError(f"no answer within {seconds:g} s")
    if box["error"] is not None:
        raise box["error"]
    return box["value"]


def connect(address: str, timeout: float = None, label: str = None):
    """A dask.distributed Client of the scheduler at address, or GtmkitError (one line naming label, default the
    address) within about 2 * timeout seconds (default HANDSHAKE_TIMEOUT): the address is checked by a handshake
    first."""
    label = label or address
    timeout = HANDSHAKE_TIMEOUT if timeout is None else seconds_arg(timeout, "timeout")
    try:
        from distributed import Client
    except ImportError:
        raise GtmkitError(f"{label}: a Dask cluster needs dask and distributed: pip install 'gtmkit[dist]'") from None
    check_scheduler(address, timeout, label)
    try:
        return in_thread(lambda: Client(address, timeout=timeout), timeout + 5, close=_close_quietly)
    except TimeoutError:
        raise GtmkitError(f"{label}: the Dask scheduler answered its handshake, but a client could not connect "
                          f"within {timeout + 5:g} s") from None
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        raise GtmkitError(f"{label}: cannot connect to the Dask scheduler there ({first_line(exc)})") from None


def check_scheduler(address: str, timeout: float = None, label: str = None) -> None:
    """GtmkitError (one line) unless a Dask scheduler answers at address within about timeout seconds: it
    accepts a connection, answers the comm handshake and says it is a scheduler."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend
    label = label or address
    timeout = HANDSHAKE_TIMEOUT if timeout is None else seconds_arg(timeout, "timeout")
    try:
        scheme, loc = parse_address(address)
        get_backend(scheme)
        host, port = parse_host_port(loc) if scheme == "tcp" else (None, None)
    except (ValueError, TypeError) as exc:  # no port, an unknown scheme
        raise GtmkitError(f"{label}: not a Dask scheduler address ({exc}); e.g. tcp://host:8786") from None
    if host is not None:
        _tcp_connect(label, host, port, timeout)
    try:
        reply = in_thread(lambda: asyncio.run(_identity(address, timeout)), timeout + 5)
    except (KeyboardInterrupt, SystemExit):
        raise
    except (TimeoutError, asyncio.TimeoutError):
        raise GtmkitError(f"{label}: not a Dask scheduler: {_http(host, port, timeout) or 'the server there'} "
                          f"accepts connections but sent no Dask handshake within {timeout:g} s") from None
    except Exception as exc:
        # an HTTP reply read as a frame's length asks for exabytes: the allocation's error says nothing useful
        why = "no Dask frame" if isinstance(exc, MemoryError) else first_line(exc)
        raise GtmkitError(f"{label}: not a Dask scheduler: {_http(host, port, timeout) or 'the server there'} "
                          f"answered the Dask handshake with something else ({why})") from None
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind == "Worker":
        raise GtmkitError(f"{label}: a Dask worker answers there, not a scheduler: give its scheduler's address")
    if kind != "Scheduler":
        raise GtmkitError(f"{label}: not a Dask scheduler: the service there is a Dask {kind or 'server'}")


def _tcp_connect(label: str, host: str, port: int, timeout: float) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except socket.gaierror as exc:
        raise GtmkitError(f"{label}: cannot reach a Dask scheduler there (unknown host {host!r}: "
                          f"{exc.strerror or exc})") from None
    except (socket.timeout, TimeoutError):
        raise GtmkitError(f"{label}: cannot reach a Dask scheduler there (no answer to a connection within "
                          f"{timeout:g} s)") from None
    except OSError as exc:
        raise GtmkitError(f"{label}: cannot reach a Dask scheduler there ({exc.strerror or exc})") from None


async def _identity(address: str, timeout: float):
    """The identity the server at address gives after the comm handshake, all within timeout seconds (the
    handshake's read alone has no bound in distributed)."""
    from distributed.comm import connect as comm_connect

    async def ask():
        comm = await comm_connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    return await asyncio.wait_for(ask(), timeout)


def _http(host, port, timeout: float) -> str | None:
    """'an HTTP server (...)' if the server at host:port answers a request as one (a dashboard, often), else None."""
    if host is None:
        return None
    try:
        with socket.create_connection((host, port), timeout=min(timeout, 2.0)) as s:
            s.settimeout(min(timeout, 2.0))
            s.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
            head = s.recv(5)
    except OSError:
        return None
    return "an HTTP server (a dashboard's port? a scheduler's is usually 8786)" if head == b"HTTP/" else None


def _close_quietly(obj) -> None:
    for x in obj if isinstance(obj, tuple) else (obj,):
        try:
            x.close()
        except Exception:  # closing what nobody will use: its errors have no one to tell
            pass


def start_local(workers: int, memory_limit, env: dict, timeout: float = START_TIMEOUT):
    """(LocalCluster, Client) of `workers` processes, or GtmkitError (one line) naming why a worker could not start.
    The processes are started with SIGINT blocked: a terminal's Ctrl-C reaches the whole process group, and the
    build, not each worker, answers it (stopping them, with no worker's traceback)."""
    import logging
    from multiprocessing import resource_tracker

    import dask
    from distributed import Client, LocalCluster

    def start():
        if hasattr(signal, "pthread_sigmask"):  # this thread's mask passes to the cluster's threads and processes
            # started first: starting multiprocessing's resource tracker unblocks SIGINT in the thread that starts it
            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        preload, argv = _with_preload(dask.config.get("distributed.worker.preload", None) or [],
                                      dask.config.get("distributed.worker.preload-argv", None) or [],
                                      "gtmkit.sharding.worker_output")
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                               dashboard_address=":0",
                               silence_logs=logging.CRITICAL,  # a task's error is the build's one line
                               env=env, preload=preload, preload_argv=argv)
        try:
            return cluster, Client(cluster)
        except BaseException:
            cluster.close()
            raise

    try:
        return in_thread(start, timeout, close=_close_quietly)
    except TimeoutError:
        raise GtmkitError(f"a local Dask cluster of {workers} worker processes did not start within {timeout:g} s") \
            from None
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        if "failed to start" not in str(exc):
            raise GtmkitError(f"a local Dask cluster of {workers} worker processes could not start "
                              f"({first_line(exc)})") from None
        raise GtmkitError(f"a local Dask cluster of {workers} worker processes could not start: a worker failed "
                          f"to start ({first_line(exc.__cause__ or exc)})") from None


def _with_preload(preload, argv, module: str) -> tuple:
    """The workers' preloads (dask's config, kept) and their arguments, with module added last."""
    preload = [preload] if isinstance(preload, str) else list(preload)
    argv = list(argv)
    if argv and isinstance(argv[0], list):  # one list of arguments a preload: ours takes none
        argv = argv + [[]] * (len(preload) + 1 - len(argv))
    return preload + [module], argv


def worker_env(workers: int) -> dict:
    """The environment of a local cluster's workers: they share this machine's cores, and parallel kernels with
    more threads than their share spin against each other (OpenMP's waiting threads keep their cores)."""
    share = str(max(1, (os.cpu_count() or 1) // workers))
    return {"NUMBA_NUM_THREADS": share, "OMP_NUM_THREADS": share}
