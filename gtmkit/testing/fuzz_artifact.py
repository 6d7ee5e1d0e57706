"""Fuzz kind "artifact": mutated copies of the fixture index (fixed and jagged layouts) and trie.

Mutations: byte flips and truncations (checksums left as they are); array and table value edits with
the member's sha256 (and a manifest digest, when the format has one) recomputed; manifest field edits.
Property: load(verify=True) refuses with one line, or the loaded artifact answers the fixed workload
exactly like the untouched one. Where the edit is checksummed like the writer would (value edits,
"deep" manifest edits) a different answer is allowed, provided the kernels still agree with the
plain-Python references on the edited arrays."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..artifact.container import MANIFEST, file_sha256
from ..artifact.layout import POINTER, current
from .fuzz_core import OK_CHANGED, OK_SAME, REFUSED, WRONG, Wrong, after_load, classify, same
from .fuzz_fixtures import check_kernels, index_answers, load_fixture, trie_answers
from .fuzz_manifest import digest_key, write_manifest

ODD_NUMBERS = [0, -1, 1, 2**31 - 1, 2**31, 2**63, 10**30, 1.5, "7", None, True, [3]]


def _flip(rng, art: Path, man: dict) -> str:
    files = [MANIFEST] + [e["file"] for e in man["files"].values()]
    pointer = art.parent / POINTER
    if pointer.is_file() and rng.random() < 0.1:  # the version pointer is a member of the trust boundary too
        f = pointer
    else:
        f = art / (MANIFEST if rng.random() < 0.3 else str(rng.choice(files)))
    data = bytearray(f.read_bytes())
    if rng.random() < 0.6 and data:
        for p in rng.integers(0, len(data), size=int(rng.integers(1, 4))):
            data[int(p)] ^= int(rng.integers(1, 256))
        what = f"byte flips in {f.name}"
    elif rng.random() < 0.7:
        data = data[:int(rng.integers(0, max(len(data), 1)))]
        what = f"{f.name} truncated to {len(data)} bytes"
    else:
        data += bytes(rng.integers(0, 256, size=int(rng.integers(1, 9)), dtype=np.uint8))
        what = f"bytes appended to {f.name}"
    f.write_bytes(bytes(data))
    return what


def _edit_values(rng, a: np.ndarray) -> str:
    flat = a.reshape(-1)
    if flat.size == 0:
        return "empty array left as is"
    info = np.iinfo(a.dtype) if a.dtype.kind in "iu" else None
    pos = rng.integers(0, flat.size, size=int(rng.integers(1, 4)))
    choice = int(rng.integers(9))
    if choice == 0 and flat.size > 1:
        i, j = rng.choice(flat.size, size=2, replace=False)
        flat[i], flat[j] = flat[j].copy(), flat[i].copy()
        return f"swapped [{i}] and [{j}]"
    cands = [0, 1, flat.size, flat.size + 1, int(flat.max()) + 1, int(flat.max()) * 2 + 1, 65535, 2**31 - 1]
    if info is not None and info.min < 0:
        cands += [-1, -2, int(info.min)]
    v = cands[int(rng.integers(len(cands)))] if choice < 7 else None
    for p in pos:
        if v is None:  # nudge the present value, or flip one bit of it
            old = int(flat[p])
            new = old + int(rng.choice([-1, 1])) if choice == 7 else old ^ (1 << int(rng.integers(8 * a.itemsize)))
        else:
            new = v
        flat[p] = new if info is None else min(max(new, int(info.min)), int(info.max))
    return f"positions {pos.tolist()} set to {v if v is not None else 'nudged values'}"


def _value(rng, art: Path, man: dict) -> str:
    name = str(rng.choice(sorted(man["files"])))
    e = man["files"][name]
    f = art / e["file"]
    if e["kind"] == "table":
        t = pq.read_table(f)
        vals = t.column("value").to_pylist()
        op = int(rng.integers(3))
        if op == 0 and len(vals) > 1:
            i, j = rng.choice(len(vals), size=2, replace=False)
            vals[i], vals[j] = vals[j], vals[i]
        elif op == 1 and vals:
            vals.pop(int(rng.integers(len(vals))))
        else:
            vals.append("XX:new")
        pq.write_table(pa.table({"value": pa.array(vals, pa.string())}), f)
        e["rows"], e["bytes"] = len(vals), f.stat().st_size
        what = f"{name} values edited ({len(vals)} rows)"
    else:
        a = np.load(f, mmap_mode="r+")
        what = f"{name} {_edit_values(rng, a)}"
        a.flush()
        del a
    e["sha256"] = file_sha256(f)
    return what


def _leaves(node, path=()):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(node, list):
        yield path, node
        for i, v in enumerate(node):
            yield from _leaves(v, path + (i,))
    else:
        yield path, node


def _manifest(rng, man: dict) -> str:
    spots = [(p, v) for p, v in _leaves(man) if p and (p[0] != "files" or rng.random() < 0.1)]
    path, v = spots[int(rng.integers(len(spots)))]
    parent = man
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    if isinstance(v, dict) and v and rng.random() < 0.6:
        gone = str(rng.choice(sorted(v)))
        del v[gone]
        return f"manifest {'.'.join(map(str, path))}.{gone} deleted"
    if isinstance(v, list) and len(v) > 1 and rng.random() < 0.7:
        op = int(rng.integers(3))
        new = v[::-1] if op == 0 else v[1:] if op == 1 else v + v[:1]
    elif isinstance(v, bool) or v is None:
        new = [not v, 0, "yes", {}][int(rng.integers(4))]
    elif isinstance(v, (int, float)):
        new = [v + 1, v - 1, v * 2, 0, -1, 2**63, 10**30, str(v), None, float(v) + 0.5, [v]][int(rng.integers(11))]
    elif isinstance(v, str):
        new = ["", "x", 5, None, v + "x", v.upper()][int(rng.integers(6))]
    elif rng.random() < 0.5 and not isinstance(parent, list):
        del parent[key]
        return f"manifest {'.'.join(map(str, path))} deleted"
    else:
        new = ODD_NUMBERS[int(rng.integers(len(ODD_NUMBERS)))]
    parent[key] = new
    return f"manifest {'.'.join(map(str, path))}: {json.dumps(v)[:40]} -> {json.dumps(new)[:40]}"


def mutate(rng, ctx, work: Path) -> tuple:
    """Copy a fixture and mutate it. -> (fixture name, copy path, what, checksummed: whether the edit
    was checksummed like the writer would, so a different but well-formed artifact may result)."""
    name = ["fixed", "jagged", "trie"][int(rng.integers(3))]
    art = work / name
    shutil.copytree(ctx["paths"][name], art)
    vdir = current(art)  # the version the artifact serves: its members are what a mutation edits
    original = json.loads((vdir / MANIFEST).read_text())
    man = json.loads(json.dumps(original))
    r = rng.random()
    if r < 0.3:
        return name, art, _flip(rng, vdir, man), False
    if r < 0.65:
        what = _value(rng, vdir, man)
        write_manifest(vdir, man, original, True)
        return name, art, what, True
    deep = rng.random() < 0.5
    what = _manifest(rng, man)
    write_manifest(vdir, man, original, deep)
    return name, art, what + (" (manifest digest recomputed)" if deep and digest_key(original) else ""), \
        deep and digest_key(original) is not None


def judge(rng, ctx, name: str, art: Path, checksummed: bool) -> str:
    """Load the mutated artifact and hold it to the property (see the module docstring)."""
    try:
        loaded = load_fixture(ctx, name, art)
    except Exception as exc:  # noqa: BLE001
        outcome, detail = classify(exc)
        if outcome == REFUSED:
            return REFUSED
        raise
    try:
        got = trie_answers(loaded, ctx) if name == "trie" else index_answers(loaded, ctx)
        if name != "trie":
            check_kernels(loaded, [loaded.encode_request(u) for u in ctx["users"]], rng)
    except Wrong:
        raise
    except Exception as exc:  # noqa: BLE001
        outcome, detail = after_load(exc)
        if outcome == REFUSED:
            return REFUSED
        if outcome == WRONG and checksummed:  # a one-line error from a different, well-formed artifact
            return OK_CHANGED
        if outcome == WRONG:
            raise Wrong(detail) from None
        raise
    try:
        same(name, got, ctx["answers"][name])
    except Wrong:
        if checksummed:
            return OK_CHANGED
        raise
    return OK_SAME


def case(rng, ctx) -> str:
    name, art, what, checksummed = mutate(rng, ctx, Path(ctx["work"]))
    ctx["note"] = f"{name}: {what}"
    return judge(rng, ctx, name, art, checksummed)
