"""Sharded succinct-trie build (docs/design.md §6): the GTM index's sharded build applied to keys. One task a
Parquet file checks its keys and orders them by their first two tokens; one task a range of those prefixes
sorts its keys and lays out its nodes depth by depth; the driver joins the depths (BFS order is depth-major,
then key order, so shard pieces follow each other) and makes the LOUDS arrays. The arrays are those of
SuccinctTrie.build over all the keys."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from .._arrays import offsets_from_lengths
from ..errors import GtmkitError
from ..artifact.container import ArtifactWriter
from ..artifact.npy import load as load_npy
from ..artifact.writes import save_npy
from ..progress import Progress
from ..sharding.plan import shard_bounds
from ..sharding.tasks import publish, task_dir
from .build import key_levels, levels_arrays
from ..artifact.trie_format import FORMAT_NAME, FORMAT_VERSION, write_trie
from ..inputs.keys import key_arrays, key_error_at, read_key_column

KEY_SHIFT = 32  # a key's prefix code: first token << 32 | (second token + 1, or 0 for a one-token key)
SHARD_BYTES_PER_KEY = 200  # a whole build's peak is ~170 bytes a key (10M keys: 1.58 GiB)


def _prefix_codes(tokens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    first = tokens[offsets[:-1]].astype(np.uint64)
    two = np.diff(offsets) > 1
    second = np.zeros(len(first), np.uint64)
    second[two] = tokens[offsets[:-1][two] + 1].astype(np.uint64) + np.uint64(1)
    return (first << np.uint64(KEY_SHIFT)) | second


def split_keys(source: str, files: list, i: int, column: str, stage: str) -> dict:
    """File i's keys, checked (errors name the file and row), ordered by prefix code (stable) into
    stage/file-i: tokens, lengths (the narrowest unsigned type: a key set's staging is mostly its tokens),
    codes. Returns its distinct first tokens and their key counts."""
    col, src = read_key_column(source, column, files=[files[i]])
    if len(col) == 0:  # an empty part adds nothing
        tokens, offsets = np.zeros(0, np.int32), np.zeros(1, np.int64)
    else:
        try:
            tokens, offsets = key_arrays(col)
        except GtmkitError as exc:
            raise key_error_at(exc, src, column) from None
    codes = _prefix_codes(tokens, offsets)
    order = np.argsort(codes, kind="stable")
    lengths = np.diff(offsets)[order]
    new_off = offsets_from_lengths(lengths)
    idx = np.repeat(offsets[:-1][order] - new_off[:-1], lengths) + np.arange(int(new_off[-1]))
    out = task_dir(Path(stage) / f"file-{i:05d}")
    save_npy(out / "tokens.npy", tokens[idx])
    save_npy(out / "lengths.npy", lengths.astype(np.min_scalar_type(max(int(lengths.max(initial=0)), 1))))
    save_npy(out / "codes.npy", codes[order])
    publish(out, Path(stage) / f"file-{i:05d}")
    firsts, counts = np.unique(codes >> np.uint64(KEY_SHIFT), return_counts=True)
    return {"keys": len(order), "firsts": firsts, "counts": counts}


def plan_bounds(stage, split: list, shards: int) -> list:
    """Prefix-code bounds of at most `shards` ranges with about equal keys: between first tokens, and between
    second tokens inside a first token holding more than a share."""
    firsts = np.concatenate([r["firsts"] for r in split])
    counts = np.concatenate([r["counts"] for r in split])
    uniq, inv = np.unique(firsts, return_inverse=True)
    per_first = np.bincount(inv, weights=counts).astype(np.int64)
    share = per_first.sum() / max(shards, 1)
    cells, rows = [], []
    for f, n in zip(uniq, per_first):
        if n > share and shards > 1:
            lo, hi = int(f) << KEY_SHIFT, (int(f) + 1) << KEY_SHIFT
            parts = []
            for i in range(len(split)):
                codes = load_npy(Path(stage) / f"file-{i:05d}" / "codes.npy", "r")
                a, b = np.searchsorted(codes, [lo, hi])
                parts.append(np.asarray(codes[a:b]))
            c, k = np.unique(np.concatenate(parts), return_counts=True)
            cells.extend(int(x) for x in c)
            rows.extend(k)
        else:
            cells.append(int(f) << KEY_SHIFT)
            rows.append(n)
    cut = shard_bounds(np.asarray(rows, np.int64), shards)
    return [cells[c] for c in cut[:-1]] + [1 << 64]


def build_key_shard(stage: str, s: int, lo: int, hi: int, n_files: int) -> dict:
    """Shard s (prefix codes lo..hi-1): its keys from every file, its nodes depth by depth into stage/shard-s."""
    toks, lens = [], []
    for i in range(n_files):
        d = Path(stage) / f"file-{i:05d}"
        codes = load_npy(d / "codes.npy", "r")
        a, b = (int(x) for x in np.searchsorted(codes, np.array([lo, min(hi, (1 << 64) - 1)], np.uint64)))
        if hi >= 1 << 64:
            b = len(codes)
        if a == b:
            continue
        lengths = load_npy(d / "lengths.npy", "r")
        start = int(lengths[:a].sum(dtype=np.int64))
        lens.append(np.asarray(lengths[a:b], np.int64))
        toks.append(load_npy(d / "tokens.npy", "r")[start:start + int(lens[-1].sum())])
    offsets = offsets_from_lengths(np.concatenate(lens))
    labels, terminal, degree = key_levels(np.concatenate(toks).astype(np.int32, copy=False), offsets)
    out = task_dir(Path(stage) / f"shard-{s:05d}")
    for d in range(len(degree)):
        save_npy(out / f"labels{d}.npy", labels[d])
        save_npy(out / f"terminal{d}.npy", terminal[d])
        g = degree[d]  # most degrees are 0 or small: the narrowest type that holds them all
        save_npy(out / f"degree{d}.npy", g.astype(np.min_scalar_type(max(int(g.max(initial=0)), 1))))
    publish(out, Path(stage) / f"shard-{s:05d}")
    return {"depths": len(degree), "first": int(labels[1][0]), "last": int(labels[1][-1]),
            "max_label": max(int(x.max()) for x in labels[1:] if len(x))}


class _Stored:
    """A shard's piece on disk: its length known, read whole when called, so no mapping of it stays open (the
    assembler's resident memory is then its bit arrays and one piece)."""

    def __init__(self, path: Path):
        self.path = path
        self.n = load_npy(path, "r").shape[0]

    def __len__(self) -> int:
        return self.n

    def __call__(self) -> np.ndarray:
        return load_npy(self.path)


def join_levels(stage, metas: list) -> tuple:
    """The shards' depths joined, as levels_arrays takes them: (labels, terminal, degree), each a list by depth
    of pieces in BFS order (depth 1 joined here, deeper depths the shards' files, read when laid out). A depth-1
    node two shards share (a first token split between them) is one node: its degrees added, its terminal flags
    or'ed."""
    D = max(m["depths"] for m in metas)
    path = lambda s, name: Path(stage) / f"shard-{s:05d}" / f"{name}.npy"  # noqa: E731
    shared = [s > 0 and m["first"] == metas[s - 1]["last"] for s, m in enumerate(metas)]
    ls, ts, gs = [], [], []
    for s in range(len(metas)):
        lab, ter, deg = (load_npy(path(s, f"{name}1")) for name in ("labels", "terminal", "degree"))
        deg = deg.astype(np.int32)  # a shared node's degrees are added: room for the sum
        if shared[s]:  # the node's first piece: the last shard before with depth-1 nodes left
            k = max(i for i, x in enumerate(ts) if len(x))
            ts[k][-1] |= ter[0]
            gs[k][-1] += deg[0]
            lab, ter, deg = lab[1:], ter[1:], deg[1:]
        ls.append(lab)
        ts.append(ter)
        gs.append(deg)
    labels = [[np.zeros(0, np.int32)], [np.concatenate(ls)]]
    terminal = [[np.zeros(1, np.bool_)], [np.concatenate(ts)]]
    degree = [[np.array([len(labels[1][0])], np.int32)], [np.concatenate(gs)]]
    for d in range(2, D):
        have = [s for s, m in enumerate(metas) if d < m["depths"]]
        labels.append([_Stored(path(s, f"labels{d}")) for s in have])
        terminal.append([_Stored(path(s, f"terminal{d}")) for s in have])
        degree.append([_Stored(path(s, f"degree{d}")) for s in have])
    return labels, terminal, degree


def build_sharded_trie(source, out_dir, column: str, shards, run, memory_limit, progress: Progress,
                       overwrite: bool):
    """SuccinctTrie artifact of the keys at `source`, built in shards by `run` (shards.run's runners)."""
    from ..inputs.dataset import ParquetInput
    from ..sharding.plan import shard_count

    src = ParquetInput(source, GtmkitError, "Parquet file")
    if column not in src.schema.names:
        raise GtmkitError(f"{source}: no column {column!r} (columns: {', '.join(src.schema.names)})")
    files = [str(f) for f in src.files]
    with ArtifactWriter(out_dir, FORMAT_NAME, FORMAT_VERSION, overwrite=overwrite) as w:
        stage = w.staging / "shards"
        stage.mkdir()
        try:
            where, paths = run.paths(source, files)  # resolved here: a worker may run in another folder
            split = run.map(split_keys, [(where, paths, i, column, str(stage)) for i in range(len(files))],
                            progress, "split")
            total = sum(r["keys"] for r in split)
            if total == 0:
                raise GtmkitError(f"{source}: column {column!r}: no keys")  # as the single-process build says it
            n = shards or shard_count(total, run.workers, memory_limit or run.worker_memory(), SHARD_BYTES_PER_KEY)
            bounds = plan_bounds(stage, split, n)
            metas = run.map(build_key_shard, [(str(stage), s, bounds[s], bounds[s + 1], len(files))
                                              for s in range(len(bounds) - 1)], progress, "shards")
            for i in range(len(files)):  # the split keys are in the shards now: free their disk
                shutil.rmtree(stage / f"file-{i:05d}")
            labels, terminal, degree = join_levels(stage, metas)
            built = levels_arrays(labels, terminal, degree, progress,  # label_low's width and length: its label pass
                                  label_low=lambda dtype, count: w.stream_array("label_low", dtype, count))
            del labels, terminal, degree
            shutil.rmtree(stage)
            write_trie(w, built, {"mode": "sharded", "shards": len(metas), "workers": run.workers,
                                  "scheduler": run.address, "files": len(files)})
        except BaseException:
            run.close()
            shutil.rmtree(stage, ignore_errors=True)
            raise
