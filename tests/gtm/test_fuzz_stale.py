"""The fuzz kind "stale" (gtmkit.testing.fuzz_stale): requests and batches held across rebuilds, updates and shard
rebuilds answer as the catalog served at the call says, and the kind reports a wrong answer when requests are not
encoded again for the index that serves them."""

from __future__ import annotations

import pytest

from gtmkit.index import Index
from gtmkit.testing import fuzz_stale
from gtmkit.testing.fuzz import KINDS, _case_fn
from gtmkit.testing.fuzz_core import OK_SAME, WRONG, Wrong, case_rng, classify


def _case(tmp_path, i: int):
    work = tmp_path / str(i)
    work.mkdir()
    return fuzz_stale.case(case_rng(0, "stale", i), {"work": str(work)})


def test_stale_kind_is_registered_and_its_cases_pass(tmp_path):
    # in this process: the bounded run of test_fuzz.py takes the kind through the forked runner
    assert "stale" in KINDS and _case_fn("stale") is fuzz_stale.case
    for i in range(4):
        assert _case(tmp_path, i) == OK_SAME


def test_stale_kind_reports_requests_that_do_not_follow_the_index(tmp_path, monkeypatch):
    monkeypatch.setattr(Index, "follow", lambda self, request: request)  # the bug: a stale request used as it is
    for i in range(4):
        with pytest.raises(Wrong) as exc:
            _case(tmp_path, i)
        assert classify(exc.value)[0] == WRONG
