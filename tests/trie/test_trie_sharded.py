"""Sharded succinct-trie builds (trie/shards.py): for any shard count, in this process or on a
real Dask LocalCluster, the saved arrays are SuccinctTrie.build's over all the keys, byte for byte."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gtmkit.errors import GtmkitError
from gtmkit.trie.trie import SuccinctTrie


def _sums(trie) -> dict:
    return {k: v["sha256"] for k, v in trie._artifact.manifest["files"].items()}


def _keys(seed: int, n: int, hot: bool, long_tokens: bool):
    rng = np.random.default_rng(seed)
    hi = 2**31 - 1 if long_tokens else 7
    keys = [list(map(int, rng.integers(0, hi, int(rng.integers(1, 6))))) for _ in range(n)]
    if hot:  # most keys below token 3: it splits between shards on the second token
        keys = [[3] + k[:-1] if rng.random() < 0.8 else k for k in keys]
    keys += keys[: n // 5]  # repeats, across files too
    return pa.array(keys, pa.list_(pa.int64()))


def _write(root, col, cuts):
    root.mkdir()
    b = [0, *sorted(set(cuts)), len(col)]
    for i, (x, y) in enumerate(zip(b, b[1:])):
        pq.write_table(pa.table({"key": col.slice(x, y - x)}), root / f"part-{i:03d}.parquet")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(1, 300), shards=st.integers(1, 8), hot=st.booleans(),
       long_tokens=st.booleans(), cuts=st.lists(st.integers(0, 360), max_size=3))
def test_sharded_trie_equals_the_whole_build(tmp_path_factory, seed, n, shards, hot, long_tokens, cuts):
    tmp = tmp_path_factory.mktemp("t")
    col = _keys(seed, n, hot, long_tokens)
    _write(tmp / "keys", col, [c for c in cuts if c <= len(col)])  # a cut at 0 or the end: an empty part
    want = SuccinctTrie.build(col)
    want.save(tmp / "whole")
    got = SuccinctTrie.build_dataset(tmp / "keys", tmp / "sharded", shards=shards)
    assert _sums(got) == _sums(SuccinctTrie.load(tmp / "whole"))
    assert got.num_keys == want.num_keys and got._artifact.manifest["build"]["mode"] == "sharded"
    assert sorted(p.name for p in (tmp / "sharded").iterdir() if not p.name.startswith("v-")) == \
        sorted(p.name for p in (tmp / "whole").iterdir() if not p.name.startswith("v-"))


def test_bad_key_names_its_file_and_row_and_leaves_nothing(tmp_path):
    col = pa.array([[1, 2], [3], [4, 5], [], [6]], pa.list_(pa.int64()))
    _write(tmp_path / "keys", col, [2])
    with pytest.raises(GtmkitError, match=r"part-001.parquet: column 'key': row 1 is empty"):
        SuccinctTrie.build_dataset(tmp_path / "keys", tmp_path / "trie", shards=2)
    assert not (tmp_path / "trie").exists()


def test_dask_cluster_builds_the_same_trie(tmp_path):
    distributed = pytest.importorskip("distributed", reason="needs the dist extra: pip install 'gtmkit[dist]'")
    import logging
    col = _keys(5, 3000, True, False)
    _write(tmp_path / "keys", col, [700, 1900])
    want = SuccinctTrie.build(col)
    want.save(tmp_path / "whole")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.CRITICAL) as lc, distributed.Client(lc) as client:
        got = SuccinctTrie.build_dataset(tmp_path / "keys", tmp_path / "dask", client=client, shards=5)
    assert _sums(got) == _sums(SuccinctTrie.load(tmp_path / "whole"))
    assert got._artifact.manifest["build"]["workers"] == 2


def test_cli_trie_build_in_shards(tmp_path):
    from click.testing import CliRunner

    from gtmkit.cli import cli
    col = _keys(6, 500, True, False)
    _write(tmp_path / "keys", col, [100])
    r = CliRunner().invoke(cli, ["trie", "build", str(tmp_path / "keys"), "-o", str(tmp_path / "a"), "--json"])
    assert r.exit_code == 0, r.output
    r2 = CliRunner().invoke(cli, ["trie", "build", str(tmp_path / "keys"), "-o", str(tmp_path / "b"), "--shards", "3",
                                  "--json"])
    assert r2.exit_code == 0, r2.output
    a, b = json.loads(r.output), json.loads(r2.output)
    assert a["keys"] == b["keys"] and a["nodes"] == b["nodes"]
    assert _sums(SuccinctTrie.load(tmp_path / "a")) == _sums(SuccinctTrie.load(tmp_path / "b"))
