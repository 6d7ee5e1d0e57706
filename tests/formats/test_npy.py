""".npy files read without numpy's header parser (artifact/npy.py): every header numpy writes, of any plain
dtype, shape, order and format version, reads as np.lib.format reads it and loads the same array; a header
numpy refuses is refused; a malformed or structured one is one NpyError line, and one ArtifactError line naming
the member when an artifact holds it."""

from __future__ import annotations

import importlib
import io

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gtmkit.errors import ArtifactError
from gtmkit.artifact import npy
from gtmkit.artifact.container import ArtifactWriter, open_artifact

DTYPES = ["<u8", "|u1", "<f4", ">f8", "<i2", ">i4", "<i8", "|b1", "<c8", ">c16", "<u2", ">u4", "<f2", "<M8[ns]",
          "<m8[10s]", "<U3", "|S5", "|i1"]
shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)


# numpy's reader of every version (3.0 has no public one); numpy 2 keeps it in a private module
_read = getattr(np.lib.format, "_read_array_header", None) or importlib.import_module(
    "numpy.lib._format_impl")._read_array_header


def _numpy_header(data: bytes) -> tuple:
    f = io.BytesIO(data)
    version = np.lib.format.read_magic(f)
    shape, fortran, dtype = _read(f, version)
    return shape, fortran, dtype, f.tell(), version


@settings(max_examples=150, deadline=None)
@given(descr=st.sampled_from(DTYPES), shape=shapes, fortran=st.booleans(),
       version=st.sampled_from([(1, 0), (2, 0), (3, 0)]), seed=st.integers(0, 2**32 - 1))
def test_headers_read_as_numpy_reads_them(tmp_path_factory, descr, shape, fortran, version, seed):
    dtype = np.dtype(descr)
    raw = np.random.default_rng(seed).integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    arr = raw.view(dtype).reshape(shape) if raw.size else np.zeros(shape, dtype)
    if fortran:
        arr = np.asfortranarray(arr)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version)
    data = buf.getvalue()
    h = npy.read_header(io.BytesIO(data))
    assert (h.shape, h.fortran_order, h.dtype, h.offset, h.version) == _numpy_header(data)
    path = tmp_path_factory.mktemp("npy") / "a.npy"
    path.write_bytes(data)
    for mode in (None, "r", "c"):
        got, want = npy.load(path, mode), np.load(path, mmap_mode=mode, allow_pickle=False)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes(order="A") == want.tobytes(order="A") and got.flags.f_contiguous == want.flags.f_contiguous
        assert type(got) is type(want) and got.flags.writeable == want.flags.writeable


# header dict literals as a hand-written or older writer may lay them out
_KEYS = st.permutations(["descr", "fortran_order", "shape"])


@st.composite
def header_texts(draw) -> str:
    """A header dict literal: keys in any order, either quote, any spacing, a trailing comma or none; a shape
    tuple (maybe written without the 1-tuple's comma, which numpy refuses) and sometimes a bad value."""
    sp = lambda: draw(st.sampled_from(["", " ", "  ", "\t", "\n"]))  # noqa: E731
    q = draw(st.sampled_from(["'", '"']))
    dims = draw(st.lists(st.integers(0, 10**6), max_size=3))
    if len(dims) == 1 and draw(st.booleans()):
        shape = f"({sp()}{dims[0]}{sp()})"  # an int in parentheses, not a tuple
    else:
        shape = "(" + f",{sp()}".join(map(str, dims)) + ("," if len(dims) == 1 else draw(st.sampled_from(["", ","]))) + ")"
    values = {"descr": q + draw(st.sampled_from(DTYPES + ["|O", "<q9", "|V8"])) + q,
              "fortran_order": draw(st.sampled_from(["True", "False", "0", "None"])),
              "shape": draw(st.sampled_from([shape, shape, "[1, 2]", "(-1,)", "(True,)"]))}
    keys = list(draw(_KEYS))
    if draw(st.integers(0, 9)) == 0:
        keys = keys[:2]
    body = f",{sp()}".join(f"{q}{k}{q}:{sp()}{values[k]}" for k in keys)
    return "{" + sp() + body + draw(st.sampled_from(["", ",", ", "])) + sp() + "}" + " " * draw(st.integers(0, 5)) + "\n"


def _frame(text: str, version=(1, 0)) -> bytes:
    enc = "utf8" if version == (3, 0) else "latin1"
    body = text.encode(enc)
    width = 2 if version == (1, 0) else 4
    return npy.MAGIC + bytes(version) + len(body).to_bytes(width, "little") + body


@settings(max_examples=200, deadline=None)
@given(text=header_texts())
def test_header_literals_are_accepted_exactly_where_numpy_accepts_them(text):
    try:
        want = _numpy_header(_frame(text))
    except (ValueError, SyntaxError, TypeError):
        want = None
    try:
        got = npy.read_header(io.BytesIO(_frame(text)))
    except npy.NpyError as exc:
        assert "\n" not in str(exc)
        # refused where numpy refuses, or where numpy's answer cannot be an array of a plain dtype (a negative
        # or bool dimension, an object or void dtype)
        assert want is None or want[2].kind in "OV" or any(type(x) is not int or x < 0 for x in want[0]), \
            (text, want, exc)
        return
    assert want is not None, text
    assert (got.shape, got.fortran_order, got.dtype, got.offset, got.version) == want


BAD = {
    "not a .npy file": b"PK\x03\x04 a zip file" + b" " * 100,
    "empty": b"",
    "cut inside the magic": npy.MAGIC[:4],
    "version 9.9": npy.MAGIC + b"\x09\x09" + b"\x10\x00" + b"{}" + b" " * 14,
    "header longer than the file": npy.MAGIC + b"\x01\x00" + b"\xff\x00" + b"{'descr': '<u8'",
    "header too long to trust": npy.MAGIC + b"\x02\x00" + (1 << 20).to_bytes(4, "little") + b" " * 100,
    "not UTF-8 in version 3.0": npy.MAGIC + b"\x03\x00" + b"\x04\x00\x00\x00" + b"{\xff}\n",
    "not a dict": _frame("[1, 2, 3]\n"),
    "a set": _frame("{'descr', 'shape'}\n"),
    "a key missing": _frame("{'descr': '<u8', 'shape': (3,)}\n"),
    "an extra key": _frame("{'descr': '<u8', 'fortran_order': False, 'shape': (3,), 'x': 1}\n"),
    "a key twice": _frame("{'descr': '<u8', 'descr': '<u8', 'fortran_order': False, 'shape': (3,)}\n"),
    "a key not a string": _frame("{1: '<u8', 'fortran_order': False, 'shape': (3,)}\n"),
    "shape an int": _frame("{'descr': '<u8', 'fortran_order': False, 'shape': 3}\n"),
    "shape negative": _frame("{'descr': '<u8', 'fortran_order': False, 'shape': (-3,)}\n"),
    "shape of bools": _frame("{'descr': '<u8', 'fortran_order': False, 'shape': (True,)}\n"),
    "shape of strings": _frame("{'descr': '<u8', 'fortran_order': False, 'shape': ('3',)}\n"),
    "fortran_order an int": _frame("{'descr': '<u8', 'fortran_order': 0, 'shape': (3,)}\n"),
    "a structured dtype": _frame("{'descr': [('a', '<i4'), ('b', '<f8')], 'fortran_order': False, 'shape': (3,)}\n"),
    "a subarray dtype": _frame("{'descr': ('<i4', (2,)), 'fortran_order': False, 'shape': (3,)}\n"),
    "an object dtype": _frame("{'descr': '|O', 'fortran_order': False, 'shape': (3,)}\n"),
    "a void dtype": _frame("{'descr': '|V8', 'fortran_order': False, 'shape': (3,)}\n"),
    "a comma dtype string": _frame("{'descr': '<i4,<i4', 'fortran_order': False, 'shape': (3,)}\n"),
    "no dtype": _frame("{'descr': '<q9', 'fortran_order': False, 'shape': (3,)}\n"),
    "a string not closed": _frame("{'descr': '<u8, 'fortran_order': False, 'shape': (3,)}\n"),
    "an escape": _frame("{'descr': '<u\\x38', 'fortran_order': False, 'shape': (3,)}\n"),
    "a call": _frame("{'descr': '<u8', 'fortran_order': bool(0), 'shape': (3,)}\n"),
    "an expression": _frame("{'descr': '<u8', 'fortran_order': False, 'shape': (3 + 4,)}\n"),
    "text after": _frame("{'descr': '<u8', 'fortran_order': False, 'shape': (3,)} import os\n"),
    "nested deeply": _frame("{'descr': '<u8', 'fortran_order': False, 'shape': " + "(" * 5000 + ")" * 5000 + "}"),
    "a number too long": _frame("{'descr': '<u8', 'fortran_order': False, 'shape': (" + "9" * 5000 + ",)}\n"),
    "a Python 2 long": _frame("{'descr': '<u8', 'fortran_order': False, 'shape': (3L,)}\n"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_headers_are_one_line(case):
    with pytest.raises(npy.NpyError) as e:
        npy.read_header(io.BytesIO(BAD[case]))
    msg = str(e.value)
    assert msg and "\n" not in msg and len(msg) < 300, msg


def _artifact(tmp_path):
    with ArtifactWriter(tmp_path / "art", "gtmkit-test", 1) as w:
        w.add_array("a", np.arange(12, dtype=np.uint64))
        w.commit({})
    vdir = (tmp_path / "art" / (tmp_path / "art" / "CURRENT").read_text().strip())
    return tmp_path / "art", vdir


@pytest.mark.parametrize("case", ["not a .npy file", "version 9.9", "a structured dtype", "an object dtype",
                                  "not a dict", "a call", "shape negative", "header longer than the file"])
def test_an_artifact_member_with_a_bad_header_is_one_line_naming_it(tmp_path, case):
    out, vdir = _artifact(tmp_path)
    size = (vdir / "a.npy").stat().st_size
    assert len(BAD[case]) <= size
    (vdir / "a.npy").write_bytes(BAD[case].ljust(size, b" "))  # the size the manifest records
    with pytest.raises(ArtifactError) as e:
        open_artifact(out, "gtmkit-test", [1], verify=False)
    msg = str(e.value)
    assert "\n" not in msg and "a.npy: unreadable .npy header (" in msg, msg


def test_data_shorter_than_the_header_says_is_refused(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.arange(10, dtype=np.int64))
    path.write_bytes(path.read_bytes()[:-8])
    for mode in (None, "r", "c"):
        with pytest.raises(npy.NpyError, match="header says 80"):
            npy.load(path, mode)


def test_the_version_3_header_is_utf8(tmp_path):
    text = "{'descr': '<U2', 'fortran_order': False, 'shape': (1,), }\n"
    data = _frame(text, (3, 0)) + np.array(["é"], "<U2").tobytes()
    h = npy.read_header(io.BytesIO(data))
    assert h.version == (3, 0) and h.dtype == np.dtype("<U2") and h.shape == (1,)
