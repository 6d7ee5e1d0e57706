"""A sharded build's first phase: one task a catalog file reads and checks its rows and orders them by their first
two SID tokens, so that a shard takes one run of rows of every file's piece (cut: where the piece lies)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..._arrays import offsets_from_lengths
from ...inputs.catalog import open_catalog, read_catalog
from ...sharding.pieces import InMemory, Writer

ARRAYS = ("ad_ids", "sids", "rows")


@njit(cache=True, nogil=True)
def _gather(off, codes, order, new_off, out):
    """Lists order[0], order[1], ... of a CSR list column, each list's codes in their order."""
    for i in range(order.shape[0]):
        a, b = off[order[i]], off[order[i] + 1]
        new_off[i + 1] = new_off[i] + (b - a)
        out[new_off[i]:new_off[i + 1]] = codes[a:b]


def gather_lists(off: np.ndarray, codes: np.ndarray, order: np.ndarray) -> tuple:
    """(offsets int64 [n+1], codes int32) of lists order[i] of (off, codes)."""
    lengths = off[1:] - off[:-1]
    new_off = np.zeros(len(order) + 1, np.int64)
    out = np.empty(int(lengths[order].sum()), np.int32)
    _gather(off, codes, order, new_off, out)
    return new_off, out


def split_file(source: str, files: list, i: int, schema, staging: str | None, partition_types=None) -> dict:
    """Reads file i of the input (errors name it and its row; its folders' columns typed as the whole input's,
    partition_types; repeated ids are checked over all files by the assembler) and orders its rows by first, then
    second token (stable). -> {"meta": its rows, the rows a first token [V], per attribute the file's dictionary
    (its strings sorted: what the global dictionaries are merged from) and its piece's bytes; "piece": its arrays,
    returned (staging None) or kept in staging/file-i}."""
    out = Writer(staging, f"file-{i:05d}")
    n_attrs = len(schema.bitmask) + len(schema.bloom)
    if not open_catalog(source, schema, [files[i]], partition_types).num_rows:  # an empty part adds nothing
        _empty_piece(out, schema)
        meta = {"rows": 0, "tokens": np.zeros(schema.vocab, np.int64), "dictionaries": [[] for _ in range(n_attrs)],
                "bytes": out.nbytes}
        return {"meta": meta, "piece": out.done()}
    cat = read_catalog(source, schema, files=[files[i]], unique=False, partition_types=partition_types)
    first = cat.sids[:, 0]
    counts = np.bincount(first, minlength=schema.vocab).astype(np.int64)
    # by first, then second token: a shard that splits a hot first token reads one run of rows too
    order = np.lexsort((cat.sids[:, 1], first)) if cat.sids.shape[1] > 1 else np.argsort(first, kind="stable")
    out.save("token_offsets", offsets_from_lengths(counts))
    for name, arr in zip(ARRAYS, (cat.ad_ids[order], cat.sids[order], order.astype(np.int64))):
        out.save(name, arr)
    for j, (al, ex) in enumerate(zip(cat.allowed, cat.excluded)):
        for kind, lists in (("allowed", al), ("excluded", ex)):
            off, codes = gather_lists(lists.offsets, lists.codes, order)
            out.save(f"{kind}{j}_offsets", off)
            out.save(f"{kind}{j}_codes", codes)
    meta = {"rows": len(order), "tokens": counts, "dictionaries": [a.dictionary for a in cat.allowed],
            "bytes": out.nbytes}
    return {"meta": meta, "piece": out.done()}


def meta_of(result: dict) -> dict:
    """Task: what the driver needs of a task's result (its piece stays where it is)."""
    return result["meta"]


def position(piece, token_offsets: np.ndarray, key: int, vocab: int) -> int:
    """The piece's first row whose (first, second) tokens, as first * vocab + second, are >= key."""
    f, sec = divmod(int(key), vocab)
    if f >= vocab:
        return int(token_offsets[vocab])
    base = int(token_offsets[f])
    if sec == 0:
        return base
    seconds = np.asarray(piece.rows("sids", base, int(token_offsets[f + 1])))[:, 1]
    return base + int(np.searchsorted(seconds, sec))


def second_rows(result: dict, tokens: list, vocab: int) -> dict:
    """Task: {first token: the piece's rows by second token [V]} of these first tokens."""
    piece = result["piece"]
    to = np.asarray(piece.get("token_offsets"))
    return {f: np.bincount(np.asarray(piece.rows("sids", int(to[f]), int(to[f + 1])))[:, 1], minlength=vocab)
            for f in tokens}


class Range:
    """Rows of keys lo..hi-1 of a piece kept in staging: read by the shard task that takes them."""

    def __init__(self, piece, lo: int, hi: int):
        self.piece, self.lo, self.hi = piece, lo, hi


def cut(result: dict, lo: int, hi: int, vocab: int, n_attrs: int):
    """Task: the piece's rows of keys lo..hi-1, for one shard: a copy of them from a piece in memory (run where it
    lies, so only these rows move to the shard's worker; a copy, not views, so that the piece is freed once its cuts
    are made and each cut once its shard is built), or a Range of a staged one (read by the shard's task)."""
    piece = result["piece"]
    if isinstance(piece, InMemory):
        return InMemory({name: np.array(x) for name, x in _slice(piece, lo, hi, vocab, n_attrs).items()})
    return Range(piece, lo, hi)


def part_rows(part, vocab: int, n_attrs: int) -> dict:
    """A cut's arrays (a Range's read from its piece now)."""
    if isinstance(part, Range):
        return _slice(part.piece, part.lo, part.hi, vocab, n_attrs)
    return part.arrays


def _slice(piece, lo: int, hi: int, vocab: int, n_attrs: int) -> dict:
    """{array name: its rows of keys lo..hi-1} (list offsets as stored, not rebased; their codes' run)."""
    to = np.asarray(piece.get("token_offsets"))
    a, b = (position(piece, to, key, vocab) for key in (lo, hi))
    out = {name: piece.rows(name, a, b) for name in ARRAYS}
    for j in range(n_attrs):
        for kind in ("allowed", "excluded"):
            off = np.asarray(piece.rows(f"{kind}{j}_offsets", a, b + 1))
            out[f"{kind}{j}_offsets"] = off
            out[f"{kind}{j}_codes"] = piece.rows(f"{kind}{j}_codes", int(off[0]), int(off[-1]))
    return out


def _empty_piece(out: Writer, schema) -> None:
    out.save("token_offsets", np.zeros(schema.vocab + 1, np.int64))
    out.save("ad_ids", np.zeros(0, np.int64))
    out.save("sids", np.zeros((0, schema.sid_length), np.int32))
    out.save("rows", np.zeros(0, np.int64))
    n_attrs = len(schema.bitmask) + len(schema.bloom)
    for j in range(n_attrs):
        for kind in ("allowed", "excluded"):
            out.save(f"{kind}{j}_offsets", np.zeros(1, np.int64))
            out.save(f"{kind}{j}_codes", np.zeros(0, np.int32))
