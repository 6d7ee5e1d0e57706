"""`gtmkit trie ...` and `gtmkit synth keys / proposals` through CliRunner, and the synth workloads."""

from __future__ import annotations

import json

import click
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gtmkit.commands import synth_trie, trie as trie_cmd
from gtmkit.trie.trie import SuccinctTrie
from gtmkit.synth.keys import synth_keys
from gtmkit.synth.proposals import synth_proposals
from gtmkit._gpu import cuda_available


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def synth():
    """Stand-in for the `gtmkit synth` group."""


synth_trie.register(synth)


def run(group, *args):
    return CliRunner().invoke(group, [str(a) for a in args], catch_exceptions=False)


def test_synth_build_stats_search(tmp_path):
    keys, tr, props = tmp_path / "k.parquet", tmp_path / "trie", tmp_path / "p.npz"
    r = run(synth, "keys", "-n", 3000, "--vocab", 100000, "--seed", 3, "-o", keys, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["keys"] == 3000 and pq.read_table(keys).schema.field("key").type == pa.list_(pa.int32())
    r = run(trie_cmd.command, "build", keys, "-o", tr, "-s")
    assert r.exit_code == 0 and "3,000 keys" in r.output, r.output
    r = run(trie_cmd.command, "stats", tr, "--json")
    s = json.loads(r.output)
    assert s["keys"] == 3000 and s["nodes"] == sum(s["nodes_per_depth"]) and s["bytes"] > 0
    assert "depth" in run(trie_cmd.command, "stats", tr).output
    r = run(synth, "proposals", "--trie", tr, "-b", 2, "-T", 4, "-K", 30, "-r", 5, "-o", props)
    assert r.exit_code == 0, r.output
    r = run(trie_cmd.command, "search", tr, "--proposals", props, "--bw", 7, "--alpha", 1, "--json",
            "-o", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    trie = SuccinctTrie.load(tr)
    saved = np.load(tmp_path / "out.npz")
    assert out["queries"] == 2 and saved["key_ids"].shape == (2, 7)
    for q, res in enumerate(out["results"]):
        assert [x["key_id"] for x in res] == [k for k in saved["key_ids"][q].tolist() if k >= 0]
        assert all(tuple(x["tokens"]) == trie.key(x["key_id"]) for x in res)
    r = run(trie_cmd.command, "search", tr, "--proposals", props, "--bw", 3)
    assert r.exit_code == 0 and "query 1:" in r.output


def test_cli_errors(tmp_path):
    keys = tmp_path / "k.parquet"
    pq.write_table(pa.table({"key": pa.array([[1, 2], []], pa.list_(pa.int32())), "x": [1, 2]}), keys)
    r = run(trie_cmd.command, "build", keys, "-o", tmp_path / "t")
    assert r.exit_code == 1 and "k.parquet: column 'key': row 1 is empty" in r.output and not (tmp_path / "t").exists()
    neg = tmp_path / "neg.parquet"
    pq.write_table(pa.table({"tok": pa.array([[1, 2], [3], [4, -5]], pa.list_(pa.int64()))}), neg)
    r = run(trie_cmd.command, "build", neg, "-o", tmp_path / "t", "--column", "tok")
    assert r.exit_code == 1 and "neg.parquet: column 'tok': row 2 has negative token -5 at position 1" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "t").exists()
    r = run(trie_cmd.command, "build", keys, "-o", tmp_path / "t", "--column", "nope")
    assert r.exit_code == 1 and "no column 'nope'" in r.output
    r = run(trie_cmd.command, "build", tmp_path / "missing.parquet", "-o", tmp_path / "t")
    assert r.exit_code == 1 and "missing.parquet: no such file" in r.output
    r = run(trie_cmd.command, "stats", tmp_path)
    assert r.exit_code == 1 and "manifest" in r.output
    pq.write_table(pa.table({"key": pa.array([[1, 2]], pa.list_(pa.int32()))}), keys)
    assert run(trie_cmd.command, "build", keys, "-o", tmp_path / "t", "-s").exit_code == 0
    r = run(trie_cmd.command, "build", keys, "-o", tmp_path / "t")
    assert r.exit_code == 1 and "already exists" in r.output
    assert run(trie_cmd.command, "build", keys, "-o", tmp_path / "t", "-f", "--json").exit_code == 0
    np.savez(tmp_path / "p.npz", tokens=np.ones((1, 2, 3), np.int32))
    r = run(trie_cmd.command, "search", tmp_path / "t", "--proposals", tmp_path / "p.npz", "--bw", 2)
    assert r.exit_code == 1 and "'logp'" in r.output
    for tok, lp, what in [(np.ones((1, 2, 3), np.int32), np.zeros((1, 2, 4), np.float32), "shapes [1, 2, 3] and [1, 2, 4]"),
                          (np.ones((2, 3), np.int32), np.zeros((2, 3), np.float32), "[b, T, K]"),
                          (np.ones((1, 2, 3), np.float32), np.zeros((1, 2, 3), np.float32), "got float32 and float32")]:
        np.savez(tmp_path / "p.npz", tokens=tok, logp=lp)
        r = run(trie_cmd.command, "search", tmp_path / "t", "--proposals", tmp_path / "p.npz", "--bw", 2)
        assert r.exit_code == 1 and "p.npz: " in r.output and what in r.output and "Traceback" not in r.output
    np.savez(tmp_path / "p.npz", tokens=np.ones((1, 2, 3), np.int32), logp=np.zeros((1, 2, 3), np.float32))
    if not cuda_available():  # without a GPU, asking for one is a clear error
        r = run(trie_cmd.command, "search", tmp_path / "t", "--proposals", tmp_path / "p.npz", "--bw", 2,
                "--device", "cuda")
        assert r.exit_code == 1 and "needs CuPy and a visible GPU" in r.output
    r = run(synth, "keys", "-n", 10, "--min-len", 3, "--max-len", 2, "-o", tmp_path / "x.parquet")
    assert r.exit_code == 2 and "--max-len" in r.output


@pytest.mark.parametrize("group, path", [(trie_cmd.command, ["build"]), (trie_cmd.command, ["stats"]),
                                         (trie_cmd.command, ["search"]), (synth, ["keys"]), (synth, ["proposals"])])
def test_help_has_example(group, path):
    r = run(group, *path, "-h")
    assert r.exit_code == 0 and "Example:" in r.output


def test_synth_keys_are_distinct_and_deterministic():
    a = synth_keys(5000, seed=4, vocab=300000, min_len=2, max_len=6)
    assert a.type == pa.list_(pa.int32()) and a.equals(synth_keys(5000, seed=4, vocab=300000, min_len=2, max_len=6))
    rows = a.to_pylist()
    assert len({tuple(k) for k in rows}) == 5000 and {len(k) for k in rows} <= set(range(2, 7))
    tokens, offsets = synth_keys(5000, seed=4, vocab=300000, min_len=2, max_len=6, as_arrow=False)
    assert np.array_equal(tokens, a.values.to_numpy()) and np.array_equal(offsets, a.offsets.to_numpy())
    assert tokens.min() >= 0 and tokens.max() < 300000 and (tokens >= 65536).any()
    assert not a.equals(synth_keys(5000, seed=5, vocab=300000, min_len=2, max_len=6))


def test_synth_proposals_shape():
    trie = SuccinctTrie.build(synth_keys(2000, seed=1, vocab=5000))
    tokens, logp = synth_proposals(trie, 3, 6, 40, seed=2, r=8)
    assert tokens.shape == logp.shape == (3, 6, 40) and tokens.dtype == np.int32 and logp.dtype == np.float32
    assert np.all(np.diff(logp, axis=2) < 0) and np.all(logp < 0)
    for row in tokens.reshape(-1, 40):
        assert len(set(row.tolist())) == 40
    again = synth_proposals(trie, 3, 6, 40, seed=2, r=8)
    assert np.array_equal(again[0], tokens) and np.array_equal(again[1], logp)
    small = SuccinctTrie.build([[1, 2]])
    tokens, _ = synth_proposals(small, 1, 3, 5, seed=0)
    assert tokens[0, 0, 0] == 1 and tokens[0, 1, 0] == 2 and (tokens[0, :, 1:] < 0).all()


def test_trie_verify_command(tmp_path):
    """`gtmkit trie verify`: OK on a sound trie, one FAIL line per problem and exit 1 on an edited one, --json."""
    import json

    import numpy as np
    from click.testing import CliRunner

    from gtmkit.cli import cli
    from gtmkit.trie.trie import SuccinctTrie

    d = tmp_path / "t"
    SuccinctTrie.build([[1, 2], [1, 3], [4], [5, 6, 7]]).save(d)
    r = CliRunner().invoke(cli, ["trie", "verify", str(d)])
    assert r.exit_code == 0 and r.output.startswith("OK")
    r = CliRunner().invoke(cli, ["trie", "verify", str(d), "--json"])
    assert json.loads(r.output)["ok"] is True
    cur = d / (d / "CURRENT").read_text().strip() if (d / "CURRENT").exists() else d
    labels = np.load(cur / "label_low.npy")
    labels[[0, 1]] = labels[[1, 0]]
    np.save(cur / "label_low.npy", labels)
    r = CliRunner().invoke(cli, ["trie", "verify", str(d)])
    assert r.exit_code == 1 and "FAIL" in r.output and "\n" == r.output[-1]
    assert json.loads(CliRunner().invoke(cli, ["trie", "verify", str(d), "--json"]).output)["ok"] is False
