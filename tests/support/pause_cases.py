"""The checks that a GPU matcher (CuPy's, or the fake CuPy with emulated kernels) follows pauses and swaps as the
CPU matcher does: shared by the emulated tests and the gpu-marked ones."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import gtmkit
from gtmkit.errors import RequestError
from gtmkit.inputs.schema import parse_schema
from gtmkit.matcher.beam import beam_search
from gtmkit.matcher.matcher import Matcher
from gtmkit.testing.gtm import catalog_rows, eligible

from support.catalogs import random_catalog, random_user, schema_dict, write
from support.step_cases import host, step_case, steps_agree

SIZES = [1, 4, 6]  # beams of the concurrent searches


def check_pauses(idx, table, cpu, gpu, cases=((6, 5, "normal"), (9, 40, "ties"))) -> None:
    """Rounds of pauses and resumes given to both matchers (the SIDs' ads paused whole, so that leaves and
    prefixes die; then a random share; then resumes): after each, the device's counts and flags equal the
    host's, and step (GTM and counts on and off), mask and post-filter equal the CPU's."""
    ids = np.asarray(table.column("ad_id").to_numpy(), np.int64)
    rng = np.random.default_rng(6)
    B = 3
    reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
    sid_ads = [idx.sid_ads(n) for n in range(idx.first_leaf, idx.num_nodes)]
    whole = np.concatenate([a for a in sid_ads[::2]])
    some = rng.choice(ids, 120, replace=False)
    rounds = [("pause", whole), ("pause", np.concatenate([some, some[::-3]])),  # an id listed twice counts once
              ("resume", rng.choice(ids, 80, replace=False)), ("resume", ids)]
    flags = [(True, False), (False, False), (True, True), (False, True)]  # (gtm, count) in turn
    n = 0
    for op, pick in rounds:
        assert getattr(cpu, op + "_ads")(pick) == getattr(gpu, op + "_ads")(pick)
        unknown = int(ids.max()) + 1
        for m in (cpu, gpu):  # refused whole, naming the unknown id
            with pytest.raises(RequestError, match=f"unknown ad id {unknown}"):
                getattr(m, op + "_ads")(np.append(ids[:5], unknown))
        assert gpu.num_paused == cpu.num_paused
        assert np.array_equal(gpu.paused_ads(), cpu.paused_ads())
        assert np.array_equal(host(gpu.cuda.d["node_live"]), cpu.arrays.node_live)
        assert np.array_equal(host(gpu.cuda.d["ad_active"]), cpu.arrays.ad_active)
        n = steps_agree(cpu, gpu, idx, rng, reqs, list(cases), flags, n, (op,))
        for depth in range(idx.sid_length):
            nodes, rr, _, _ = step_case(idx, rng, B, 6, depth, "normal")
            for gtm in (True, False):
                assert np.array_equal(cpu.mask(nodes, rr, reqs, gtm), host(gpu.mask(nodes, rr, reqs, gtm)))
        leaves = rng.integers(idx.first_leaf - 2, idx.num_nodes, size=(B, 12))
        for exact in (True, False):
            for (a1, r1), (a2, r2) in zip(cpu.postfilter(leaves, reqs, exact), gpu.postfilter(leaves, reqs, exact)):
                assert np.array_equal(a1, host(a2)) and np.array_equal(r1, host(r2))
    assert cpu.num_paused == 0


def check_update(idx, table, cpu, gpu, changed=(20, 20, 2)) -> None:
    """The same changes (changed: edits, new ads, ads on SIDs the trie lacks) given to both matchers, with some
    ads paused before: the GPU matcher serves the updated index as the CPU one does (step, mask, post-filter)."""
    schema = parse_schema(idx.manifest["schema"])
    rows = catalog_rows(table, schema)
    ids = np.asarray(table.column("ad_id").to_numpy(), np.int64)
    for m in (cpu, gpu):
        m.pause_ads(ids[::4])
    changes, _, left_out = changes_for(rows, schema, 5, *changed, L=idx.sid_length, V=idx.vocab_size)
    a, b = cpu.update_ads(changes), gpu.update_ads(changes)
    assert a.as_dict() == b.as_dict() and sorted(a.new_sids) == sorted(left_out) and gpu.version == a.version
    assert gpu.num_paused == cpu.num_paused == len(ids[::4])
    new = gpu.current().index
    rng = np.random.default_rng(9)
    reqs = [new.encode_request(random_user(rng)) for _ in range(3)]
    steps_agree(cpu, gpu, new, rng, reqs, [(6, 5, "normal"), (9, 40, "ties")], [(True, True), (False, False)])
    for depth in range(new.sid_length):
        nodes, rr, _, _ = step_case(new, rng, 3, 6, depth, "normal")
        assert np.array_equal(cpu.mask(nodes, rr, reqs, True), host(gpu.mask(nodes, rr, reqs, True)))
    leaves = np.tile(np.arange(new.first_leaf, new.num_nodes), (3, 1))
    for (a1, r1), (a2, r2) in zip(cpu.postfilter(leaves, reqs), gpu.postfilter(leaves, reqs)):
        assert np.array_equal(a1, host(a2)) and np.array_equal(r1, host(r2))


def check_swap(old, new, gpu) -> None:
    """gpu serves `old`; after gpu.swap(new) its next calls equal the CPU matcher of `new`, a matcher held from
    before still the old one's, each result naming its version."""
    held = gpu.current()
    gpu.swap(new)
    assert gpu.current() is not held and held.cuda is not gpu.cuda
    rng = np.random.default_rng(8)
    for m_gpu, idx in ((gpu, new), (held, old)):
        cpu = Matcher(idx, "cpu")
        reqs = [idx.encode_request(random_user(rng)) for _ in range(2)]
        nodes, rr, lp, bs = step_case(idx, rng, 2, 5, 1, "normal")
        a, b = cpu.step(nodes, lp, bs, rr, reqs, 7), m_gpu.step(nodes, lp, bs, rr, reqs, 7)
        assert b.version == idx.version == a.version
        for name, x, y in zip(a._fields[:5], a, b):
            assert np.array_equal(x, host(y)), name
        leaves = rng.integers(idx.first_leaf, idx.num_nodes, size=(2, 6))
        for (a1, r1), (a2, r2) in zip(cpu.postfilter(leaves, reqs), m_gpu.postfilter(leaves, reqs)):
            assert np.array_equal(a1, host(a2)) and np.array_equal(r1, host(r2))


def changes_for(rows, schema, seed, edits, new, off_trie, L, V, extend=None):
    """A change table for a catalog (rows: catalog_rows): `edits` of its ads with new targeting (half of them on
    another of its SIDs), `new` ads on its SIDs and `off_trie` on SIDs it lacks; extend: a function that adds the
    schema's other columns to the table. -> (table, catalog rows after the update, ids of the ads on SIDs it
    lacks)."""
    import itertools

    import pyarrow as pa
    rng = np.random.default_rng(seed)
    n = edits + new + off_trie
    changes = random_catalog(seed, n_ads=n, L=L, V=V, n_sids=n).to_pydict()
    sids = sorted({ad["sid"] for ad in rows})
    off = [s for s in itertools.product(range(V), repeat=L) if s not in set(sids)][:64]
    ids = {ad["ad_id"] for ad in rows}
    fresh = (x for x in itertools.count(10**6) if x not in ids)
    edited = rng.choice(sorted(ids), size=min(edits, len(ids)), replace=False).tolist()
    by_id = {ad["ad_id"]: ad for ad in rows}
    for i in range(n):
        if i < len(edited):
            changes["ad_id"][i] = edited[i]
            sid = sids[int(rng.integers(len(sids)))] if rng.random() < 0.5 else by_id[edited[i]]["sid"]
        else:
            changes["ad_id"][i] = next(fresh)
            pool = sids if i < edits + new or not off else off
            sid = pool[int(rng.integers(len(pool)))]
        changes["sid"][i] = list(sid)
    table = pa.table(changes, schema=random_catalog(0, n_ads=1).schema)
    if extend is not None:
        table = extend(table)
    left_out = []
    for ad in catalog_rows(table, schema):
        if ad["sid"] in set(sids):
            by_id[ad["ad_id"]] = ad
        else:
            left_out.append(ad["ad_id"])
    return table, list(by_id.values()), left_out


def versions(tmp_path, n=3):
    """n catalogs, each built into the same artifact path in turn: -> [(index, catalog rows)] (older versions stay
    readable while their Index is open)."""
    sd = schema_dict(L=3, V=6)
    out = []
    for s in range(n):
        table = random_catalog(40 + s, n_ads=120, L=3, V=6, n_sids=40)
        idx = gtmkit.build_index(write(tmp_path, table, sd, f"c{s}.parquet"), tmp_path / "idx", partition="static",
                                 k=[2, 2, 2], overwrite=True)
        out.append((idx, catalog_rows(table, parse_schema(sd))))
    return out, parse_schema(sd)


def logits(V, seed):
    table = np.log(np.random.default_rng(seed).random((3, 64, V)) + 1e-3).astype(np.float32)
    return lambda step, prev, parents: table[step, :len(prev)]


def serve_while_swapping(tmp_path, device: str, seconds: float) -> None:
    """Four threads search on one Matcher(device) while a fifth swaps between three catalogs built into one path,
    pauses a third of each one's ads and updates it (edits and new ads: version "+1"), for `seconds`: no
    exception; 200 results spread over the run checked by brute force over the catalog of the version they name
    (a search that a pause overtakes may see it from any call on: each ad it returns is then eligible, and every
    eligible ad that was never paused is returned)."""
    versions_, schema = versions(tmp_path, 3)
    by_version = {idx.version: (idx, rows) for idx, rows in versions_}
    assert len(by_version) == 3
    paused_of = {idx.version: {ad["ad_id"] for ad in rows[::3]} for idx, rows in versions_}
    updates = {}  # base version -> (change table, rows after it)
    for i, (idx, rows) in enumerate(versions_):
        table, after, _ = changes_for(rows, schema, 50 + i, 10, 10, 0, L=3, V=6)
        updates[idx.version] = table
        by_version[idx.version + "+1"] = (idx, after)
        paused_of[idx.version + "+1"] = paused_of[idx.version]
    m = Matcher(versions_[0][0], device)
    m.pause_ads(sorted(paused_of[m.version]))
    stop = time.monotonic() + seconds
    errors, results = [], []

    def search(seed):
        rng = np.random.default_rng(seed)
        try:
            while time.monotonic() < stop:
                cur = m.current()
                users = [random_user(rng) for _ in range(2)]
                reqs = [cur.index.encode_request(u) for u in users]
                res = beam_search(cur, reqs, logits(6, int(rng.integers(1 << 30))), SIZES)
                results.append((res, users))
        except Exception as exc:  # any exception fails the test below
            errors.append(repr(exc))

    def swapper():
        try:
            i = 0
            while time.monotonic() < stop:
                i += 1
                idx, _ = versions_[i % 3]
                m.swap(idx)
                m.pause_ads(sorted(paused_of[idx.version]))
                time.sleep(0.01)
                assert m.update_ads(updates[idx.version]).version == idx.version + "+1"
                time.sleep(0.01)
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=search, args=(s,)) for s in range(4)] + [threading.Thread(target=swapper)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len({r.version for r, _ in results}) >= 5 and len(results) > 20
    for res, users in results[::max(1, len(results) // 200)]:  # brute force on 200 spread over the run
        rows = by_version[res.version][1]
        idx = by_version[res.version.split("+")[0]][0]  # an update keeps the trie
        sids = {ad["sid"] for ad in rows}
        by_id = {ad["ad_id"]: ad for ad in rows}
        for b, (ads, rank) in enumerate(res.ads):
            leaves = [int(n) for n in res.leaf_nodes[b]]
            assert all(n < 0 or idx.leaf_sid(n) in sids for n in leaves)
            got = list(zip(ads.tolist(), rank.tolist()))
            assert got == sorted(got, key=lambda x: (x[1], x[0]))  # SID rank order, then ad id
            for ad_id, m in got:  # every ad returned: of that SID and eligible
                assert by_id[ad_id]["sid"] == idx.leaf_sid(leaves[m]) and eligible(by_id[ad_id], users[b], schema)
            never = [(ad["ad_id"], m) for m, n in enumerate(leaves) if n >= 0 for ad in rows
                     if ad["sid"] == idx.leaf_sid(n) and ad["ad_id"] not in paused_of[res.version]
                     and eligible(ad, users[b], schema)]
            assert set(never) <= set(got)  # and every eligible ad that was never paused
