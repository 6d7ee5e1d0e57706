"""A shard rebuild (docs/design.md §9): an update whose ads include SIDs the trie lacks, written as the artifact's new
version without a full build. Changes on SIDs the trie holds are applied in place (apply.py); the depth-1 subtrees
(first tokens) that the other ads fall in, and those that edited ones among them leave, are built again from the
index's own rows plus those ads, as a sharded build's tasks build shards (in this process or on Dask workers); every
other subtree's arrays are cut from the index as they are (subtrees.py), and the sharded build's assembler joins
both into the new version's arrays."""

from __future__ import annotations

import shutil

import numpy as np

from ..._arrays import read_only
from ...artifact import index_format as fmt
from ...artifact.container import ArtifactWriter
from ...artifact.index_checks import PAUSED
from ...inputs.schema import parse_schema
from ...artifact.staging import Switch
from ...progress import Progress, report
from ...sharding.pieces import Writer
from ..shards.assemble import assemble
from ..write import Timer, write_index
from .apply import find_ids, update_index
from .changes import Changes
from .subtree_task import build_subtrees, row_layout, write_inputs
from .subtrees import RebuildPieces, Run, subtree_bounds
from .write import base_version, write_changes


def rebuild_shards(index, changes, client=None, workers: int = None, progress: Progress = None, paused=None,
                   no_worker_timeout: float = None, staging=None):
    """Write an index with its changed ads as its artifact's new version, ads on SIDs its trie lacks included: the
    first-token subtrees those SIDs fall in (and those that edited ads moving to them leave) are built again from
    the index's arrays plus the changes; every other subtree is kept as it is, with changes on its SIDs applied in
    place as `Matcher.update_ads` applies them.

    index: an Index or an index directory; changes: as `Matcher.update_ads` takes them (a Parquet path or a
    pyarrow Table in the catalog's schema); client / workers: build the subtrees on a Dask cluster (a Client, or
    a LocalCluster of that many processes), else here; paused: the ad ids the new version serves paused (default:
    the index's); no_worker_timeout: seconds a rebuild on Dask waits while the cluster has no live worker (default
    300); staging: a local path or URL every worker reaches where the tasks' inputs and pieces are kept instead of
    moving through Dask (build_index's staging). Processes that loaded the index keep serving it until they load the new version.
    -> (the new version, loaded; UpdateReport with `rebuilt` set). UpdateError (nothing written) when the new ads
    applied in place would pass the index's slack; VersionChanged (nothing written) when another writer replaced
    the version the index was loaded from meanwhile."""
    from ...index import Index, load_index
    from .changes import read_changes
    if not isinstance(index, Index):
        index = load_index(index)
    return rebuild_changes(index, read_changes(index, changes, progress), client, workers, progress, paused,
                           no_worker_timeout, staging)


def rebuild_changes(index, ch: Changes, client=None, workers: int = None, progress: Progress = None, paused=None,
                    no_worker_timeout: float = None, staging=None):
    """rebuild_shards with the changes read (read_changes)."""
    from ...sharding.runner import count_arg, runner
    workers = None if workers is None else count_arg(workers, "workers", 1)
    if paused is not None:
        check_ids(index, ch, paused)
    if not (ch.leaves < 0).any():  # every SID is in the trie: in place, nothing to rebuild
        from ...index import load_index
        keep = index.paused_ad_ids if paused is None else paused
        with Switch(index.path, base_version(index)) as sw:
            _, rep, written = write_changes(index, ch, np.unique(np.asarray(keep, np.int64)), progress)
        if not written:
            return index, rep
        new = load_index(index.path, verify=False)
        rep.version = sw.published  # the version written, as a rebuild reports it
        return new, rep
    run = runner(client, workers, no_worker_timeout=no_worker_timeout, staging=staging)
    try:
        return _rebuild(index, ch, run, progress, paused)
    finally:
        run.close()


def check_ids(index, ch: Changes, ids) -> None:
    """RequestError naming the first of `ids` that is neither an ad of the index nor one of the changes'."""
    from ...errors import RequestError
    ids = np.asarray(ids, np.int64)
    _, held = find_ids(read_only(index.ad_ids_sorted, np.int64), ids)
    unknown = ids[~held & ~np.isin(ids, ch.ad_ids)]
    if len(unknown):
        raise RequestError(f"unknown ad id {int(unknown[0])}")


def _rebuild(index, ch: Changes, run, progress, paused):
    from ...index import load_index
    timer = Timer()
    base, rep = update_index(index, ch)  # SIDs the trie holds: in place; the rest is left to the rebuild
    entries = np.flatnonzero(ch.leaves < 0)
    timer.lap("in place")
    schema = parse_schema(base.manifest["schema"])
    rl = row_layout(base)
    strings = [sorted(d, key=d.get) for d in ch.dictionaries]  # by code: the index's, then the changes' new ones
    with Switch(base.path, base_version(index)) as sw, \
            ArtifactWriter(base.path, fmt.FORMAT_NAME, fmt.FORMAT_VERSION, overwrite=True) as w:
        w.expect(index.artifact.nbytes)  # the new version is about the old one's size: what a full disk reports
        stage = w.staging / "subtrees"
        stage.mkdir()
        futures = []
        try:
            at = run.pieces_at(stage)  # None: the inputs and pieces travel with the tasks
            plan = _plan(base, ch, entries, run.workers, run.worker_memory())
            todo = [s for s, x in enumerate(plan["shards"]) if x is None]
            for k, s in enumerate(todo):
                # each input goes out with its task as it is made: this process holds one at a time
                inputs = write_inputs(Writer(at, f"input-{s:05d}"), base, ch, *plan["inputs"][k], strings)
                futures.append(run.later(build_subtrees, inputs, s, schema, rl, *plan["splits"][k], at,
                                         phase="subtrees"))
                del inputs
            timer.lap("cut")
            metas = [None if x is None else x.meta(rl.slices()) for x in plan["shards"]]
            landed = [None] * len(plan["shards"])
            # each task's piece lands on this machine's disk as it ends, a block of rows at a time
            built = run.collect(futures, progress, "subtrees", land=lambda k: stage / f"shard-{todo[k]:05d}")
            futures = []
            for s, (meta, piece) in zip(todo, built):
                metas[s], landed[s] = meta, piece
            timer.lap("subtrees")
            nbm = len(schema.bitmask)
            parts = assemble(stage, metas, schema, rl, [None] * nbm + strings, None, w,
                             RebuildPieces(landed, base, plan["shards"]))
            shutil.rmtree(stage)  # the version holds only its own files when committed
            run.clear_pieces()
            timer.lap("assemble")
        except BaseException:
            run.release(futures)
            run.close()  # workers stop before the files they write are removed
            run.clear_pieces()
            shutil.rmtree(stage, ignore_errors=True)
            raise
        keep = np.unique(np.asarray(base.paused_ad_ids if paused is None else paused, np.int64))
        if len(keep):
            w.add_array(PAUSED, keep)
        u = fmt.update_state(index.manifest)
        updates = {**u, "added": u["added"] + rep.added, "updates": u["updates"] + 1}
        moved = int(plan["moved"])
        lo = parts["trie"].level_offsets
        kept = np.isin(plan["tokens"], np.asarray(parts["trie"].child_tokens[:int(lo[2] - lo[1])]))
        rebuilt = {"from_version": index.version, "subtrees": int(kept.sum()), "dropped": int((~kept).sum()),
                   "of": int(lo[2] - lo[1]),
                   "ads": int(sum(metas[s]["ads"] for s in todo)), "tasks": len(todo), "workers": run.workers}
        write_index(w, base.manifest["source"]["catalog"], schema, base.layout, rl, parts["trie"], parts["matchers"],
                    parts["tables"], parts["level_stats"], parts["ad_level"], parts["ads"], parts["ad_lists"], timer,
                    progress, {**base.manifest.get("build", {}), "rebuilt": rebuilt}, updates=updates)
    new = load_index(base.path, verify=False)
    rep.edited += moved
    rep.added += len(entries) - moved
    rep.new_sids, rep.version, rep.empty_sids, rep.rebuilt = [], sw.published, new.empty_sids, rebuilt
    report(progress, 1, 1, "rebuilt")
    return new, rep


def _plan(index, ch: Changes, entries: np.ndarray, workers: int = 1, worker_memory: int = None) -> dict:
    """Which depth-1 subtrees are rebuilt, the shards (runs of subtrees kept or rebuilt, in token order: a kept
    run as its Run, a rebuilt one as None with its first tokens and the index rows it keeps), and how many of
    the entries are edits moving an ad of the index. A run of rebuilt subtrees is cut into tasks of about equal
    ads, at least one a worker and each within a worker's memory; a subtree larger than that (a hot first token) is
    cut between its second tokens, as a sharded build cuts it."""
    L = index.sid_length
    R = subtree_bounds(index)
    first = np.asarray(index.child_tokens)[R[1][:-1] - 1].astype(np.int64)  # each subtree's token, ascending
    pos, moved = find_ids(read_only(index.ad_ids_sorted, np.int64), ch.ad_ids[entries])
    old_rows = np.sort(np.asarray(index.ad_rows_by_id)[pos[moved]].astype(np.int64))
    old_sid = np.searchsorted(np.asarray(index.sid_ad_offsets), old_rows, side="right") - 1
    left = np.searchsorted(R[L], old_sid + index.first_leaf, side="right") - 1  # subtrees those ads leave
    tokens = np.union1d(first[left], ch.sids[entries, 0])
    present = np.union1d(first, tokens)
    rebuilt = np.isin(present, tokens)
    # ads a rebuilt subtree will hold: the index's, less those moving out, plus the entries on its token
    where = np.searchsorted(first, present)
    held = where < len(first)
    held[held] = first[where[held]] == present[held]
    leaf_rows = np.asarray(index.sid_ad_offsets)[R[L] - index.first_leaf]
    ads = np.zeros(len(present), np.int64)
    ads[held] = np.diff(leaf_rows)[where[held]] - np.bincount(left, minlength=len(first))[where[held]]
    ads += np.bincount(np.searchsorted(present, ch.sids[entries, 0]), minlength=len(present))
    cap = max(1, min(int(ads[rebuilt].sum()) // max(1, workers) + 1, _task_ads(workers, worker_memory)))
    shards, inputs, splits = [], [], []
    cuts = np.flatnonzero(np.diff(rebuilt.astype(np.int8))) + 1
    for seg in np.split(np.arange(len(present)), cuts):
        if not rebuilt[seg[0]]:
            shards.append(Run(index, R, int(where[seg[0]]), int(where[seg[-1]]) + 1))
            continue
        for part in _cut(seg, ads, cap):
            toks = present[part]
            have = where[part][held[part]]
            run = Run(index, R, int(have[0]), int(have[-1]) + 1) if len(have) else None
            rows = np.arange(*run.rows) if run else np.zeros(0, np.int64)
            rows = rows[~np.isin(rows, old_rows)]
            mine = entries[np.isin(ch.sids[entries, 0], toks)]
            if len(rows) + len(mine) == 0:  # every ad of these subtrees moved away
                continue
            hot = len(part) == 1 and ads[part[0]] > cap and L > 1
            for r, m, shares_before, shares_after in (_split_hot(index, run, rows, ch.sids, mine, cap) if hot
                                                      else [(rows, mine, False, False)]):
                shards.append(None)
                inputs.append((run, r, m))
                splits.append((shares_before, shares_after))
    return {"shards": shards, "inputs": inputs, "splits": splits, "tokens": tokens, "moved": moved.sum()}


def _split_hot(index, run, rows: np.ndarray, sids: np.ndarray, mine: np.ndarray, cap: int) -> list:
    """One subtree's ads (the index's rows, the entries mine) in tasks of about `cap` ads each, cut between second
    tokens (plan.shard_bounds): per task (rows, entries, shares its depth-1 node with the task before, with the
    one after)."""
    from ...sharding.plan import shard_bounds
    V = index.vocab_size
    second = np.zeros(0, np.int64)
    if run is not None:
        second = run.row_sids(rows)[:, 1].astype(np.int64)
    new = sids[mine, 1].astype(np.int64)
    counts = np.bincount(second, minlength=V) + np.bincount(new, minlength=V)
    bounds = shard_bounds(counts, -(-int(counts.sum()) // cap))
    n = len(bounds) - 1
    return [(rows[(second >= lo) & (second < hi)], mine[(new >= lo) & (new < hi)], i > 0, i < n - 1)
            for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))]


def _task_ads(workers: int, worker_memory: int = None) -> int:
    """The ads one rebuild task may hold: what fits a worker's memory limit as the scheduler reports it, else a
    worker's share of this machine's memory (as a sharded build sizes its shards)."""
    from ..._machine import physical_memory
    from ..shards.plan import SHARD_BYTES_PER_AD
    if worker_memory:
        return max(1, worker_memory // SHARD_BYTES_PER_AD)
    mem = physical_memory()
    return mem // (workers + 1) // SHARD_BYTES_PER_AD if mem else 1 << 62


def _cut(seg: np.ndarray, ads: np.ndarray, cap: int) -> list:
    """seg (consecutive subtrees) in consecutive parts of at most `cap` ads each (a larger subtree alone)."""
    parts, start, acc = [], 0, 0
    for i, n in enumerate(ads[seg]):
        if acc and acc + n > cap:
            parts.append(seg[start:i])
            start, acc = i, 0
        acc += int(n)
    parts.append(seg[start:])
    return parts
