"""What a fuzz case returns and how a case's exception becomes an outcome (run inside the case's child).

A case function takes (rng, ctx) and returns an outcome name; it raises Wrong for a wrong answer.
Any GtmkitError it lets through is a refusal (one line) or a "multi-line error"; anything else is a
"traceback"."""

from __future__ import annotations

import os
import traceback

import numpy as np

from ..errors import ArtifactError, GtmkitError

OK_SAME = "ok-same-answer"
OK_CHANGED = "ok-changed-artifact"  # a well-formed artifact of different content, answered without fault
REFUSED = "refused-one-line"
CRASH, HANG, TRACEBACK, MULTILINE, WRONG = "crash", "hang", "traceback", "multi-line error", "wrong answer"
GOOD = (OK_SAME, OK_CHANGED, REFUSED)
FAILURES = (CRASH, HANG, TRACEBACK, MULTILINE, WRONG)
OUTCOMES = GOOD + FAILURES
PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Wrong(Exception):
    """The case got an answer that breaks its property; the message says what differed."""


def case_rng(seed: int, kind: str, index: int) -> np.random.Generator:
    """The one source of randomness of a case: a function of (seed, kind, case index) only."""
    return np.random.default_rng([int(seed), sum(kind.encode()) * 1000 + len(kind), int(index)])


def product_frame(tb) -> str:
    """'<file>:<function>' of the innermost frame inside gtmkit but outside gtmkit/testing; where the
    exception came from the fuzz cases' own code, that frame, marked "(fuzz harness)"."""
    where, harness = None, "?"
    for fr in traceback.extract_tb(tb):
        f = os.path.abspath(fr.filename)
        rel = f"{os.path.relpath(f, os.path.dirname(PKG))}:{fr.name}"
        if f.startswith(PKG) and os.sep + "testing" + os.sep not in f[len(PKG):]:
            where = rel
        else:
            harness = f"{rel} (fuzz harness)" if f.startswith(PKG) else harness
    return where or harness


def classify(exc: BaseException, lazy_artifact_ok: bool = True) -> tuple:
    """(outcome, detail) of an exception that escaped a case."""
    if isinstance(exc, Wrong):
        return WRONG, str(exc)
    text = str(exc)
    if isinstance(exc, GtmkitError):
        if "\n" in text.strip() or not text.strip():
            return MULTILINE, f"{type(exc).__name__}: {text.strip()[:300]!r}"
        return REFUSED, f"{type(exc).__name__}: {text[:300]}"
    first = text.strip().splitlines()[0][:200] if text.strip() else ""
    return TRACEBACK, f"{type(exc).__name__}: {first} at {product_frame(exc.__traceback__)}"


def after_load(exc: BaseException) -> tuple:
    """An accepted artifact that later raises: an ArtifactError is a (lazy) refusal, any other
    GtmkitError means the accepted artifact cannot serve a workload the untouched one served."""
    outcome, detail = classify(exc)
    if outcome == REFUSED and not isinstance(exc, ArtifactError):
        return WRONG, f"accepted, then {detail}"
    return outcome, detail


def same(name: str, got, want) -> None:
    """Raise Wrong unless two answers (nested lists/tuples/dicts of arrays and scalars) are equal."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            raise Wrong(f"{name}: keys differ")
        for k in want:
            same(f"{name}.{k}", got[k], want[k])
        return
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            raise Wrong(f"{name}: {len(got) if hasattr(got, '__len__') else got!r} items, want {len(want)}")
        for i, (g, w) in enumerate(zip(got, want)):
            same(f"{name}[{i}]", g, w)
        return
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape or not np.array_equal(g, w, equal_nan=g.dtype.kind == "f" and w.dtype.kind == "f"):
        raise Wrong(f"{name}: got {_short(g)}, want {_short(w)}")


def _short(a: np.ndarray) -> str:
    return np.array2string(a.reshape(-1)[:12], threshold=12, max_line_width=200) + f" shape {list(a.shape)}"
