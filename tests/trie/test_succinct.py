"""SuccinctTrie against the plain-Python RefTrie: lookup, BFS numbering, children, keys, prefixes, save/load,
bad input, and the rank/select kernels against naive counting."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from gtmkit.errors import ArtifactError, GtmkitError
from gtmkit.artifact.container import manifest_digest, manifest_path
from gtmkit import _rank_select as bits
from gtmkit.trie.trie import SuccinctTrie
from gtmkit.testing.trie import RefTrie

BIG = 2**31 - 1
# Few distinct values so keys share prefixes, spread over low labels, high labels and the extremes.
TOKENS = st.sampled_from([0, 1, 2, 3, 7, 65535, 65536, 65537, 1 << 20, BIG - 1, BIG])
KEYS = st.lists(st.lists(TOKENS, min_size=1, max_size=5), min_size=1, max_size=40)


def check_against_ref(keys, probes=()):
    trie, ref = SuccinctTrie.build(keys), RefTrie(keys)
    assert trie.num_keys == len(ref.key_list) and trie.num_nodes == len(ref.nodes)
    for k in ref.keys:
        assert trie.lookup(k) == ref.lookup(k)
    for p in probes:
        assert trie.lookup(p) == ref.lookup(p)
    assert [trie.key(i) for i in range(trie.num_keys)] == ref.key_list
    for v in range(trie.num_nodes):
        labels, kids = trie.children(v)
        assert (labels.tolist(), kids.tolist()) == ref.children(v)
        assert trie.is_terminal(v) == (ref.nodes[v] in ref.keys)
        for tok, kid in zip(labels.tolist(), kids.tolist()):
            assert trie.find_child(v, tok) == kid
    return trie, ref


@settings(max_examples=60, deadline=None)
@given(KEYS, st.lists(st.lists(TOKENS, min_size=0, max_size=6), max_size=20))
def test_matches_reference_trie(keys, probes):
    trie, ref = check_against_ref(keys, probes)
    ids = trie.lookup_many(list(ref.keys) + [p for p in probes if p])
    assert ids.tolist() == [ref.lookup(k) for k in ref.keys] + [ref.lookup(p) for p in probes if p]


@settings(max_examples=40, deadline=None)
@given(KEYS, st.lists(TOKENS, max_size=3), st.integers(0, 50))
def test_keys_with_prefix(keys, prefix, limit):
    trie, ref = SuccinctTrie.build(keys), RefTrie(keys)
    assert trie.keys_with_prefix(prefix).tolist() == ref.keys_with_prefix(prefix)
    assert trie.keys_with_prefix(prefix, limit).tolist() == ref.keys_with_prefix(prefix, limit)


def test_shapes_of_tries():
    check_against_ref([[5]])  # single key of length 1
    check_against_ref([[BIG, 0, BIG]])  # single key, top token
    check_against_ref([[1], [1, 2], [1, 2, 3], [1, 2, 3, 4], [2]], probes=[[1, 2, 3, 4, 5], [3], [1, 3]])
    check_against_ref([[i] for i in range(3000)] + [[i, j] for i in (0, 2999) for j in range(700)])
    trie = SuccinctTrie.build([[65536 * 3 + 1, 2], [65535], [BIG]])
    assert trie.arrays.high_bits == 15 and trie.key(trie.lookup([65536 * 3 + 1, 2])) == (65536 * 3 + 1, 2)
    assert SuccinctTrie.build([[1, 2], [3]]).arrays.high_bits == 0


def test_non_keys_and_duplicates():
    trie = SuccinctTrie.build([[3, 1], [3, 1], [1], [3, 1], [1, 2, 3]])
    assert trie.num_keys == 3 and len(trie) == 3
    assert trie.lookup([3]) == -1 and trie.lookup([]) == -1 and trie.lookup([1, 2]) == -1
    assert trie.lookup([-1]) == -1 and trie.lookup([2**40]) == -1 and trie.lookup(np.array([3, 1])) >= 0
    assert trie.find_child(0, -5) == -1 and trie.find_child(0, 2**33) == -1
    assert [3, 1] in trie and [3] not in trie
    with pytest.raises(GtmkitError, match="out of range"):
        trie.children(trie.num_nodes)
    with pytest.raises(GtmkitError, match="key id"):
        trie.key(3)
    with pytest.raises(GtmkitError, match="integers"):
        trie.lookup([1.5])


def test_numbering_is_bfs_with_sorted_children():
    trie = SuccinctTrie.build([[9, 1], [2, 5, 5], [2, 4], [9], [2, 5, 1]])
    # depth 1: 2, 9; depth 2: (2,4), (2,5), (9,1); depth 3: (2,5,1), (2,5,5)
    assert trie.nodes_per_depth().tolist() == [1, 2, 3, 2]
    assert trie.children(0)[0].tolist() == [2, 9] and trie.children(0)[1].tolist() == [1, 2]
    assert trie.children(1)[1].tolist() == [3, 4] and trie.children(4)[1].tolist() == [6, 7]
    assert [trie.key(i) for i in range(5)] == [(9,), (2, 4), (9, 1), (2, 5, 1), (2, 5, 5)]


def test_node_ids_match_csr_sid_trie():
    from gtmkit.indexer.trie import build_trie

    sids = np.random.default_rng(3).integers(0, 40, size=(500, 3)).astype(np.int32)
    csr = build_trie(sids, 40)
    trie = SuccinctTrie.build(sids)
    assert trie.num_nodes == csr.num_nodes
    assert np.array_equal(trie.arrays.level_offsets, csr.level_offsets)
    for v in range(len(csr.node_offsets) - 1):
        a, b = int(csr.node_offsets[v]), int(csr.node_offsets[v + 1])
        labels, kids = trie.children(v)
        assert labels.tolist() == csr.child_tokens[a:b].tolist() and kids.tolist() == list(range(a + 1, b + 1))


INPUT_KEYS = [[4, 70000], [1], [4, 70000], [2, 2, 2]]


@pytest.mark.parametrize("make", [
    lambda: INPUT_KEYS,
    lambda: tuple(tuple(k) for k in INPUT_KEYS),
    lambda: [np.array(k, np.uint32) for k in INPUT_KEYS],
    lambda: (np.array([4, 70000, 1, 4, 70000, 2, 2, 2], np.int64), np.array([0, 2, 3, 5, 8])),
    lambda: pa.array(INPUT_KEYS, pa.list_(pa.int32())),
    lambda: pa.array([[9]] + INPUT_KEYS, pa.large_list(pa.int64())).slice(1),
    lambda: pa.chunked_array([pa.array(INPUT_KEYS[:2], pa.list_(pa.int32())),
                              pa.array(INPUT_KEYS[2:], pa.list_(pa.int32()))]),
])
def test_input_forms(make):
    trie = SuccinctTrie.build(make())
    assert [trie.key(i) for i in range(trie.num_keys)] == [(1,), (4, 70000), (2, 2, 2)]


def test_two_d_array_input():
    trie = SuccinctTrie.build(np.array([[1, 2], [1, 3], [1, 2]], np.int16))
    assert trie.num_keys == 2 and trie.lookup([1, 3]) == 1


@pytest.mark.parametrize("keys, message", [
    ([[1, 2], []], "key 1 is empty"),
    ([[1, -2]], "key 0 has negative token -2 at position 1"),
    ([[0], [2**31]], "key 1 has token above 2\\^31-1 2147483648"),
    ([[1.0, 2.0]], "integers"),
    (np.array([[1.5, 2.0]]), "integers"),
    ((np.array([1.0]), np.array([0, 1])), "integers"),
    (pa.array([[1.0]], pa.list_(pa.float32())), "integers"),
    (pa.array([[1], None], pa.list_(pa.int32())), "key 1 is null"),
    (pa.array([[1, None]], pa.list_(pa.int32())), "key 0 has a null token"),
    (pa.array([1, 2]), "list array"),
    ([], "no keys"),
    ([[1], 5], "key 1 is not a sequence"),
    (["ab"], "key 0 is not a sequence"),
    ([[True, False]], "integers"),
    (42, "expected a list"),
    ({"a": 1}, "expected a list"),
    (np.array([1, 2]), "2-D"),
    ((np.array([1, 2]), np.array([0, 3])), "offsets"),
])
def test_bad_input(keys, message):
    with pytest.raises(GtmkitError, match=message):
        SuccinctTrie.build(keys)


def test_save_load_round_trip(tmp_path):
    keys = [[1, 2, 3], [1, 2], [70000, 5], [BIG], [8]]
    trie = SuccinctTrie.build(keys)
    trie.save(tmp_path / "t")
    for mmap in (True, False):
        back = SuccinctTrie.load(tmp_path / "t", mmap=mmap)
        assert back.nbytes == trie.nbytes and back.num_nodes == trie.num_nodes
        for name in trie.arrays._fields:
            assert np.array_equal(getattr(back.arrays, name), getattr(trie.arrays, name)), name
        assert [back.lookup(k) for k in keys] == [trie.lookup(k) for k in keys]
    manifest = json.loads(manifest_path(tmp_path / "t").read_text())
    assert manifest["format"] == "gtmkit-trie" and manifest["format_version"] == 3
    with pytest.raises(ArtifactError, match="already exists"):
        trie.save(tmp_path / "t")
    trie.save(tmp_path / "t", overwrite=True)


def test_load_refuses_corrupt_and_foreign(tmp_path):
    trie = SuccinctTrie.build([[1, 2, 3], [4]])
    trie.save(tmp_path / "t")
    path = manifest_path(tmp_path / "t").parent / "label_low.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="checksum"):
        SuccinctTrie.load(tmp_path / "t")
    man = manifest_path(tmp_path / "t")
    m = json.loads(man.read_text())
    m["num_nodes"] = 7
    man.write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="manifest_sha256 mismatch"):
        SuccinctTrie.load(tmp_path / "t", verify=False)
    m["manifest_sha256"] = manifest_digest(m)
    man.write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="expected"):
        SuccinctTrie.load(tmp_path / "t", verify=False)
    m["format"] = "gtmkit-index"
    man.write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="not a gtmkit-trie"):
        SuccinctTrie.load(tmp_path / "t")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 1, 1]), min_size=1, max_size=3000), st.booleans())
def test_rank_select_kernels(flags, long_run):
    if long_run:  # a node with thousands of children is a run of ones spanning many superblocks
        flags = flags[: len(flags) // 2] + [1] * 5000 + flags[len(flags) // 2:]
    f = np.array(flags, np.uint8)
    words = bits.pack_bits(f)
    rd = bits.rank_directory(words)
    ones, zeros = np.flatnonzero(f == 1), np.flatnonzero(f == 0)
    s1 = bits.select_samples(rd, len(words), len(ones), False)
    s0 = bits.select_samples(rd, len(words), len(zeros), True)
    cum = np.concatenate([[0], np.cumsum(f)])
    for p in list(range(0, len(f) + 1, 7)) + [len(f)]:
        assert _rank(words, rd, p) == cum[p]
    for k in range(0, len(ones), 5):
        assert _select(words, rd, s1, k, False) == ones[k]
    for k in range(len(zeros)):
        assert _select(words, rd, s0, k, True) == zeros[k]


def test_packed_fields():
    rng = np.random.default_rng(0)
    for width in (0, 1, 6, 15, 33):
        vals = rng.integers(0, 1 << width, size=300) if width else np.zeros(300, np.int64)
        packed = bits.pack_fields(vals, width)
        assert [_field(packed, i, width) for i in range(300)] == vals.tolist()


from numba import njit  # noqa: E402  (thin jitted wrappers so the inline kernels are callable here)


@njit
def _rank(words, rd, p):
    return bits.rank1(words, rd, p)


@njit
def _select(words, rd, samples, k, zeros):
    return bits.select0(words, rd, samples, k) if zeros else bits.select1(words, rd, samples, k)


@njit
def _field(words, i, width):
    return bits.get_field(words, i, width)
