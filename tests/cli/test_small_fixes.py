"""CLI edge cases: --partition over the schema's, the sweep's none row, demo --workdir, missing catalogs,
trie search on files that are not proposals, GPU examples without their extras."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import gtmkit
from gtmkit.cli import cli
from gtmkit.synth import write_catalog

from support.catalogs import random_catalog, schema_dict, write

ROOT = Path(__file__).resolve().parents[2]
STATIC = {"mode": "static", "k": [1, 2, 2]}


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def layout(path) -> tuple:
    s = gtmkit.load_index(path).stats()["partition"]
    return s["mode"], s.get("k")


@pytest.fixture()
def static_catalog(tmp_path):
    return write(tmp_path, random_catalog(5, n_ads=80), schema_dict(partition=STATIC))


def test_partition_flag_overrides_the_schema(tmp_path, static_catalog):
    assert run("build", static_catalog, "-o", tmp_path / "s", "-s").exit_code == 0
    assert layout(tmp_path / "s")[0] == "static"
    r = run("build", static_catalog, "-o", tmp_path / "n", "--partition", "none", "-s")
    assert r.exit_code == 0, r.output
    idx = gtmkit.load_index(tmp_path / "n")
    assert layout(tmp_path / "n")[0] == "none" and idx.manifest["schema"]["partition"]["mode"] == "none"
    assert set(idx.partition_layout["level_width"]) == {1}  # one matcher per node
    r = run("build", static_catalog, "-o", tmp_path / "d", "--partition", "dynamic", "--k-max", 3, "-s")
    assert r.exit_code == 0, r.output
    assert layout(tmp_path / "d")[0] == "dynamic"
    # the same mode keeps the schema's other settings
    assert run("build", static_catalog, "-o", tmp_path / "s2", "--partition", "static", "-s").exit_code == 0
    assert gtmkit.load_index(tmp_path / "s2").manifest["schema"]["partition"]["k"] == [1, 2, 2]


def test_build_index_partition_none_overrides_the_schema(tmp_path, static_catalog):
    assert gtmkit.build_index(static_catalog, tmp_path / "a").manifest["schema"]["partition"]["mode"] == "static"
    idx = gtmkit.build_index(static_catalog, tmp_path / "b", partition="none")
    assert idx.manifest["schema"]["partition"]["mode"] == "none"


def test_sweep_none_row_is_a_none_build(tmp_path):
    cat, schema_path = write_catalog(tmp_path / "c.parquet", 3000, seed=4, vocab=32, sid_length=3)
    schema = json.loads(Path(schema_path).read_text())
    schema["partition"] = STATIC
    Path(schema_path).write_text(json.dumps(schema))
    idx = gtmkit.build_index(cat, tmp_path / "idx")
    assert idx.stats()["partition"]["mode"] == "static"
    r = run("eval", idx.path, "--users", 3, "--beams", "1,8,8", "--partition-sweep", "--json")
    assert r.exit_code == 0, r.output
    rows = {row["setting"]: row for row in json.loads(r.stdout)["sweep"]}
    none = gtmkit.build_index(cat, tmp_path / "none", partition="none")
    r = run("eval", none.path, "--users", 3, "--beams", "1,8,8", "--json")
    assert rows["none"]["matcher_bytes"] == json.loads(r.stdout)["matcher_bytes"]
    assert rows["none"]["matcher_bytes"] < rows["static k=1,4,2"]["matcher_bytes"]


def test_sweep_names_a_missing_catalog(tmp_path):
    cat, _ = write_catalog(tmp_path / "c.parquet", 500, seed=1, vocab=16, sid_length=3)
    idx = gtmkit.build_index(cat, tmp_path / "idx")
    r = run("eval", idx.path, "--users", 2, "--partition-sweep", "--catalog", tmp_path / "gone.parquet")
    assert r.exit_code == 1 and "gone.parquet: no such file" in r.stderr and len(r.stderr.splitlines()) == 1


def test_missing_catalog_is_named(tmp_path):
    r = run("build", tmp_path / "nope.parquet", "-o", tmp_path / "idx")
    assert r.exit_code == 1 and "nope.parquet: no such file" in r.stderr and "schema" not in r.stderr
    with pytest.raises(gtmkit.CatalogError, match="no such file"):
        gtmkit.build_index(tmp_path / "nope.parquet", tmp_path / "idx")
    r = run("build", tmp_path / "nope.parquet", "-o", tmp_path / "idx", "--schema", tmp_path / "nope.json")
    assert r.exit_code == 1 and "no such file" in r.stderr


def test_demo_refuses_a_folder_with_other_files(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    r = run("demo", "--ads", 500, "--users", 2, "--workdir", work, "-s", "--device", "cpu")
    assert r.exit_code == 1 and "not empty" in r.stderr and "--force" in r.stderr
    assert len(r.stderr.splitlines()) == 1 and sorted(p.name for p in work.iterdir()) == ["notes.txt"]
    (work / "catalog.parquet").mkdir()
    r = run("demo", "--ads", 500, "--users", 2, "--workdir", work, "-s", "--device", "cpu", "--force")
    assert r.exit_code == 1 and "not a regular file" in r.stderr


def test_demo_reuses_its_own_folder_only_with_force(tmp_path):
    work = tmp_path / "w"
    args = ("demo", "--ads", 1500, "--users", 2, "--workdir", work, "-s", "--device", "cpu")
    assert run(*args).exit_code == 0  # missing folder: created
    r = run(*args)
    assert r.exit_code == 1 and "not empty" in r.stderr
    (work / "notes.txt").write_text("mine")
    r = run(*args, "--force")
    assert r.exit_code == 0, r.output
    assert (work / "notes.txt").read_text() == "mine" and gtmkit.load_index(work / "index").num_ads == 1500


@pytest.fixture(scope="module")
def trie_dir(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path_factory.mktemp("trie")
    pq.write_table(pa.table({"key": [[1, 2], [1, 3], [2]]}), d / "k.parquet")
    assert run("trie", "build", d / "k.parquet", "-o", d / "trie", "-s").exit_code == 0
    return d


def test_trie_search_rejects_files_that_are_not_npz(trie_dir, tmp_path):
    np.save(tmp_path / "a.npy", np.zeros(3))
    (tmp_path / "t.txt").write_text("hello\n")
    (tmp_path / "empty.npz").write_bytes(b"")
    np.savez(tmp_path / "obj.npz", tokens=np.array([[[1]]], dtype=object), logp=np.zeros((1, 1, 1)))
    for name in ("a.npy", "t.txt", "empty.npz"):
        r = run("trie", "search", trie_dir / "trie", "--proposals", tmp_path / name, "--bw", 2)
        assert r.exit_code == 1 and "not an .npz archive" in r.stderr, r.output
        assert "pickle" not in r.stderr and len(r.stderr.splitlines()) == 1
    for proposals in (trie_dir / "k.parquet", tmp_path / "obj.npz"):
        r = run("trie", "search", trie_dir / "trie", "--proposals", proposals, "--bw", 2)
        assert r.exit_code == 1 and "pickle" not in r.stderr and len(r.stderr.splitlines()) == 1
    np.savez(tmp_path / "p.npz", tokens=np.zeros((1, 2, 2), np.int32), logp=np.zeros((1, 2, 2), np.float32))
    r = run("trie", "search", trie_dir, "--proposals", tmp_path / "p.npz", "--bw", 2)  # not a trie
    assert r.exit_code == 1 and len(r.stderr.splitlines()) == 1


@pytest.mark.parametrize("script,missing", [("cuda_graph.py", "gtmkit[gpu]"), ("torch_decoder.py", "gtmkit[gpu]")])
def test_gpu_examples_name_the_extra(tmp_path, script, missing):
    for mod in ("cupy", "torch"):  # stand-ins that fail to import, whatever this machine has installed
        (tmp_path / mod).mkdir()
        (tmp_path / mod / "__init__.py").write_text(f"raise ImportError('no {mod}', name='{mod}')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, str(ROOT / "examples" / script)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 1 and missing in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and p.stdout == ""
