"""Loading from several threads at once: .npy headers are read by gtmkit's own parser (artifact/npy.py), never
by np.load's, whose ast.literal_eval fails now and then when threads parse at once on Python 3.11 (CPython
gh-106905: `SystemError: AST constructor recursion depth mismatch`)."""

from __future__ import annotations

import ast
import threading

import numpy as np
import pytest

import gtmkit
from gtmkit.artifact import index_format as fmt
from gtmkit.artifact.container import open_artifact

from support.catalogs import random_catalog, schema_dict, write

THREADS, ROUNDS = 8, 60


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("threads")
    gtmkit.build_index(write(tmp, random_catalog(3, n_ads=200), schema_dict()), tmp / "idx").close()
    return tmp / "idx"


def test_loading_parses_no_header_with_ast(index_dir, tmp_path):
    """Every way gtmkit opens its artifacts (an index, mapped or read, verified or not; a trie; an update's
    private copy) works with ast unusable: no load depends on np.load's header parser."""
    trie = gtmkit.SuccinctTrie.build([[1, 2, 3], [1, 4], [5]])
    trie.save(tmp_path / "trie")
    used = []

    def refuse(*args, **kwargs):
        used.append(args[:1])
        raise RuntimeError("a .npy header was parsed with ast")
    saved = ast.literal_eval, ast.parse
    ast.literal_eval = ast.parse = refuse  # pytest's own reports use ast: restored before any assert
    try:
        got = []
        for verify in (False, True):
            with gtmkit.load_index(index_dir, verify=verify) as idx:
                got.append(idx.num_ads)
        with open_artifact(index_dir, fmt.FORMAT_NAME, fmt.SUPPORTED_VERSIONS, mmap=False) as art:
            got.append(len(art.array("sid_ad_ids")))
        with gtmkit.load_index(index_dir) as idx:
            got.append(len(idx.artifact.private_array("sid_ad_ids")))
        for mmap in (True, False):
            got.append(gtmkit.SuccinctTrie.load(tmp_path / "trie", mmap=mmap).num_keys)
    finally:
        ast.literal_eval, ast.parse = saved
    assert not used and got == [200] * 4 + [3] * 2


@pytest.mark.slow  # a stress run: 1,600 loads, 8 at once
def test_an_index_loads_from_8_threads_at_once_60_times(index_dir):
    with gtmkit.load_index(index_dir) as ref:
        want = np.array(ref.sid_ad_ids)
    start = threading.Barrier(THREADS)
    errors, loads = [], [0] * THREADS

    def worker(w: int) -> None:
        for _ in range(ROUNDS):
            try:
                start.wait(timeout=60)  # every round's loads begin together
                with gtmkit.load_index(index_dir) as idx:
                    if not np.array_equal(idx.sid_ad_ids, want):
                        errors.append("a load read other arrays")
                loads[w] += 1
            except Exception as exc:  # noqa: BLE001 (any failure is the test's finding)
                errors.append(f"{type(exc).__name__}: {exc}")
                start.abort()
                return

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[:3]
    assert loads == [ROUNDS] * THREADS
