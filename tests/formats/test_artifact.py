import json
import os
import tempfile

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from gtmkit.errors import ArtifactError
from gtmkit.artifact.container import (ArtifactWriter, file_sha256, manifest_path, open_artifact, read_manifest, verify_artifact)

FMT = "gtmkit-test"

ARRAYS = {
    "u64_2d": np.arange(24, dtype=np.uint64).reshape(6, 4) * np.uint64(2**40),
    "empty_u32": np.zeros(0, dtype=np.uint32),
    "empty_2d": np.zeros((0, 3), dtype=np.uint64),
    "i8": np.array([-128, 0, 127], dtype=np.int8),
    "f64": np.linspace(-1, 1, 7),
    "f32_fortran": np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
    "strided": np.arange(20, dtype=np.int32)[::3],
    "flags": np.array([True, False, True]),
    "big_endian": np.arange(5, dtype=">u4"),
    "scalar": np.array(7, dtype=np.int16),
}
TABLE = pa.table({"key": pa.array(["a", "bb", "", None, "ünï"]), "code": pa.array([0, 1, 2, 3, 4], pa.uint32())})
META = {"schema": {"attrs": ["x", "y"]}, "counts": {"n": np.int64(5)}, "stats": {"mean": 1.5}, "layout": "v1"}


def build(path, arrays=ARRAYS, table=TABLE, meta=META, version=1, **kw):
    with ArtifactWriter(path, FMT, version, **kw) as w:
        for name, arr in arrays.items():
            w.add_array(name, arr)
        if table is not None:
            w.add_table("dict", table)
        return w.commit(meta)


def vdir(path):
    """The directory of the version an artifact path serves (where its member files are)."""
    return manifest_path(path).parent


def edit_manifest(path, **changes):
    m = json.loads(manifest_path(path).read_text())
    m.update(changes)
    manifest_path(path).write_text(json.dumps(m))


@pytest.mark.parametrize("mmap", [True, False])
def test_round_trip(tmp_path, mmap):
    out = build(tmp_path / "art")
    assert out == (tmp_path / "art").absolute()
    art = open_artifact(out, FMT, [1], mmap=mmap)
    assert art.names == sorted(ARRAYS)
    assert art.table_names == ["dict"]
    for name, arr in ARRAYS.items():
        got = art.array(name)
        assert got.dtype == arr.dtype and got.shape == arr.shape
        np.testing.assert_array_equal(got, arr)
        assert got.flags.c_contiguous
        if mmap:
            assert isinstance(got, np.memmap) and not got.flags.writeable
    assert art.table("dict").equals(TABLE)
    assert art.nbytes == sum(f.stat().st_size for f in vdir(out).iterdir() if f.name != "manifest.json")
    # .npy files are plain numpy files
    np.testing.assert_array_equal(np.load(vdir(out) / "u64_2d.npy", mmap_mode="r"), ARRAYS["u64_2d"])
    with pytest.raises(ArtifactError):
        art.array("dict")
    with pytest.raises(ArtifactError):
        art.table("nope")


def test_manifest_contents(tmp_path):
    out = build(tmp_path / "art")
    text = (vdir(out) / "manifest.json").read_text()
    m = read_manifest(vdir(out))
    assert text == json.dumps(m, sort_keys=True, indent=1) + "\n"
    assert m["schema"] == META["schema"] and m["counts"] == {"n": 5} and m["layout"] == "v1"
    assert m["format"] == FMT and m["format_version"] == 1 and "gtmkit_version" in m and "created" in m
    e = m["files"]["u64_2d"]
    assert e == {"file": "u64_2d.npy", "kind": "array", "dtype": "<u8", "shape": [6, 4],
                 "bytes": os.path.getsize(vdir(out) / "u64_2d.npy"), "sha256": file_sha256(vdir(out) / "u64_2d.npy")}
    assert m["files"]["dict"]["kind"] == "table" and m["files"]["dict"]["rows"] == 5
    assert m["files"]["dict"]["sha256"] == file_sha256(vdir(out) / "dict.parquet")
    # deterministic apart from "created"
    m2 = read_manifest(vdir(build(tmp_path / "art2")))
    m.pop("created"), m2.pop("created")
    assert m == m2


def test_progress_reported(tmp_path):
    out = build(tmp_path / "art")
    calls = []
    open_artifact(out, FMT, [1], progress=lambda d, t, p: calls.append((d, t, p)))
    total = open_artifact(out, FMT, [1], verify=False).nbytes
    assert calls[-1] == (total, total, "verify")
    assert [d for d, _, _ in calls] == sorted(d for d, _, _ in calls)


def test_flipped_byte(tmp_path):
    out = build(tmp_path / "art")
    f = vdir(out) / "f64.npy"
    data = bytearray(f.read_bytes())
    data[-3] ^= 0x40
    f.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="f64.npy.*checksum"):
        open_artifact(out, FMT, [1])
    problems = verify_artifact(out, FMT, [1])
    assert len(problems) == 1 and "f64.npy" in problems[0]
    art = open_artifact(out, FMT, [1], verify=False)
    assert art.array("f64").shape == (7,)


def test_verify_collects_all(tmp_path):
    out = build(tmp_path / "art")
    for name in ("i8.npy", "dict.parquet"):
        data = bytearray((vdir(out) / name).read_bytes())
        data[-1] ^= 1
        (vdir(out) / name).write_bytes(bytes(data))
    (vdir(out) / "u64_2d.npy").unlink()
    problems = verify_artifact(out, FMT, [1])
    assert len(problems) == 3
    assert verify_artifact(build(tmp_path / "ok"), FMT, [1]) == []


def test_truncated_refused_without_verify(tmp_path):
    out = build(tmp_path / "art")
    f = vdir(out) / "u64_2d.npy"
    f.write_bytes(f.read_bytes()[:-8])
    with pytest.raises(ArtifactError, match="u64_2d.npy.*truncated"):
        open_artifact(out, FMT, [1], verify=False)
    assert any("truncated" in p for p in verify_artifact(out, FMT, [1]))


def test_header_mismatch(tmp_path):
    out = build(tmp_path / "art")
    m = json.loads((vdir(out) / "manifest.json").read_text())
    m["files"]["i8"]["dtype"] = "|u1"
    (vdir(out) / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="i8.npy.*header"):
        open_artifact(out, FMT, [1], verify=False)
    (vdir(out) / "i8.npy").write_bytes(b"x" * m["files"]["i8"]["bytes"])  # same size, garbage header
    with pytest.raises(ArtifactError, match="i8.npy.*npy header"):
        open_artifact(out, FMT, [1], verify=False)


def test_missing_file(tmp_path):
    out = build(tmp_path / "art")
    (vdir(out) / "dict.parquet").unlink()
    with pytest.raises(ArtifactError, match="dict.parquet.*missing"):
        open_artifact(out, FMT, [1], verify=False)


def test_wrong_format_and_version(tmp_path):
    out = build(tmp_path / "art", version=2)
    assert open_artifact(out, FMT, range(1, 3)).manifest["format_version"] == 2
    with pytest.raises(ArtifactError, match=r'not a other-format artifact \(format "gtmkit-test"\)'):
        open_artifact(out, "other-format", [2])
    with pytest.raises(ArtifactError, match="version 2.*1, 3"):
        open_artifact(out, FMT, [3, 1])
    for bad in ("two", True, 1.0, None):
        edit_manifest(out, format_version=bad)
        with pytest.raises(ArtifactError, match="version"):
            open_artifact(out, FMT, [1, 2])
    edit_manifest(out, format_version=2, format="gtmkit-trie")
    with pytest.raises(ArtifactError, match="not a gtmkit-test artifact"):
        open_artifact(out, FMT, [2])
    assert len(verify_artifact(out, FMT, [2])) == 1


def test_existing_out_dir(tmp_path):
    out = build(tmp_path / "art")
    with pytest.raises(ArtifactError, match="exists"):
        ArtifactWriter(out, FMT, 1)
    build(out, arrays={"only": np.ones(3, np.uint8)}, table=None, overwrite=True)
    art = open_artifact(out, FMT, [1])
    assert art.names == ["only"] and art.table_names == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]


def test_exception_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with ArtifactWriter(tmp_path / "art", FMT, 1) as w:
            w.add_array("a", np.arange(10))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with ArtifactWriter(tmp_path / "art", FMT, 1) as w:
        w.add_array("a", np.arange(10))  # no commit
    assert list(tmp_path.iterdir()) == []


def test_failed_overwrite_keeps_old(tmp_path):
    out = build(tmp_path / "art")
    with pytest.raises(RuntimeError):
        with ArtifactWriter(out, FMT, 1, overwrite=True) as w:
            w.add_array("a", np.arange(10))
            raise RuntimeError("boom")
    assert open_artifact(out, FMT, [1]).names == sorted(ARRAYS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]


def test_writer_misuse(tmp_path):
    with ArtifactWriter(tmp_path / "art", FMT, 1) as w:
        for bad in ("", "a-b", "a.b", "../x", "é"):
            with pytest.raises(ArtifactError, match="name"):
                w.add_array(bad, np.zeros(1))
        w.add_array("a", np.zeros(1))
        with pytest.raises(ArtifactError, match="duplicate"):
            w.add_table("a", TABLE)
        with pytest.raises(ArtifactError, match="dtype"):
            w.add_array("obj", np.array([1, "x"], dtype=object))
        with pytest.raises(ArtifactError, match="reserved"):
            w.commit({"files": {}})
        w.commit({})
        with pytest.raises(ArtifactError, match="committed"):
            w.add_array("b", np.zeros(1))
    assert open_artifact(tmp_path / "art", FMT, [1]).names == ["a"]


def test_bad_paths(tmp_path):
    (tmp_path / "file").write_text("x")
    for p in (tmp_path / "file", tmp_path / "absent"):
        with pytest.raises(ArtifactError):
            read_manifest(p)
        with pytest.raises(ArtifactError):
            open_artifact(p, FMT, [1])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match="not a gtmkit artifact"):
        open_artifact(tmp_path / "empty", FMT, [1])
    (tmp_path / "empty" / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="invalid manifest"):
        open_artifact(tmp_path / "empty", FMT, [1])
    (tmp_path / "empty" / "manifest.json").write_bytes(b"\xff\xfe[1]")
    with pytest.raises(ArtifactError, match="invalid manifest"):
        read_manifest(tmp_path / "empty")
    (tmp_path / "empty" / "manifest.json").write_text("[1, 2]")
    assert verify_artifact(tmp_path / "empty", FMT, [1])[0].endswith("(not a JSON object)")


def test_path_traversal_entry_refused(tmp_path):
    out = build(tmp_path / "art")
    m = json.loads((vdir(out) / "manifest.json").read_text())
    m["files"]["i8"]["file"] = "../art/i8.npy"
    (vdir(out) / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="invalid entry"):
        open_artifact(out, FMT, [1])


@settings(max_examples=30, deadline=None)
@given(arr=hnp.arrays(dtype=st.sampled_from([np.uint8, np.int16, np.uint32, np.int64, np.uint64, np.float32]),
                      shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5)),
       fortran=st.booleans(), mmap=st.booleans())
def test_round_trip_property(arr, fortran, mmap):
    if fortran:
        arr = np.asfortranarray(arr)
    with tempfile.TemporaryDirectory() as d:
        out = build(os.path.join(d, "a"), arrays={"x": arr}, table=None, meta={})
        got = open_artifact(out, FMT, [1], mmap=mmap).array("x")
        assert got.dtype == arr.dtype and got.shape == arr.shape
        np.testing.assert_array_equal(got, arr)


def test_streamed_array_equals_added_array_and_checks_its_length(tmp_path):
    """stream_array writes the bytes add_array writes (same checksum); writing more or fewer values than the
    shape holds is refused, and nothing is published."""
    from gtmkit.errors import ArtifactError
    from gtmkit.artifact.container import ArtifactWriter

    a = (np.arange(5000, dtype=np.int64) * 31) % 977
    sums = []
    for how in ("add", "stream"):
        with ArtifactWriter(tmp_path / how, "x", 1) as w:
            if how == "add":
                w.add_array("a", a.reshape(1000, 5))
            else:
                s = w.stream_array("a", np.int64, (1000, 5))
                for i in range(0, 5000, 1234):
                    s.write(a[i:i + 1234])
                s.close()
            w.commit({})
            sums.append(w.entry("a")["sha256"])
    assert sums[0] == sums[1]
    for extra in (1, -1):
        with pytest.raises(ArtifactError, match="more values|short"):
            with ArtifactWriter(tmp_path / f"bad{extra}", "x", 1) as w:
                s = w.stream_array("a", np.int64, 10)
                s.write(np.zeros(10 + extra, np.int64))
                s.close()
        assert not (tmp_path / f"bad{extra}").exists()
