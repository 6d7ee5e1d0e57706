"""A sharded build's first phase: one task a catalog file reads and checks its rows, orders them by their first
two SID tokens and keeps them in the staging area, so that a shard reads one run of rows of every file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import njit

from ..._arrays import offsets_from_lengths
from ...inputs.catalog import open_catalog, read_catalog
from ...artifact.npy import load as load_npy
from ...artifact.writes import save_npy
from ...sharding.tasks import publish, task_dir

ARRAYS = ("ad_ids", "sids", "rows")


def piece_dir(stage, i: int) -> Path:
    return Path(stage) / f"file-{i:05d}"


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


def split_file(source: str, files: list, i: int, schema, stage: str, partition_types=None) -> dict:
    """Reads file i of the input (errors name it and its row; its folders' columns typed as the whole input's,
    partition_types; repeated ids are checked over all files by the assembler), writes its rows ordered by first,
    then second token (stable) to piece_dir(stage, i). Returns the rows, the rows a first token [V], and per
    attribute the file's dictionary (its strings sorted: what the global dictionaries are merged from)."""
    if not open_catalog(source, schema, [files[i]], partition_types).num_rows:  # an empty part adds nothing
        return _empty_piece(stage, i, schema)
    cat = read_catalog(source, schema, files=[files[i]], unique=False, partition_types=partition_types)
    first = cat.sids[:, 0]
    counts = np.bincount(first, minlength=schema.vocab).astype(np.int64)
    # by first, then second token: a shard that splits a hot first token reads one run of rows too
    order = np.lexsort((cat.sids[:, 1], first)) if cat.sids.shape[1] > 1 else np.argsort(first, kind="stable")
    out = task_dir(piece_dir(stage, i))
    save_npy(out / "token_offsets.npy", offsets_from_lengths(counts))
    for name, arr in zip(ARRAYS, (cat.ad_ids[order], cat.sids[order], order.astype(np.int64))):
        save_npy(out / f"{name}.npy", arr)
    for j, (al, ex) in enumerate(zip(cat.allowed, cat.excluded)):
        for kind, lists in (("allowed", al), ("excluded", ex)):
            off, codes = gather_lists(lists.offsets, lists.codes, order)
            save_npy(out / f"{kind}{j}_offsets.npy", off)
            save_npy(out / f"{kind}{j}_codes.npy", codes)
    publish(out, piece_dir(stage, i))
    return {"rows": len(order), "tokens": counts, "dictionaries": [a.dictionary for a in cat.allowed]}


def position(piece: Path, token_offsets: np.ndarray, key: int, vocab: int) -> int:
    """The piece's first row whose (first, second) tokens, as first * vocab + second, are >= key."""
    f, sec = divmod(int(key), vocab)
    if f >= vocab:
        return int(token_offsets[vocab])
    base = int(token_offsets[f])
    if sec == 0:
        return base
    seconds = load_npy(piece / "sids.npy", "r")[base:int(token_offsets[f + 1]), 1]
    return base + int(np.searchsorted(seconds, sec))


def second_token_rows(stage, n_files: int, tokens: list, vocab: int) -> dict:
    """{first token: rows by second token [V]} of these first tokens, over every file's piece."""
    out = {f: np.zeros(vocab, np.int64) for f in tokens}
    for i in range(n_files):
        d = piece_dir(stage, i)
        to = load_npy(d / "token_offsets.npy")
        sids = load_npy(d / "sids.npy", "r")
        for f in tokens:
            out[f] += np.bincount(sids[int(to[f]):int(to[f + 1]), 1], minlength=vocab)
    return out


def _empty_piece(stage, i: int, schema) -> dict:
    out = task_dir(piece_dir(stage, i))
    save_npy(out / "token_offsets.npy", np.zeros(schema.vocab + 1, np.int64))
    save_npy(out / "ad_ids.npy", np.zeros(0, np.int64))
    save_npy(out / "sids.npy", np.zeros((0, schema.sid_length), np.int32))
    save_npy(out / "rows.npy", np.zeros(0, np.int64))
    n_attrs = len(schema.bitmask) + len(schema.bloom)
    for j in range(n_attrs):
        for kind in ("allowed", "excluded"):
            save_npy(out / f"{kind}{j}_offsets.npy", np.zeros(1, np.int64))
            save_npy(out / f"{kind}{j}_codes.npy", np.zeros(0, np.int32))
    publish(out, piece_dir(stage, i))
    return {"rows": 0, "tokens": np.zeros(schema.vocab, np.int64), "dictionaries": [[] for _ in range(n_attrs)]}
