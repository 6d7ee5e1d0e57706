"""Artifacts as a trust boundary: load_index / SuccinctTrie.load refuse every edit that could crash a kernel,
make it read out of range or change answers silently, with one line naming the file or field. Array edits
come with recomputed checksums and manifest digest, so only the invariant checks can catch them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gtmkit
from gtmkit.errors import ArtifactError
from gtmkit.artifact.container import manifest_path, manifest_digest
from gtmkit.trie.trie import SuccinctTrie
from gtmkit.indexer.verify import verify_index

from support.catalogs import random_catalog, schema_dict, write

DATA = Path(__file__).resolve().parents[1] / "data"
LAYOUTS = {"fixed": {"mode": "static", "k": [2, 2, 3]}, "jagged": {"mode": "dynamic", "target_fill": 0.5, "k_max": 4}}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One small index per partition layout, both with a Bloom attribute."""
    root = tmp_path_factory.mktemp("trust")
    out = {}
    for kind, part in LAYOUTS.items():
        cat = write(root, random_catalog(3, n_ads=80), schema_dict(partition=part), f"{kind}.parquet")
        out[kind] = gtmkit.build_index(cat, root / kind).path
        assert out[kind].name == kind
    return out


def _manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def _save_manifest(d: Path, m: dict, digest: bool = True) -> None:
    if digest:
        m["manifest_sha256"] = manifest_digest(m)
    (d / "manifest.json").write_text(json.dumps(m))


def _restamp(d: Path, m: dict, name: str) -> None:
    """Record a rewritten member file's size, shape and sha256 as a writer would."""
    e = m["files"][name]
    f = d / e["file"]
    e["bytes"], e["sha256"] = f.stat().st_size, hashlib.sha256(f.read_bytes()).hexdigest()
    if e["kind"] == "array":
        arr = np.load(f, mmap_mode="r")
        e["dtype"], e["shape"] = arr.dtype.str, list(arr.shape)
    else:
        e["rows"] = pq.read_metadata(f).num_rows


def edit_array(d: Path, name: str, fn) -> None:
    arr = np.load(d / f"{name}.npy")
    np.save(d / f"{name}.npy", fn(arr.copy()))
    m = _manifest(d)
    _restamp(d, m, name)
    _save_manifest(d, m)


def copy(src: Path, tmp_path: Path) -> Path:
    """A copy of a built artifact; returns the directory of the version it serves (a flat artifact)."""
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return manifest_path(dst).parent


def refused(d: Path, name: str, trie: bool = False) -> str:
    """Both the loader and `verify` refuse d with one line naming `name`."""
    with pytest.raises(ArtifactError) as info:
        SuccinctTrie.load(d) if trie else gtmkit.load_index(d)
    msg = str(info.value)
    assert "\n" not in msg and name in msg, msg
    if not trie:
        problems = verify_index(d)
        assert problems and all("\n" not in p for p in problems)
        assert any(name in p for p in problems), problems
    return msg


# --- array edits, checksums recomputed ----------------------------------------------------------

def _node_with(no, at_least: int) -> int:
    return int(np.flatnonzero(np.diff(no) >= at_least)[0])


def _swap_children(a, d):
    no = np.load(d / "node_offsets.npy")
    j = int(no[_node_with(no, 2)])
    a[j], a[j + 1] = a[j + 1], a[j]
    return a


def _swap_sid_ads(a, d):
    so = np.load(d / "sid_ad_offsets.npy")
    j = int(so[_node_with(so, 2)])
    a[j], a[j + 1] = a[j + 1], a[j]
    return a


def _first_slot_padding(a, d):
    a[1] = -1  # the first depth-1 node's first slot (fixed layout: the root owns slot 0)
    return a


def _padding_bloom_id(a, d):
    pad = np.flatnonzero(np.load(d / "part_bitmask_ids.npy") < 0)
    a[pad[0], 0] = 0
    return a


def _set(i, v):
    def fn(a, d):
        a[i] = v
        return a
    return fn


def _plus(i, v):
    def fn(a, d):
        a[i] += v
        return a
    return fn


def _dtype(t):
    return lambda a, d: a.astype(t)


ARRAY_EDITS = [  # (layouts, array, edit, name the message must hold)
    ("both", "child_tokens", _set(3, 65535), "child_tokens"),
    ("both", "child_tokens", _set(0, 6), "child_tokens"),
    ("both", "child_tokens", _swap_children, "child_tokens"),
    ("both", "node_offsets", _plus(2, 50), "node_offsets"),
    ("both", "node_offsets", _set(-1, 10**6), "node_offsets"),
    ("both", "level_offsets", _plus(2, 1), "level_offsets"),
    ("both", "level_offsets", _dtype(np.int32), "level_offsets"),
    ("both", "max_degree", _plus(1, 1), "max_degree"),
    ("both", "max_degree", _set(0, 0), "max_degree"),
    ("both", "part_bitmask_ids", _set(5, 10**8), "part_bitmask_ids"),
    ("both", "part_bitmask_ids", _set(5, -2), "part_bitmask_ids"),
    ("fixed", "part_bitmask_ids", _first_slot_padding, "part_bitmask_ids"),
    ("jagged", "part_bitmask_ids", _set(5, -1), "part_bitmask_ids"),
    ("both", "part_bloom_ids", _set((4, 0), 10**6), "part_bloom_ids"),
    ("fixed", "part_bloom_ids", _padding_bloom_id, "part_bloom_ids"),
    ("jagged", "part_offsets", _plus(3, 40), "part_offsets"),
    ("jagged", "part_offsets", _set(-1, 10**6), "part_offsets"),
    ("both", "bitmask_table", lambda a, d: np.hstack([a, a]), "bitmask_table"),
    ("both", "bloom_table_b0", lambda a, d: a[:0], "bloom_table_b0"),
    ("both", "sid_ad_offsets", _plus(3, 30), "sid_ad_offsets"),
    ("both", "sid_ad_ids", _swap_sid_ads, "sid_ad_ids"),
    ("both", "ad_ids_sorted", lambda a, d: a[::-1].copy(), "ad_ids_sorted"),
    ("both", "ad_rows_by_id", _set(0, 10**6), "ad_rows_by_id"),
    ("both", "ad_rows_by_id", lambda a, d: np.roll(a, 1), "ad_rows_by_id"),
    ("both", "ad_bitmask_ids", _set(7, 10**8), "ad_bitmask_ids"),
    ("both", "ad_bitmask_ids", _set(7, -1), "ad_bitmask_ids"),
    ("both", "ad_allow_offsets_b0", _plus(5, 100), "ad_allow_offsets_b0"),
    ("both", "ad_allow_codes_b0", _set(0, 10**6), "ad_allow_codes_b0"),
    ("both", "ad_exclude_codes_b0", _set(0, -5), "ad_exclude_codes_b0"),
    ("both", "ad_exclude_offsets_b0", _set(-1, 0), "ad_exclude_offsets_b0"),
]


def per_layout(edits):
    """(kind, *rest) for every layout an edit concerns."""
    return [pytest.param(kind, *rest, id=f"{kind}-{i}-{rest[-1]}") for i, (layouts, *rest) in enumerate(edits)
            for kind in LAYOUTS if layouts in ("both", kind)]


@pytest.mark.parametrize("kind,name,edit,where", per_layout(ARRAY_EDITS))
def test_array_edit_refused(built, tmp_path, kind, name, edit, where):
    d = copy(built[kind], tmp_path)
    edit_array(d, name, lambda a: edit(a, d))
    refused(d, where)


def test_removed_array_refused(built, tmp_path):
    d = copy(built["jagged"], tmp_path)
    m = _manifest(d)
    del m["files"]["part_offsets"]
    _save_manifest(d, m)
    refused(d, "part_offsets")


@pytest.mark.parametrize("kind", LAYOUTS)
def test_dictionary_edit_refused(built, tmp_path, kind):
    d = copy(built[kind], tmp_path)
    values = pq.read_table(d / "bloom_dict_b0.parquet").column("value").to_pylist()
    pq.write_table(pa.table({"value": pa.array([values[0]] + values[:-1], pa.string())}), d / "bloom_dict_b0.parquet")
    m = _manifest(d)
    _restamp(d, m, "bloom_dict_b0")
    _save_manifest(d, m)
    refused(d, "bloom_dict_b0")


# --- manifest edits --------------------------------------------------------------------------------

def _reorder_domain(m):
    dom = m["bitmask_layout"]["attributes"][0]["domain"]
    dom[0], dom[1] = dom[1], dom[0]


def _drop(*keys):
    def fn(m):
        for k in keys[:-1]:
            m = m[k]
        del m[keys[-1]]
    return fn


def _put(value, *keys):
    def fn(m):
        for k in keys[:-1]:
            m = m[k]
        m[keys[-1]] = value
    return fn


def _plus_m(v, *keys):
    def fn(m):
        for k in keys[:-1]:
            m = m[k]
        m[keys[-1]] += v
    return fn


MANIFEST_EDITS = [  # (layouts, edit, text the message must hold)
    ("fixed", _put(5, "partition_layout", "level_width", 2), "partition_layout"),
    ("fixed", _plus_m(1, "partition_layout", "level_base", 1), "level_base"),
    ("fixed", _put(10**9, "partition_layout", "level_base", 4), "level_base"),
    ("jagged", _put("fixed", "partition_layout", "kind"), "partition_layout"),
    ("both", _put(100, "counts", "vocab"), "vocab"),
    ("both", _put(3, "counts", "vocab"), "vocab"),
    ("both", _plus_m(1, "counts", "sids"), "counts"),
    ("both", _put(8, "bloom", 0, "seed"), "bloom"),
    ("both", _put(0, "bloom", 0, "hashes"), "bloom[0].hashes"),
    ("both", _put(96, "bloom", 0, "bits"), "bloom[0].bits"),
    ("both", _reorder_domain, "domain"),
    ("both", _put(2, "bitmask_layout", "words"), "bitmask_layout.words"),
    ("both", _drop("counts"), "'counts'"),
    ("both", _drop("counts", "vocab"), "counts.vocab"),
    ("both", _drop("bloom"), "'bloom'"),
    ("both", _put("x", "counts", "ads"), "counts.ads"),
    ("both", _put(None, "schema"), "schema"),
]


@pytest.mark.parametrize("kind,edit,where", per_layout(MANIFEST_EDITS))
def test_manifest_edit_refused(built, tmp_path, kind, edit, where):
    d = copy(built[kind], tmp_path)
    m = _manifest(d)
    edit(m)
    _save_manifest(d, m, digest=False)
    refused(d, "manifest_sha256")  # any edit breaks the digest
    _save_manifest(d, m, digest=True)
    refused(d, where)  # and the cross-checks catch it even with a recomputed digest


@pytest.mark.parametrize("kind", LAYOUTS)
def test_digest_cannot_be_removed(built, tmp_path, kind):
    d = copy(built[kind], tmp_path)
    m = _manifest(d)
    del m["manifest_sha256"]
    m["bloom"][0]["seed"] = m["schema"]["bloom"]["location"]["seed"] = 8  # undetectable but by the digest
    _save_manifest(d, m, digest=False)
    with pytest.raises(ArtifactError, match="no manifest_sha256"):
        gtmkit.load_index(d, verify=False)


def test_symlinked_members_refused(built, tmp_path):
    d = copy(built["fixed"], tmp_path)
    f = d / "child_tokens.npy"
    os.replace(f, tmp_path / "elsewhere.npy")
    f.symlink_to(tmp_path / "elsewhere.npy")
    for verify in (True, False):
        with pytest.raises(ArtifactError, match="child_tokens.npy: is a symbolic link"):
            gtmkit.load_index(d, verify=verify)
    f.unlink()
    (d / "inner").mkdir()
    f.symlink_to(d / "inner")
    with pytest.raises(ArtifactError, match="child_tokens.npy: is a symbolic link"):
        gtmkit.load_index(d)
    d2 = copy(built["fixed"], tmp_path / "m")
    os.replace(d2 / "manifest.json", tmp_path / "manifest.json")
    (d2 / "manifest.json").symlink_to(tmp_path / "manifest.json")
    with pytest.raises(ArtifactError, match="manifest.json: is a symbolic link"):
        gtmkit.load_index(d2)


def test_verify_false_still_cross_checks(built, tmp_path):
    d = copy(built["fixed"], tmp_path)
    m = _manifest(d)
    m["partition_layout"]["level_base"][2] += 1
    m["schema"]["partition"]["k"] = m["partition_layout"]["level_width"][1:]
    _save_manifest(d, m)
    with pytest.raises(ArtifactError, match="level_base"):
        gtmkit.load_index(d, verify=False)


def _paths(obj, prefix=()):
    """Every (key path) of a JSON tree, containers included."""
    yield prefix
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield from _paths(v, prefix + (k,))


def _edited_copy(src: Path, d: Path, within: tuple, pick: int, value, delete: bool, skip=()) -> Path:
    """A copy of the artifact src at d whose manifest has one value below the key path `within` (the pick-th,
    top-level keys in skip left out) set to value, or deleted; its digest recomputed. -> the version's directory."""
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    d = manifest_path(d).parent
    m = _manifest(d)
    top = m
    for k in within:
        top = top[k]
    paths = [p for p in _paths(top) if p and p[0] not in skip]
    *parent, key = paths[pick % len(paths)]
    node = top
    for k in parent:
        node = node[k]
    if delete:
        del node[key]
    else:
        node[key] = value
    _save_manifest(d, m)
    return d


JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64), st.floats(allow_nan=False, allow_infinity=False),
                        st.text(max_size=4), st.lists(st.integers(-3, 3), max_size=3), st.just({}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(LAYOUTS)), pick=st.integers(0, 10**6), value=JSON_VALUES, delete=st.booleans())
def test_random_manifest_edits_give_one_line(built, tmp_path, kind, pick, value, delete):
    """Any value anywhere in the manifest (digest recomputed): refused with one line, or served; never
    another exception, from the loader or from `verify`."""
    d = _edited_copy(built[kind], tmp_path / f"r{pick}_{kind}", (), pick, value, delete,
                     skip=("manifest_sha256", "stats", "created", "source"))
    try:
        gtmkit.load_index(d)
    except ArtifactError as e:
        assert "\n" not in str(e)
        assert verify_index(d)
    assert all("\n" not in p for p in verify_index(d))


def test_verify_command_lists_problems(built, tmp_path):
    from click.testing import CliRunner
    from gtmkit.cli import cli

    d = copy(built["fixed"], tmp_path)
    edit_array(d, "child_tokens", lambda a: _set(0, 6)(a, d))
    edit_array(d, "ad_bitmask_ids", lambda a: _set(0, 10**8)(a, d))
    r = CliRunner().invoke(cli, ["verify", str(d), "-s"], catch_exceptions=False)
    fails = [line for line in r.output.splitlines() if line.startswith("FAIL")]
    assert r.exit_code == 1 and len(fails) == 2, r.output
    assert "child_tokens.npy" in fails[0] and "ad_bitmask_ids.npy" in fails[1]
    r = CliRunner().invoke(cli, ["verify", str(d), "--json"], catch_exceptions=False)
    out = json.loads(r.output)
    assert r.exit_code == 1 and not out["ok"] and len(out["problems"]) == 2
    m = _manifest(d)
    m["partition_layout"]["level_width"][2] = 5
    _save_manifest(d, m, digest=False)
    r = CliRunner().invoke(cli, ["verify", str(d), "-s"], catch_exceptions=False)
    assert r.exit_code == 1 and r.output.count("FAIL") == 1 and "manifest_sha256" in r.output


# --- the golden version-1 index (no digest): every field that can be is cross-checked ------------

def test_golden_v1_loads_and_edits_are_cross_checked(tmp_path):
    idx = gtmkit.load_index(DATA / "index_v1")
    assert idx.manifest["format_version"] == 1 and "manifest_sha256" not in idx.manifest
    for edit, where in [(_put(5, "partition_layout", "level_width", 2), "partition_layout"),
                        (_put(8, "bloom", 0, "seed"), "bloom"), (_reorder_domain, "domain"),
                        (_put(100, "counts", "vocab"), "vocab"), (_drop("counts"), "'counts'")]:
        d = tmp_path / "v1"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(DATA / "index_v1", d)
        m = _manifest(d)
        edit(m)
        _save_manifest(d, m, digest=False)
        refused(d, where)


# --- no false refusals -------------------------------------------------------------------------------

@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n_ads=st.integers(1, 60), L=st.integers(1, 4), V=st.sampled_from([2, 6, 70000]),
       part=st.sampled_from([None, "static", "dynamic"]))
def test_random_builds_accepted(tmp_path, seed, n_ads, L, V, part):
    spec = {None: None, "static": {"mode": "static", "k": [2] * L},
            "dynamic": {"mode": "dynamic", "target_fill": 0.4, "k_max": 3}}[part]
    d = tmp_path / f"b{seed}_{n_ads}_{L}_{V}_{part}"
    d.mkdir()
    cat = write(d, random_catalog(seed, n_ads=n_ads, L=L, V=V), schema_dict(L=L, V=V, partition=spec))
    gtmkit.build_index(cat, d / "idx")
    assert gtmkit.load_index(d / "idx").num_ads == n_ads
    assert verify_index(d / "idx") == []


# --- the succinct trie --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trie_dir(tmp_path_factory):
    rng = np.random.default_rng(5)
    keys = [list(map(int, rng.integers(0, 1 << 20, size=rng.integers(1, 5)))) for _ in range(1500)]
    keys += [[int(t)] for t in range(3000)]  # a root with thousands of children spans superblocks
    d = tmp_path_factory.mktemp("trie") / "t"
    SuccinctTrie.build(keys).save(d)
    return d


def _flip_bit(word, bit):
    def fn(a, d):
        a[word] ^= np.uint64(1) << np.uint64(bit)
        return a
    return fn


def _swap_labels(a, d):
    a[0], a[1] = a[1], a[0]  # the root's first two children
    return a


def _garbage(a, d):
    return np.random.default_rng(1).integers(0, 2**63, size=a.shape, dtype=np.int64).astype(a.dtype)


TRIE_EDITS = [
    ("louds", _flip_bit(40, 7), "louds"),
    ("louds", _garbage, "louds"),
    ("louds", lambda a, d: np.zeros_like(a), "louds"),
    ("louds_rank", _plus((2, 0), 1), "louds_rank"),
    ("louds_rank", _garbage, "louds_rank"),
    ("louds_select0", _set(1, 10**6), "louds_select0"),
    ("louds_select0", _garbage, "louds_select0"),
    ("louds_select1", _set(-1, 0), "louds_select1"),
    ("label_low", _swap_labels, "label"),
    ("label_high", _set(-1, 2**63), "label_high"),
    ("terminal", lambda a, d: np.zeros_like(a), "terminal"),
    ("terminal", _set(0, 1), "terminal"),
    ("terminal_rank", _plus((1, 0), 3), "terminal_rank"),
    ("terminal_select1", _set(1, 4000000), "terminal_select1"),
    ("level_offsets", _plus(1, 1), "level_offsets"),
]


@pytest.mark.parametrize("name,edit,where", TRIE_EDITS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_trie_array_edit_refused(trie_dir, tmp_path, name, edit, where):
    d = copy(trie_dir, tmp_path)
    edit_array(d, name, lambda a: edit(a, d))
    refused(d, where, trie=True)


@pytest.mark.parametrize("key,value,where", [("num_nodes", 7, "num_nodes"), ("high_bits", 15, "high_bits"),
                                             ("max_depth", 9, "level_offsets"), ("num_keys", 0, "num_keys"),
                                             ("num_keys", None, "num_keys")])
def test_trie_manifest_edit_refused(trie_dir, tmp_path, key, value, where):
    d = copy(trie_dir, tmp_path)
    m = _manifest(d)
    m[key] = value
    _save_manifest(d, m, digest=False)
    refused(d, "manifest_sha256", trie=True)
    _save_manifest(d, m)
    refused(d, where, trie=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from([0, 1, 2, 65535, 65536, 1 << 20, 2**31 - 1]), min_size=1, max_size=5),
                min_size=1, max_size=60))
def test_random_tries_accepted(tmp_path, keys):
    d = tmp_path / f"t{abs(hash(str(keys)))}"
    trie = SuccinctTrie.build(keys)
    trie.save(d)
    back = SuccinctTrie.load(d)
    assert [back.lookup(k) for k in keys] == [trie.lookup(k) for k in keys]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(LAYOUTS)), pick=st.integers(0, 10**6), value=JSON_VALUES, delete=st.booleans())
def test_random_stats_edits_give_one_line_from_gtmkit_stats(built, tmp_path, kind, pick, value, delete):
    """The manifest's statistics are reported, not served from: any edit of them (digest recomputed) is printed
    by `gtmkit stats` or refused with one line naming the index, before anything is printed."""
    from click.testing import CliRunner
    from gtmkit.cli import cli

    d = _edited_copy(built[kind], tmp_path / f"s{pick}_{kind}", ("stats",), pick, value, delete)
    r = CliRunner().invoke(cli, ["stats", str(d)])
    assert r.exit_code in (0, 1) and not isinstance(r.exception, (KeyError, TypeError, ValueError, IndexError))
    if r.exit_code == 1:
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and "statistics" in r.stderr
