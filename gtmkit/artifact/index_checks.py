"""What load_index accepts: every manifest field cross-checked against the schema and the arrays, and every
invariant the matcher kernels rely on (docs/format.md, "What a reader checks").

index_problems(artifact, full) yields one line per problem, stage by stage; a stage runs only when the
ones before it found nothing, so no check ever indexes with a value an earlier one refused. Stages 1-3
are O(1) in the index size (manifest, dtypes and shapes, offsets' ends, the fixed partition layout);
stage 4 (full=True) reads every array once, vectorised."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np

from ..errors import SchemaError
from . import index_format as fmt
from .array_checks import FieldError, field, increasing_within, int_list, offsets_problem, range_problem
from ..inputs.schema import parse_schema

MAX_VOCAB = 2**31 - 1


PAUSED = "paused_ad_ids"


class Spec(NamedTuple):
    """The manifest fields the checks need, each already type-checked."""
    L: int
    V: int
    S: int
    N: int
    nodes: int
    internal: int
    words: int
    blooms: list  # per Bloom attribute (name, bits, hashes, seed, words)
    jagged: bool
    widths: list
    bases: list
    updated: bool = False  # written by `gtmkit update`: a SID may have lost every ad to an edit


def _layout_words(bl: dict) -> int:
    attrs = field(bl, "attributes", "bitmask_layout", list)
    pos = 0
    for i, a in enumerate(attrs):
        where = f"bitmask_layout.attributes[{i}]"
        field(a, "name", where, str)
        dom = field(a, "domain", where, list)
        if not all(isinstance(s, str) for s in dom) or len(set(dom)) != len(dom):
            raise FieldError(f"'{where}.domain' must hold distinct strings")
        field(a, "offset", where, int, pos, pos)
        field(a, "bits", where, int, len(dom) + 1, len(dom) + 1)
        pos += len(dom) + 1
    field(bl, "n_bits", "bitmask_layout", int, pos, pos)
    words = max(1, -(-pos // 64))
    return field(bl, "words", "bitmask_layout", int, words, words)


def _blooms(man: dict) -> list:
    out = []
    for i, b in enumerate(field(man, "bloom", "", list)):
        where = f"bloom[{i}]"
        name = field(b, "name", where, str)
        bits = field(b, "bits", where, int, 64, 1 << 20)
        if bits % 64:
            raise FieldError(f"'{where}.bits' = {bits} is not a multiple of 64")
        hashes = field(b, "hashes", where, int, 1, 32)
        seed = field(b, "seed", where, int, 0, 2**32 - 1)
        out.append((name, bits, hashes, seed, field(b, "words", where, int, bits // 64, bits // 64)))
    return out


def parse_spec(man: dict) -> Spec:
    c = field(man, "counts", "", dict)
    L = field(c, "sid_length", "counts", int, 1, 64)
    V = field(c, "vocab", "counts", int, 1, MAX_VOCAB)
    S, N = field(c, "sids", "counts", int, 1), field(c, "ads", "counts", int, 1)
    nodes, internal = field(c, "nodes", "counts", int, 2), field(c, "internal_nodes", "counts", int, 1)
    updated = False
    if "updates" in man:
        u = field(man, "updates", "", dict)
        updated = field(u, "updates", "updates", int, 0) > 0
        field(u, "slack_ads", "updates", int, 0)
        field(u, "added", "updates", int, 0)
    if nodes != internal + S or (N < S and not updated):
        raise FieldError(f"counts: {nodes} nodes, {internal} internal, {S} SIDs, {N} ads do not add up "
                         "(nodes = internal + SIDs, ads >= SIDs)")
    words = _layout_words(field(man, "bitmask_layout", "", dict))
    blooms = _blooms(man)
    pl = field(man, "partition_layout", "", dict)
    kind = field(pl, "kind", "partition_layout", str)
    if kind not in ("fixed", "jagged"):
        raise FieldError(f"'partition_layout.kind' = {kind!r}, expected 'fixed' or 'jagged'")
    widths = bases = []
    if kind == "fixed":
        widths = int_list(pl, "level_width", "partition_layout", L + 1, 1)
        bases = int_list(pl, "level_base", "partition_layout", L + 2, 0)
    return Spec(L, V, S, N, nodes, internal, words, blooms, kind == "jagged", widths, bases, updated)


def schema_problems(man: dict, spec: Spec) -> Iterator[str]:
    """The manifest's schema agrees with its layout fields (so an edit of one alone is caught)."""
    try:
        schema = parse_schema(field(man, "schema", "", dict), "schema")
    except (SchemaError, FieldError) as e:
        yield str(e)
        return
    except (TypeError, ValueError, AttributeError) as e:  # the schema parser expects JSON of the right shapes
        yield f"schema: invalid ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        return
    if (schema.sid_length, schema.vocab) != (spec.L, spec.V):
        yield f"schema sid length/vocab {schema.sid_length}/{schema.vocab} differ from counts {spec.L}/{spec.V}"
    attrs = man["bitmask_layout"]["attributes"]
    if [a.name for a in schema.bitmask] != [a["name"] for a in attrs]:
        yield "bitmask_layout.attributes do not name the schema's bitmask attributes in order"
    else:
        for a, la in zip(schema.bitmask, attrs):
            want = list(a.domain) if a.domain is not None else sorted(la["domain"])
            if la["domain"] != want:
                yield f"bitmask_layout: domain of '{a.name}' is not the schema's " + (
                    "domain" if a.domain is not None else "(inferred domains are sorted)")
    if [(a.name, a.bits, a.hashes, a.seed) for a in schema.bloom] != [b[:4] for b in spec.blooms]:
        yield "bloom: names, bits, hashes or seeds differ from the schema's Bloom attributes"
    p = schema.partition
    want_widths = ([1] * (spec.L + 1) if p.mode == "none" else [1, *p.k] if p.mode == "static" else None)
    if (want_widths is None) != spec.jagged or (want_widths is not None and want_widths != spec.widths):
        yield f"partition_layout does not follow the schema's partition (mode {p.mode})"


def _entry(files: dict, name: str, kind: str):
    e = files.get(name)
    return e if isinstance(e, dict) and e.get("kind") == kind else None


def shape_problems(path: Path, files: dict, spec: Spec) -> Iterator[str]:
    """Every array the readers use is present with the documented dtype and a shape matching the counts."""
    nb, L, N = len(spec.blooms), spec.L, spec.N
    e = _entry(files, "part_bitmask_ids", "array")
    P = e["shape"][0] if e is not None and len(e["shape"]) == 1 else None
    if not spec.jagged and P is not None and P != spec.bases[-1]:
        yield (f"{path / 'manifest.json'}: partition_layout.level_base ends at {spec.bases[-1]}, "
               f"part_bitmask_ids holds {P} slots")
    want = {
        "level_offsets": ("<i8", (L + 2,)), "node_offsets": ("<i4", (spec.internal + 1,)),
        "child_tokens": ("<u2" if spec.V <= 1 << 16 else "<i4", (spec.nodes - 1,)),
        "max_degree": ("<i8", (L,)), "part_bitmask_ids": ("<i4", (P,)),
        "bitmask_table": ("<u8", (None, spec.words)),
        "sid_ad_offsets": ("<i8", (spec.S + 1,)), "sid_ad_ids": ("<i8", (N,)), "ad_bitmask_ids": ("<i4", (N,)),
        "ad_ids_sorted": ("<i8", (N,)), "ad_rows_by_id": ("<i4", (N,)),
    }
    if spec.jagged:
        want["part_offsets"] = ("<i8", (spec.nodes + 1,))
    if PAUSED in files:  # optional: the ads `gtmkit update --pause` paused, served paused after a load
        want[PAUSED] = ("<i8", (None,))
    if nb:
        want["part_bloom_ids"] = ("<i4", (P, nb))
    for b, (_, _, _, _, words) in enumerate(spec.blooms):
        want[fmt.bloom_table(b)] = ("<u8", (None, words))
        for off, codes in (fmt.ad_allow(b), fmt.ad_exclude(b)):
            want[off], want[codes] = ("<i8", (N + 1,)), ("<i4", (None,))
    for name, (dtype, shape) in want.items():
        e = _entry(files, name, "array")
        if e is None:
            yield f"{path}: no array {name!r} (the manifest lists no {name}.npy)"
            continue
        got = tuple(e["shape"])
        if e["dtype"] != dtype or len(got) != len(shape) or any(w is not None and g != w for g, w in zip(got, shape)):
            spelled = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
            yield f"{path / e['file']}: is {e['dtype']} {list(got)}, expected {dtype} {spelled}"
    for b in range(nb):
        e = _entry(files, fmt.bloom_dict(b), "table")
        if e is None or type(e.get("rows")) is not int or e["rows"] < 0:
            yield f"{path}: no table {fmt.bloom_dict(b)!r} with a row count"


class _Arrays:
    """Named member arrays, loaded on first use, for the problem messages to name their files."""

    def __init__(self, art):
        self.art, self.path, self.files = art, Path(art.path), art.manifest["files"]

    def __call__(self, name: str) -> np.ndarray:
        return self.art.array(name)

    def where(self, name: str) -> Path:
        return self.path / self.files[name]["file"]


def _say(a: _Arrays, name: str, problem) -> Iterator[str]:
    if problem:
        yield f"{a.where(name)}: {problem}"


def end_problems(a: _Arrays, spec: Spec) -> Iterator[str]:
    """O(L) reads: the level table, the CSR ends and the fixed layout's bases (kernels index with them)."""
    lo = np.asarray(a("level_offsets"), np.int64)
    if lo[0] != 0 or lo[1] != 1 or np.any(np.diff(lo) <= 0) or lo[spec.L] != spec.internal or lo[-1] != spec.nodes:
        yield f"{a.where('level_offsets')}: {lo.tolist()} is not 0, 1, ... strictly increasing to " \
              f"{spec.internal} internal and {spec.nodes} nodes"
        return
    no = a("node_offsets")
    if int(no[0]) != 0 or np.any(np.asarray(no[lo[:-1]], np.int64) + 1 != lo[1:]):
        yield f"{a.where('node_offsets')}: the first child of each level does not start the next level " \
              "(level_offsets)"
    yield from _say(a, "max_degree", range_problem(a("max_degree"), 1, spec.V + 1))
    P = a.files["part_bitmask_ids"]["shape"][0]
    if spec.jagged:
        po = a("part_offsets")
        if int(po[0]) != 0 or int(po[-1]) != P:
            yield f"{a.where('part_offsets')}: runs from {int(po[0])} to {int(po[-1])}, expected 0 to {P}"
    else:
        want = np.concatenate([[0], np.cumsum(np.diff(lo) * np.asarray(spec.widths, np.int64))])
        if want.tolist() != spec.bases:
            yield f"{a.path / 'manifest.json'}: partition_layout.level_base {spec.bases} does not follow " \
                  f"level_width {spec.widths} and the level sizes (expected {want.tolist()})"
    for name in ("sid_ad_offsets", *[n for b in range(len(spec.blooms)) for n in (fmt.ad_allow(b)[0], fmt.ad_exclude(b)[0])]):
        off = a(name)
        total = spec.N if name == "sid_ad_offsets" else a.files[name.replace("offsets", "codes")]["shape"][0]
        if int(off[0]) != 0 or int(off[-1]) != total:
            yield f"{a.where(name)}: runs from {int(off[0])} to {int(off[-1])}, expected 0 to {total}"
    for name in ("bitmask_table", *[fmt.bloom_table(b) for b in range(len(spec.blooms))]):
        if a.files[name]["shape"][0] < 1:
            yield f"{a.where(name)}: has no rows"


def _trie_problems(a: _Arrays, spec: Spec) -> Iterator[str]:
    no = a("node_offsets")
    yield from _say(a, "node_offsets", offsets_problem(no, spec.internal, spec.nodes - 1, min_step=1))
    ct = a("child_tokens")
    yield from _say(a, "child_tokens", range_problem(ct, 0, spec.V) or increasing_within(ct, no))
    lo = np.asarray(a("level_offsets"), np.int64)
    deg = np.diff(np.asarray(no, np.int64))
    got = np.maximum.reduceat(deg, lo[:spec.L]) if len(deg) else np.zeros(0, np.int64)
    md = np.asarray(a("max_degree"))
    if not np.array_equal(got, md):
        d = int(np.flatnonzero(got != md)[0])
        yield f"{a.where('max_degree')}: depth {d} says {int(md[d])}, its nodes have up to {int(got[d])} children"


def _partition_problems(a: _Arrays, spec: Spec) -> Iterator[str]:
    pbm = np.asarray(a("part_bitmask_ids"))
    U = a.files["bitmask_table"]["shape"][0]
    if spec.jagged:
        yield from _say(a, "part_offsets", offsets_problem(a("part_offsets"), spec.nodes, len(pbm), min_step=1))
        p = range_problem(pbm, 0, U)
    else:
        p = range_problem(pbm, -1, U)
        lo = np.asarray(a("level_offsets"), np.int64)
        for d, w in enumerate(spec.widths):  # one reshape per level: node n's slots are one row
            slots = pbm[spec.bases[d]:spec.bases[d + 1]].reshape(-1, w) >= 0
            if p is None and (not slots[:, 0].all() or np.any(~slots[:, :-1] & slots[:, 1:])):
                n = int(lo[d] + np.flatnonzero(~slots[:, 0] | np.any(~slots[:, :-1] & slots[:, 1:], axis=1))[0])
                p = f"node {n}: padding (-1) before a partition or in its first slot"
    yield from _say(a, "part_bitmask_ids", p)
    if spec.blooms:
        pbl, pad = np.asarray(a("part_bloom_ids")), pbm < 0
        for b in range(len(spec.blooms)):
            col = pbl[:, b]
            p = range_problem(col[~pad], 0, a.files[fmt.bloom_table(b)]["shape"][0])
            if p is None and np.any(col[pad] != -1):
                p = f"slot {int(np.flatnonzero(pad)[np.flatnonzero(col[pad] != -1)[0]])} is padding in " \
                    "part_bitmask_ids but not -1 here"
            yield from _say(a, "part_bloom_ids", f"attribute {b}: {p}" if p else None)


def _ad_problems(a: _Arrays, spec: Spec) -> Iterator[str]:
    so = a("sid_ad_offsets")
    p = offsets_problem(so, spec.S, spec.N, min_step=0 if spec.updated else 1)
    yield from _say(a, "sid_ad_offsets", p)
    if p is None:
        yield from _say(a, "sid_ad_ids", increasing_within(a("sid_ad_ids"), so))
    srt = np.asarray(a("ad_ids_sorted"))
    yield from _say(a, "ad_ids_sorted", increasing_within(srt, [0, len(srt)]))
    rows = np.asarray(a("ad_rows_by_id"))
    p = range_problem(rows, 0, spec.N)
    if p is None and not np.array_equal(np.asarray(a("sid_ad_ids"))[rows], srt):
        p = "does not map ad_ids_sorted to the rows of sid_ad_ids holding them"
    yield from _say(a, "ad_rows_by_id", p)
    yield from _say(a, "ad_bitmask_ids", range_problem(a("ad_bitmask_ids"), 0, a.files["bitmask_table"]["shape"][0]))
    if PAUSED in a.files:
        paused = np.asarray(a(PAUSED))
        at = np.minimum(np.searchsorted(srt, paused), max(len(srt) - 1, 0))
        p = increasing_within(paused, [0, len(paused)])
        if p is None and len(paused) and (not len(srt) or np.any(srt[at] != paused)):
            p = f"ad id {int(paused[np.flatnonzero(srt[at] != paused)[0]])} is not an ad of the index"
        yield from _say(a, PAUSED, p)
    for b in range(len(spec.blooms)):
        n_dict = a.files[fmt.bloom_dict(b)]["rows"]
        for off_name, codes_name in (fmt.ad_allow(b), fmt.ad_exclude(b)):
            off, codes = a(off_name), a(codes_name)
            p = offsets_problem(off, spec.N, len(codes))
            yield from _say(a, off_name, p)
            if p is None:
                yield from _say(a, codes_name, range_problem(codes, 0, n_dict) or increasing_within(codes, off))


def _dictionary_problems(a: _Arrays, spec: Spec) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.compute as pc

    for b in range(len(spec.blooms)):
        name = fmt.bloom_dict(b)
        t = a.art.table(name)
        col = t.column("value") if "value" in t.column_names else None
        if col is None or not pa.types.is_string(col.type) or t.num_rows != a.files[name]["rows"]:
            yield f"{a.where(name)}: expected one string column 'value' of {a.files[name]['rows']} rows"
        elif col.null_count or pc.count_distinct(col).as_py() != t.num_rows:
            yield f"{a.where(name)}: values must be distinct and not null"


FULL_CHECKS = (_trie_problems, _partition_problems, _ad_problems, _dictionary_problems)


def index_problems(art, full: bool = True) -> Iterator[str]:
    """One line per problem of an opened gtmkit-index artifact (see the module docstring)."""
    path, man = Path(art.path), art.manifest
    try:
        spec = parse_spec(man)
    except FieldError as e:
        yield f"{path / 'manifest.json'}: {e}"
        return
    stage = [f"{path / 'manifest.json'}: {p}" for p in schema_problems(man, spec)]
    stage += list(shape_problems(path, man["files"], spec))
    yield from stage
    if stage:
        return
    a = _Arrays(art)
    stage = list(end_problems(a, spec))
    yield from stage
    if stage or not full:
        return
    for check in FULL_CHECKS:
        yield from check(a, spec)
