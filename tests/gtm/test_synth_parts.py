"""Synthetic catalogs written as a directory of parts by several processes: the parts, read in path order, are
the single file's rows; their bytes do not depend on the number of workers; the GTM index built from the
directory equals the one built from the file."""

from __future__ import annotations

import hashlib

import pytest

import gtmkit
import gtmkit.synth.catalog as synth_catalog
from gtmkit.errors import GtmkitError
from gtmkit.synth import write_catalog

ROWS = 2000  # rows a generated chunk here, so that a small catalog has several parts


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(synth_catalog, "ROWS_PER_GROUP", ROWS)


def _digests(folder):
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())]


def test_parts_are_the_file_split(tmp_path, small_chunks):
    n = 5 * ROWS + 123
    write_catalog(tmp_path / "one.parquet", n, seed=4)
    cat, schema = write_catalog(tmp_path / "cat", n, seed=4, parts=4, workers=2)
    assert len(list((tmp_path / "cat").iterdir())) == 4
    assert (tmp_path / "cat.schema.json").read_text() == (tmp_path / "one.schema.json").read_text()
    write_catalog(tmp_path / "cat1", n, seed=4, parts=4, workers=1)
    assert _digests(tmp_path / "cat") == _digests(tmp_path / "cat1")
    one = gtmkit.build_index(tmp_path / "one.parquet", tmp_path / "i1", partition="static", k=[1, 4, 4, 2])
    many = gtmkit.build_index(tmp_path / "cat", tmp_path / "i2", partition="static", k=[1, 4, 4, 2])
    assert {k: f["sha256"] for k, f in one.manifest["files"].items()} == \
        {k: f["sha256"] for k, f in many.manifest["files"].items()}


def test_parts_need_a_new_or_empty_directory(tmp_path, small_chunks):
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "keep.txt").write_text("mine")
    with pytest.raises(GtmkitError, match="not an empty directory"):
        write_catalog(tmp_path / "cat", 3 * ROWS, parts=2)
    assert (tmp_path / "cat" / "keep.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    write_catalog(tmp_path / "empty", 3 * ROWS, parts=3, workers=3)
    assert len(list((tmp_path / "empty").iterdir())) == 3
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left
    with pytest.raises(GtmkitError, match="workers must be a positive integer"):
        write_catalog(tmp_path / "x", 10, workers=0)
