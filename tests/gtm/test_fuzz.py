"""The fuzz suite (gtmkit.testing.fuzz): its runner turns every way a case can end into the right
outcome, and a bounded run over every kind finds no crash, hang, traceback or wrong answer."""

from __future__ import annotations

import pytest

from gtmkit.testing.fuzz import KINDS, format_text, fuzz
from gtmkit.testing.fuzz_core import FAILURES

SELF = ["ok", "crash", "abort", "late_crash", "hang", "traceback", "multiline", "refused", "wrong"]
EXPECT = {"ok": "ok-same-answer", "crash": "crash", "abort": "crash", "late_crash": "crash", "hang": "hang", "traceback": "traceback",
          "multiline": "multi-line error", "refused": "refused-one-line", "wrong": "wrong answer"}


@pytest.mark.slow  # forked children that crash, abort and hang
def test_runner_reports_each_way_a_case_ends(tmp_path):
    kinds = [f"support.fuzz_selfcheck:{k}" for k in SELF]
    s = fuzz(seed=3, kinds=kinds, only=0, timeout=5.0, jobs=2, root=tmp_path)
    assert s["cases"] == len(SELF)
    for k in SELF:
        got = [o for o, n in s["counts"][f"support.fuzz_selfcheck:{k}"].items() if n]
        assert got == [EXPECT[k]], (k, s["counts"][f"support.fuzz_selfcheck:{k}"])
    fails = {f["kind"].split(":")[1]: f for f in s["failures"]}
    assert fails["crash"]["detail"].startswith("SIGSEGV") and fails["crash"]["note"] == "reads address 0"
    assert fails["abort"]["detail"].startswith("SIGABRT")
    assert fails["late_crash"]["detail"].startswith("answered ok-same-answer, then SIGSEGV")
    assert "KeyError" in fails["traceback"]["detail"]
    assert fails["hang"]["detail"].startswith("no answer in 5 s")
    assert fails["wrong"]["reproducer"] == "python -m gtmkit.testing.fuzz --kinds support.fuzz_selfcheck:wrong --seed 3 --case 0"
    assert set(fails) == {k for k in SELF if EXPECT[k] in FAILURES}
    assert list(tmp_path.iterdir()) == []  # the run's scratch directory is gone


@pytest.mark.slow  # a fuzz run: each case in a forked child
@pytest.mark.parametrize("seed", [0])
def test_bounded_fuzz_run_has_no_failures(tmp_path, seed):
    # a fixed set of cases (4 per kind; benchmarks/fuzz.py runs thousands), so every run of a seed fuzzes the same
    # inputs; the long per-case limit covers numba compiling in a child while its cache is cold
    s = fuzz(cases=4 * len(KINDS), seed=seed, timeout=45.0, jobs=2, root=tmp_path)
    assert s["cases"] == 4 * len(KINDS)
    assert not s["failures"], format_text(s)
