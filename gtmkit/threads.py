"""numba threading layer and parallel-kernel launches for processes whose threads share one Matcher.

numba's `workqueue` layer is not re-entrant: two threads launching parallel kernels at once abort the
process. At import gtmkit asks for the "threadsafe" layers (tbb, else OpenMP) when one of them loads and
neither NUMBA_THREADING_LAYER nor numba.config.THREADING_LAYER names a layer; every `parallel=True` kernel
is built with `parallel_njit`, whose launches take one process-wide lock while the layer in use is
workqueue (the serial kernels never take it). GNU OpenMP is not fork-safe: in a child forked after its
parent ran an OpenMP parallel region, numba kills the child at its first parallel launch, so gtmkit
refuses that launch with ThreadingLayerError instead (fork from a process that has run no parallel
kernel, e.g. a forkserver, use spawn, or install tbb). docs/matcher.md, "Threads", says more."""

from __future__ import annotations

import functools
import importlib
import os
import threading

import numba
from numba import njit
from numba.core import config
from numba.np.ufunc import parallel as _parallel

from .errors import GtmkitError

_LOCK = threading.Lock()  # serialises parallel launches while the layer is workqueue
_reentrant = None  # None until numba has started its layer; then whether it is tbb or omp
_forked_after_gnu_omp = False


class ThreadingLayerError(GtmkitError):
    """A parallel kernel cannot run in this process (its threading layer cannot be used here)."""


def _loads(layer: str) -> bool:
    try:  # loading the pool library starts no threads, so a forkserver may do this safely
        importlib.import_module(f"numba.np.ufunc.{layer}pool")
        return True
    except (ImportError, OSError):
        return False


def choose_layer() -> None:
    """Ask numba for a re-entrant layer unless the user named one (environment or config) or numba has
    already started one. Called at gtmkit import, before any gtmkit kernel runs."""
    if "NUMBA_THREADING_LAYER" in os.environ or config.THREADING_LAYER != "default" or _parallel._is_initialized:
        return
    if _loads("tbb") or _loads("omp"):
        config.THREADING_LAYER = "threadsafe"


def threading_layer() -> str | None:
    """The layer numba started ("tbb", "omp", "workqueue"), or None before the first parallel launch."""
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet
        return None


def serialised() -> bool:
    """Whether parallel launches take the process-wide lock: until a layer has started (it may be
    workqueue), then while the layer is workqueue."""
    return _reentrant is not True


def _note_layer() -> None:
    global _reentrant
    layer = threading_layer()
    if layer is not None:
        _reentrant = layer != "workqueue"


def _in_child() -> None:
    global _forked_after_gnu_omp
    if threading_layer() == "omp":
        from numba.np.ufunc import omppool
        _forked_after_gnu_omp = _forked_after_gnu_omp or omppool.openmp_vendor == "GNU"


os.register_at_fork(after_in_child=_in_child)
choose_layer()


class ParallelKernel:
    """A `parallel=True` numba dispatcher whose launches are safe from any number of threads. Calls
    and attributes go to the dispatcher (`.py_func`, `.signatures`, ...)."""

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        functools.update_wrapper(self, dispatcher.py_func)

    def __call__(self, *args):
        if _forked_after_gnu_omp:
            raise ThreadingLayerError(
                f"{self.__name__}: this process was forked after GNU OpenMP ran in its parent, which numba "
                "cannot use again here; fork before any parallel kernel runs (e.g. a forkserver), use "
                "spawn, install tbb, or set NUMBA_THREADING_LAYER=workqueue")
        if _reentrant:
            return self.dispatcher(*args)
        with _LOCK:
            try:
                return self.dispatcher(*args)
            finally:
                _note_layer()

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)


def parallel_njit(**options):
    """`njit(parallel=True, nogil=True, **options)` wrapped in a ParallelKernel."""
    def wrap(fn):
        return ParallelKernel(njit(parallel=True, nogil=True, **options)(fn))
    return wrap
