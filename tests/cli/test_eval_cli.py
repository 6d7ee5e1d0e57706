"""eval / match / demo end to end on a small synthetic catalog."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli
from gtmkit.synth import synth_users, write_catalog


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    d = tmp_path_factory.mktemp("evalidx")
    cat, _ = write_catalog(d / "c.parquet", 4000, seed=3, vocab=32, sid_length=3)
    return gtmkit.build_index(cat, d / "idx", partition="static", k=[1, 2, 2]), cat


def test_eval_json(small_index):
    idx, _ = small_index
    r = run("eval", idx.path, "--users", 6, "--beams", "1,16,32", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["recall"]["recall"] == 1.0 and out["recall"]["pairs"] > 0
    for mode in ("cd", "gtm"):
        m = out[mode]
        assert 0.0 <= m["pass_rate"] <= 1.0 and len(m["surviving_candidates_per_step"]) == 3
        assert m["sids_per_request"] <= 32
    assert out["gtm"]["sid_precision"] >= out["cd"]["sid_precision"]
    r = run("eval", idx.path, "--users", 3, "--beams", "1,8,8", "--logits", "random", "-s")
    assert r.exit_code == 0 and "recall of eligible prefixes 1.000000" in r.stdout


def test_eval_partition_sweep(small_index):
    idx, _ = small_index
    r = run("eval", idx.path, "--users", 3, "--beams", "1,8,8", "--partition-sweep", "--json")
    assert r.exit_code == 0, r.output
    sweep = json.loads(r.stdout)["sweep"]
    assert [row["setting"].split()[0] for row in sweep] == ["none", "static", "static", "dynamic", "dynamic"]
    assert all(row["recall"] == 1.0 for row in sweep)


def test_eval_users_file_errors(small_index, tmp_path):
    idx, _ = small_index
    bad = tmp_path / "u.jsonl"
    bad.write_text('{"country": "US"}\n{"colour": "red"}\n')
    r = run("eval", idx.path, "--users-file", bad, "--beams", "1,4,4")
    assert r.exit_code == 1 and "unknown request attribute 'colour'" in r.stderr
    bad.write_text("not json\n")
    r = run("eval", idx.path, "--users-file", bad)
    assert r.exit_code == 1 and "line 1: not valid JSON" in r.stderr


def test_match_returns_only_eligible_ads(small_index):
    idx, _ = small_index
    user = synth_users(idx.manifest["schema"], 1, seed=4)[0]
    r = run("match", idx.path, "--user", json.dumps(user), "--beams", "1,16,32", "--top", 50, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    ids = np.array([x["ad_id"] for x in out["top"]], np.int64)
    assert len(ids) > 0 and idx.ad_eligible(ids, idx.encode_request(user)).all()
    for x in out["top"]:
        assert int(ids[0]) in idx.sid_ads(idx.find(out["top"][0]["sid"]))
    r = run("match", idx.path, "--user", "{bad")
    assert r.exit_code == 1 and "not valid JSON" in r.stderr


def test_demo_small(tmp_path):
    r = run("demo", "--ads", 3000, "--users", 4, "--workdir", tmp_path / "w", "-s", "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "recall of eligible prefixes 1.000000" in r.stdout and "demo finished" in r.stdout
    assert gtmkit.load_index(tmp_path / "w" / "index").num_ads == 3000


class _DeviceArray:
    """Stands in for a CuPy array: device memory that must be copied to the host with get()."""

    __cuda_array_interface__ = {}

    def __init__(self, a):
        self.a = a

    def get(self):
        return self.a


def test_host_decoder_accepts_device_beam_state():
    """With a GPU matcher, beam_search hands the decoder device arrays; the synthetic decoder copies
    them to the host and produces the same log-probs."""
    from gtmkit.synth.logits import SyntheticDecoder

    users = [{"_interests": [3, 5]}, {"_interests": [1]}]
    a, b = SyntheticDecoder(users, 16, seed=2), SyntheticDecoder(users, 16, seed=2)
    prev, parents = np.full(2, -1, np.int32), np.arange(2, dtype=np.int32)
    np.testing.assert_array_equal(a(0, prev, parents), b(0, _DeviceArray(prev), _DeviceArray(parents)))
    nxt_prev, nxt_par = np.array([3, 5, 1], np.int32), np.array([0, 0, 1], np.int32)
    np.testing.assert_array_equal(a(1, nxt_prev, nxt_par), b(1, _DeviceArray(nxt_prev), _DeviceArray(nxt_par)))
