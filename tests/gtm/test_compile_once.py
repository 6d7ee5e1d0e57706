"""The CPU kernels see one argument type however an index's arrays were made (a map of the artifact, an in-memory
build, an update's copies and copy-on-write maps, the paused-ad state): read-only is part of a numba array type,
so a mix would compile the step kernel (tens of seconds) once per mix. Also the update's lookup helpers against
the numpy calls they stand for."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import gtmkit
from gtmkit.inputs.schema import parse_schema
from gtmkit.indexer.update.apply import _unique_rows, find_ids
from gtmkit.matcher.cpu import step as step_cpu
from gtmkit.matcher.matcher import Matcher
from gtmkit.testing.gtm import catalog_rows

from support.catalogs import random_catalog, random_user, schema_dict, write
from support.pause_cases import changes_for


def _search(m) -> None:
    idx = m.current().index
    reqs = [idx.encode_request(random_user(np.random.default_rng(1)))]
    q = m.batch(reqs)
    rng = np.random.default_rng(2)
    nodes = np.zeros(1, np.int64)
    for _ in range(idx.sid_length):
        lp = rng.standard_normal((len(nodes), idx.vocab_size)).astype(np.float32)
        s = m.step(nodes, lp, np.zeros(len(nodes), np.float32), np.zeros(len(nodes), np.int64), q, 4)
        nodes = s.nodes[0][s.nodes[0] >= 0].astype(np.int64)
    m.postfilter(nodes[None], reqs)


def test_one_trie_type_for_every_way_an_index_is_made(tmp_path):
    table = random_catalog(31, n_ads=80, L=3, V=5, n_sids=30)
    sd = schema_dict(L=3, V=5)
    schema = parse_schema(sd)
    built = gtmkit.build_index(write(tmp_path, table, sd), tmp_path / "idx", partition="static", k=[1, 2, 2])
    loaded = gtmkit.load_index(tmp_path / "idx")
    updated = Matcher(loaded)
    changes, _, _ = changes_for(catalog_rows(table, schema), schema, 3, 5, 5, 0, L=3, V=5)
    updated.update_ads(changes)
    paused = Matcher(built)
    paused.pause_ads(table.column("ad_id").to_numpy()[:3])
    for m in (Matcher(built), Matcher(loaded), updated, paused):
        _search(m)
    for kernel in (step_cpu.step_kernel, step_cpu.postfilter_kernel):
        trie_types = {sig[0] for sig in kernel.signatures}
        assert len(trie_types) == 1, trie_types


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(1, 3), st.integers(1, 4), st.integers(0, 2**31))
def test_unique_rows_equals_numpy(n, width, values, seed):
    rows = np.random.default_rng(seed).integers(0, values, (n, width)).astype(np.uint64)
    uniq, inv = _unique_rows(rows)
    want, want_inv = np.unique(rows, axis=0, return_inverse=True)
    assert np.array_equal(uniq, want) and np.array_equal(inv, want_inv.reshape(-1))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-50, 50), max_size=30), st.lists(st.integers(-60, 60), max_size=30))
def test_find_equals_searchsorted(sorted_ids, ids):
    a = np.sort(np.array(sorted_ids, np.int64))
    q = np.array(ids, np.int64)
    assert np.array_equal(find_ids(a, q)[0], np.searchsorted(a, q))
