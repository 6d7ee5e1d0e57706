"""What the held-out harness still found on the serving path, each case now one GtmkitError line or the right answer:
node ids and tokens that are not integers (strings, ints past 64 bits) in every call that takes them, searches and
steps too large for memory refused with the size they would need, a manifest member path holding a NUL byte, a
RecordBatch of changes, and beam_score + logprob overflowing float32 to +inf, which ranks first (CPU; the GPU steps
are held to the same cases in tests/cuda/test_overflow_emu.py and test_overflow_gpu.py)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

import gtmkit
from gtmkit.errors import ArtifactError, GtmkitError, RequestError
from gtmkit.artifact.container import manifest_path, verify_artifact
from gtmkit import _args as margs
from gtmkit.matcher.matcher import Matcher
from gtmkit.testing.gtm import step_reference

from support.catalogs import random_catalog, random_user, schema_dict, write
from support.indexes import _build
from support.overflow_cases import NEAR_MAX, one_overflow, overflow_case


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    idx, _, _ = _build(tmp_path_factory.mktemp("residue"), 21, "dynamic", {"target_fill": 0.3, "k_max": 4},
                       n_ads=150, L=3, V=6)
    rng = np.random.default_rng(0)
    return idx, [idx.encode_request(random_user(rng)) for _ in range(3)]


def one_line(fn, exc=GtmkitError) -> str:
    with pytest.raises(exc) as e:
        fn()
    assert str(e.value) and "\n" not in str(e.value)
    return str(e.value)


# --- ids that are not integers ------------------------------------------------------------------------------------

NOT_IDS = [[2**64], ["a"], [b"0"], [1.5], [None], 2**64, "a", [[0], [0, 1]]]


def test_step_mask_prefix_nodes_refuse_ids_that_are_not_integers(built):
    idx, reqs = built
    m = Matcher(idx)
    lp = np.zeros((1, idx.vocab_size), np.float32)
    for bad in NOT_IDS:
        assert "node_ids" in one_line(lambda: m.step(bad, lp, [0.0], [0], reqs[:1], 3))
        assert "node_ids" in one_line(lambda: m.mask(bad, [0], reqs[:1]))
        assert "row_request" in one_line(lambda: m.step([0], lp, [0.0], bad, reqs[:1], 3))
        assert "row_request" in one_line(lambda: m.mask([0], bad, reqs[:1]))
        assert "tokens" in one_line(lambda: m.prefix_nodes([bad] if isinstance(bad, (int, str)) else bad))
        assert "offsets" in one_line(lambda: m.prefix_nodes([[0, 0]], offsets=bad))
        assert "leaf_nodes" in one_line(lambda: m.postfilter([bad], reqs[:1]))
    assert "offsets" in one_line(lambda: m.prefix_nodes([[0]], offsets=-2**63 - 1), RequestError)
    # the right answers where ids are integers of any width
    sid = idx.leaf_sid(idx.first_leaf)
    assert m.prefix_nodes(np.array([sid], np.uint8)).tolist() == [idx.first_leaf]
    assert m.prefix_nodes([list(sid)], offsets=np.int64(0)).tolist() == [idx.first_leaf]


def test_index_accessors_refuse_ids_that_are_not_integers(built):
    idx, _ = built
    sid = idx.leaf_sid(idx.first_leaf)
    for bad in ("a", "12", b"1", 5, None, 1.5):
        assert "sid" in one_line(lambda: idx.find(bad), RequestError)
    for bad in (["a"], [1.5], [True], [None], [sid[0], "1"]):
        assert "token" in one_line(lambda: idx.find(bad), RequestError)
    for bad in ("a", 1.0, True, None, np.float64(1)):
        for fn in (idx.children, idx.parent, idx.depth, idx.node_partitions, idx.leaf_sid, idx.sid_ads,
                   lambda n: idx.child(n, 0)):
            one_line(lambda: fn(bad), RequestError)
        one_line(lambda: idx.child(0, bad), RequestError)
    for big in (2**64, -2**70):
        one_line(lambda: idx.children(big))
        one_line(lambda: idx.leaf_sid(big))
    # integers of any width and past the vocabulary: the node, or -1
    assert idx.find(sid) == idx.find(list(sid)) == idx.find(np.array(sid, np.uint8)) == idx.first_leaf
    assert idx.find([2**64]) == idx.find([-1]) == idx.find(sid + (0,)) == -1
    assert idx.child(np.int32(0), np.uint64(sid[0])) == idx.find(sid[:1]) and idx.child(0, 2**70) == -1


# --- sizes that cannot fit ----------------------------------------------------------------------------------------


def test_beam_search_too_large_for_memory_is_refused_with_its_size(built, monkeypatch):
    """Ten million rows a request (and a billion): refused before the decoder runs, naming the sizes and the GiB the
    search would need; a search that fits runs as before."""
    idx, reqs = built
    m = Matcher(idx)
    calls = []

    def logits(step, prev, parents):
        calls.append(step)
        return np.zeros((len(prev), idx.vocab_size), np.float32)

    monkeypatch.setattr(margs, "available_bytes", lambda: 1 << 30)
    for sizes in [(1, 10_000_000, 10_000_000), (1, 2, 10**9), (10**7,) * 3]:
        msg = one_line(lambda: gtmkit.beam_search(m, reqs, logits, sizes))
        assert "beam_sizes" in msg and "GiB" in msg and "1.0 GiB available" in msg
        need = float(msg.split("would need ")[1].split(" GiB")[0])
        assert need > 1.0
    assert calls == []
    res = gtmkit.beam_search(m, reqs, logits, (1, 4, 4))
    assert res.sids.shape == (len(reqs), 4, idx.sid_length) and calls == [0, 1, 2]


def test_step_too_large_for_memory_is_refused_with_its_size(built, monkeypatch):
    """A k, or a count of every candidate over many rows, whose outputs and selection scratch cannot fit: one line
    with the size; the kernel (whose failed allocation would be a SystemError) never runs."""
    idx, reqs = built
    m = Matcher(idx)
    monkeypatch.setattr(margs, "available_bytes", lambda: 1 << 29)
    lp = np.zeros((1, idx.vocab_size), np.float32)
    msg = one_line(lambda: m.step([0], lp, [0.0], [0], reqs[:1], 10**8))
    assert "k=100000000" in msg and "GiB" in msg
    R = (1 << 30) // (32 * int(max(idx.max_degree)))  # rows of one request, every candidate counted: 32 bytes each
    nodes = np.zeros(R, np.int64)
    lp = np.broadcast_to(np.float32(0), (R, idx.vocab_size))
    msg = one_line(lambda: m.step(nodes, lp, np.zeros(R, np.float32), np.zeros(R, np.int64), reqs[:1], 4,
                                  count_candidates=True))
    assert f"{R} rows" in msg and "GiB" in msg
    st_ = m.step([0], np.zeros((1, idx.vocab_size), np.float32), [0.0], [0], reqs[:1], 4)
    assert (st_.parent_rows[0] >= -1).all()


def test_arrays_that_cannot_be_made_are_one_line(built):
    """An input whose host array cannot be allocated (numpy's MemoryError) is one line, not numpy's traceback."""
    idx, reqs = built
    m = Matcher(idx)

    class Huge:
        def __array__(self, dtype=None, copy=None):
            raise MemoryError("Unable to allocate 80.0 GiB")

    lp = np.zeros((1, idx.vocab_size), np.float32)
    assert "node_ids" in one_line(lambda: m.step(Huge(), lp, [0.0], [0], reqs[:1], 3))
    assert "logprobs" in one_line(lambda: m.step([0], Huge(), [0.0], [0], reqs[:1], 3))
    assert "tokens" in one_line(lambda: m.prefix_nodes(Huge()))


# --- a manifest member path holding a NUL byte --------------------------------------------------------------------


def test_manifest_member_path_with_nul_is_one_artifact_error(tmp_path):
    idx, _, _ = _build(tmp_path, 23, "static", {"k": [2, 3, 2]}, n_ads=40, L=3, V=5)
    path = idx.path
    mp = manifest_path(path)
    man = json.loads(mp.read_text())
    name = sorted(man["files"])[0]
    for bad in (man["files"][name]["file"] + "\0", "\0", "a\0/../x.npy"):
        man["files"][name]["file"] = bad
        mp.write_text(json.dumps(man))
        msg = one_line(lambda: gtmkit.load_index(path), ArtifactError)
        assert f"invalid entry for file {name!r}" in msg
        problems = verify_artifact(path, "gtmkit-index", [int(man["format_version"])])
        assert any(f"invalid entry for file {name!r}" in p for p in problems)
        assert all("\n" not in p for p in problems)


# --- a RecordBatch of changes -------------------------------------------------------------------------------------


def test_update_ads_takes_a_record_batch_as_its_table(tmp_path):
    """update_ads(RecordBatch) applies what update_ads(Table) does: same report, same served answers."""
    table = random_catalog(24, n_ads=60, L=3, V=5, n_sids=20)
    sd = schema_dict(L=3, V=5)
    path = write(tmp_path, table, sd)
    a = Matcher(gtmkit.build_index(path, tmp_path / "a"))
    b = Matcher(gtmkit.build_index(path, tmp_path / "b"))
    changes = table.slice(0, 5).to_pydict()
    changes["ad_id"] = [10**6 + i for i in range(5)]
    changes = pa.table(changes, schema=table.schema)
    batch = changes.to_batches()[0]
    assert isinstance(batch, pa.RecordBatch)
    ra, rb = a.update_ads(changes), b.update_ads(batch)
    assert ra.as_dict() | {"version": ""} == rb.as_dict() | {"version": ""} and ra.added == 5
    assert a.version.endswith("+1") and b.version.endswith("+1")
    rng = np.random.default_rng(3)
    leaves = np.arange(a.index.first_leaf, a.index.num_nodes)[None, :]
    for _ in range(4):
        user = random_user(rng)
        got_a = a.postfilter(leaves, [a.encode_request(user)])[0][0].tolist()
        got_b = b.postfilter(leaves, [b.encode_request(user)])[0][0].tolist()
        assert got_a == got_b
    assert b.index.num_ads == a.index.num_ads == table.num_rows + 5


# --- beam_score + logprob overflowing float32 ---------------------------------------------------------------------


def test_overflow_to_inf_ranks_first(built):
    """1e38 + 3e38 overflows float32 to +inf: that candidate comes first, with either selection and GTM on or off,
    above finite candidates scoring up to 3e38; the reference agrees."""
    idx, reqs = built
    nodes, rr, lp, bs, row, token = one_overflow(idx, np.random.default_rng(1), 1)
    req = [idx.encode_request({})]  # eligible for every untargeted ad
    for selection in ("band", "buckets"):
        m = Matcher(idx, cpu_selection=selection)
        for gtm in (False, True):
            st_ = m.step(nodes, lp, bs, rr, req, 3, gtm=gtm)
            par, tok, _, sc, _ = step_reference(idx, nodes, lp, bs, rr, req, 3, gtm)[0]
            assert st_.parent_rows[0].tolist() == par + [-1] * (3 - len(par))
            assert st_.tokens[0].tolist() == tok + [-1] * (3 - len(tok))
            assert np.array_equal(st_.scores[0], np.array(sc + [-np.inf] * (3 - len(sc)), np.float32))
            if not gtm or idx.node_passes(idx.child(int(nodes[row]), token), req[0]):
                assert (st_.parent_rows[0, 0], st_.tokens[0, 0], st_.scores[0, 0]) == (row, token, np.inf)
                assert np.isfinite(st_.scores[0, 1:]).all()  # every other candidate is finite


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2), st.integers(1, 40), st.integers(1, 30),
       st.sampled_from(["buckets", "band"]), st.booleans())
def test_scores_near_float32_max_equal_reference(built, seed, depth, per_req, k, selection, gtm):
    """Beam scores and log-probs near +-float32 max (sums finite above the best beam score, +inf, -inf): the CPU
    step equals the brute-force reference (NaN as -inf, +inf first, ties by row then token)."""
    idx, reqs = built
    rng = np.random.default_rng(seed)
    m = Matcher(idx, cpu_selection=selection)
    nodes, rr, lp, bs = overflow_case(idx, rng, len(reqs), per_req, depth)
    st_ = m.step(nodes, lp, bs, rr, reqs, k, gtm=gtm)
    for b, (par, tok, kid, sc, n) in enumerate(step_reference(idx, nodes, lp, bs, rr, reqs, k, gtm)):
        assert st_.parent_rows[b].tolist() == par + [-1] * (k - len(par))
        assert st_.tokens[b].tolist() == tok + [-1] * (k - len(tok))
        assert st_.nodes[b].tolist() == kid + [-1] * (k - len(kid))
        assert np.array_equal(st_.scores[b], np.array(sc + [-np.inf] * (k - len(sc)), np.float32))


def test_beam_search_keeps_overflowed_beams_first(built):
    """A decoder whose log-probs push sums past float32 max: the SIDs whose scores overflow to +inf are kept and
    ranked first at every step, and every beam a request can hold is filled (none dropped)."""
    idx, reqs = built
    big = np.float32(2e38)

    def logits(step, prev, parents):
        lp = np.full((len(prev), idx.vocab_size), -1.0, np.float32)
        lp[:, :2] = big  # tokens 0 and 1: 2e38, 4e38 = +inf after two of them
        return lp

    req = [idx.encode_request({})]
    for selection in ("band", "buckets"):
        m = Matcher(idx, cpu_selection=selection)
        res = gtmkit.beam_search(m, req, logits, (1, 8, 8), gtm=False, postfilter=False)
        sids, scores = res.sids[0], res.scores[0]
        live = res.leaf_nodes[0] >= 0
        assert live.sum() == min(8, idx.num_nodes - idx.first_leaf)
        n_big = (sids[live] <= 1).sum(axis=1)
        want = np.where(n_big >= 2, np.inf, np.where(n_big == 1, big, -3.0)).astype(np.float32)  # (2e38 - 2 is 2e38)
        assert np.array_equal(scores[live], want)
        assert (scores[live][:-1] >= scores[live][1:]).all()  # best first, the +inf ones on top
        if (n_big >= 2).any():
            assert scores[0] == np.inf


@pytest.mark.parametrize("path", ["idx\0x", b"idx\0x", 5, None])
def test_an_artifact_path_the_file_system_cannot_take_is_one_line(path):
    for load in (gtmkit.load_index, gtmkit.SuccinctTrie.load):
        with pytest.raises(ArtifactError, match="artifact path"):
            load(path)
