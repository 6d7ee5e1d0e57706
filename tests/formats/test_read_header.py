"""read_header: either artifact's kind, format version and summary from its manifest alone, equal to what loading
it says; damaged or foreign paths refused in one line; no array is read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import gtmkit
from gtmkit.artifact.layout import served
from support.catalogs import random_catalog, schema_dict, write

DATA = Path(__file__).resolve().parents[1] / "data"


def _index_matches(h, idx):
    assert h.kind == "index" and h.format == "gtmkit-index"
    s = h.summary
    assert (s["ads"], s["sids"], s["sid_length"], s["vocab"]) == (idx.num_ads, idx.num_sids, idx.sid_length,
                                                                   idx.vocab_size)
    assert s["bitmask_attributes"] == sorted(idx.manifest["schema"]["bitmask"])
    assert s["bloom_attributes"] == sorted(idx.manifest["schema"]["bloom"])


@pytest.mark.parametrize("name, version", [("index_v1", 1), ("index_v2_jagged/index", 2),
                                           ("index_v3_jagged/index", 3)])
def test_golden_indexes(name, version):
    h = gtmkit.read_header(DATA / name)
    _index_matches(h, gtmkit.load_index(DATA / name))
    assert h.format_version == version
    assert h.version == served(DATA / name)


def test_golden_trie():
    h = gtmkit.read_header(DATA / "trie_v2" / "trie")
    trie = gtmkit.SuccinctTrie.load(DATA / "trie_v2" / "trie")
    assert (h.kind, h.format, h.format_version) == ("trie", "gtmkit-trie", 2)
    assert (h.summary["num_keys"], h.summary["num_nodes"]) == (trie.num_keys, trie.num_nodes)
    assert h.version == served(DATA / "trie_v2" / "trie")


def test_fresh_builds_and_bytes(tmp_path):
    rng = np.random.default_rng(5)
    cat = write(tmp_path, random_catalog(seed=5, n_ads=200), schema_dict())
    idx = gtmkit.build_index(cat, tmp_path / "idx")
    h = gtmkit.read_header(tmp_path / "idx")
    _index_matches(h, idx)
    vdir = tmp_path / "idx" / h.version
    assert h.nbytes == sum(f.stat().st_size for f in vdir.iterdir() if f.name != "manifest.json")
    keys = [list(rng.integers(0, 50, size=rng.integers(1, 6))) for _ in range(300)]
    gtmkit.SuccinctTrie.build(keys).save(tmp_path / "trie")
    t = gtmkit.read_header(tmp_path / "trie")
    assert t.kind == "trie" and t.summary["num_keys"] == len({tuple(k) for k in keys})


def test_reads_no_array(tmp_path):
    """A member array deleted: loading fails, the header (manifest only) still reads."""
    shutil.copytree(DATA / "index_v2_jagged" / "index", tmp_path / "idx")
    vdir = tmp_path / "idx" / served(tmp_path / "idx")
    next(vdir.glob("*.npy")).unlink()
    assert gtmkit.read_header(tmp_path / "idx").kind == "index"
    with pytest.raises(gtmkit.ArtifactError):
        gtmkit.load_index(tmp_path / "idx")


@pytest.mark.parametrize("damage, says", [
    (lambda m: m.update(counts={"ads": 1}), "manifest_sha256 mismatch"),
    (lambda m: m.pop("manifest_sha256"), "no manifest_sha256"),
    (lambda m: m.update(format="something-else"), "not a gtmkit index or trie"),
    (lambda m: m.update(format_version=99), "format version 99 is not supported"),
    (lambda m: m.update(format_version=True), "is not supported"),
])
def test_damaged_manifest_one_line(tmp_path, damage, says):
    shutil.copytree(DATA / "trie_v2" / "trie", tmp_path / "t")
    mpath = tmp_path / "t" / served(tmp_path / "t") / "manifest.json"
    m = json.loads(mpath.read_text())
    damage(m)
    mpath.write_text(json.dumps(m))
    with pytest.raises(gtmkit.ArtifactError, match=says) as e:
        gtmkit.read_header(tmp_path / "t")
    assert "\n" not in str(e.value)


def test_not_an_artifact(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("[1, 2]")
    for path, says in ((tmp_path / "nope", "no such artifact"), (tmp_path / "f", "not a directory"),
                       (tmp_path, "not a gtmkit artifact"), (tmp_path / "bad", "not a JSON object"),
                       ("a\0b", "NUL"), (3, "str or os.PathLike")):
        with pytest.raises(gtmkit.ArtifactError, match=says):
            gtmkit.read_header(path)
