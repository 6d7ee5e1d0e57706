"""An updated index derived from an index and its changed ads (docs/design.md §9), by copy-on-write: the arrays an
update does not touch (the trie, most table rows) are the base index's own; the SID->ad map and the ad index are
rebuilt in one merge (O(ads), no sort of them all); the partition ids are copy-on-write maps of the artifact's
files (or copies) and the tables are copied with room for the rows an update appends.
The base index is left as it was, so calls running on it finish on it."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from ..._arrays import read_only
from ...errors import UpdateError
from ...artifact import index_format as fmt
from ...index import extended_fingerprint
from .changes import Changes
from .merge import gather_lists, gather_rows, merge_id_lookup, merge_plan, shift_offsets
from .unions import grow_unions


@dataclass
class UpdateReport:
    """What an update did: ads applied (edited: already in the index; added: new), the ids of ads whose SID is
    not in the trie (left out: a rebuild adds them), partition slots whose union grew, SIDs without ads, the
    new ads the index can still take, and the version that serves the result."""

    edited: int = 0
    added: int = 0
    unions_grown: int = 0
    slack_left: int = 0
    version: str = ""
    new_sids: list = field(default_factory=list)
    empty_sids: int = 0  # SIDs left without ads by this or an earlier update (CD prunes them)
    rebuilt: dict = None  # a shard rebuild's record (rebuild.py), when ads on new SIDs were added by one

    def as_dict(self) -> dict:
        return {"edited": self.edited, "added": self.added, "unions_grown": self.unions_grown,
                "slack_left": self.slack_left, "version": self.version, "empty_sids": self.empty_sids,
                "ads_on_new_sids": len(self.new_sids),
                "new_sid_ad_ids": [int(x) for x in self.new_sids], "rebuilt": self.rebuilt}


def _grow_table(table, extra: int) -> np.ndarray:
    out = np.empty((table.shape[0] + extra, table.shape[1]), np.uint64)
    out[:table.shape[0]] = table
    return out


def update_index(index, ch: Changes):
    """-> (updated Index, UpdateReport); with nothing to apply, (index, report). UpdateError when the new ads
    would pass the index's slack (nothing changes then)."""
    state = fmt.update_state(index.manifest)
    S, L = index.num_sids, index.sid_length
    report = UpdateReport(new_sids=ch.ad_ids[ch.leaves < 0].tolist())
    a = np.flatnonzero(ch.leaves >= 0)  # the entries applied
    sorted_ids = read_only(index.ad_ids_sorted, np.int64)
    ids, leaves = ch.ad_ids[a], ch.leaves[a]
    pos, exists = find_ids(sorted_ids, ids)
    report.edited, report.added = int(exists.sum()), int((~exists).sum())
    left = state["slack_ads"] - state["added"]
    if report.added > left:
        raise UpdateError(f"{report.added} new ads, but the index takes {left} more before a rebuild (slack "
                          f"{state['slack_ads']}, {state['added']} added since its build): rebuild it")
    report.slack_left = left - report.added
    if len(a) == 0:
        report.version = index.version
        return index, report
    rows_by_id = read_only(index.ad_rows_by_id)
    off = read_only(index.sid_ad_offsets, np.int64)
    sid_ids = read_only(index.sid_ad_ids, np.int64)
    removed = np.sort(rows_by_id[pos[exists]].astype(np.int64))  # an edited ad's row is replaced by its new one
    e_sid = leaves - index.first_leaf
    order = np.lexsort((ids, e_sid))
    src, entry_row, new_of_old = merge_plan(off, sid_ids, removed, e_sid, ids, order)
    n_new = len(src)

    new = copy.copy(index)
    new.num_ads = n_new
    new.sid_ad_ids = np.empty(n_new, np.int64)
    gather_rows(sid_ids, ids, src, new.sid_ad_ids)
    new.sid_ad_offsets = np.empty(S + 1, np.int64)
    report.empty_sids = new.empty_sids = int(shift_offsets(off, removed, e_sid[order], new.sid_ad_offsets))

    # the id lookup: rows moved by the merge, edited ads at their new rows, new ids merged in order
    fresh = np.flatnonzero(~exists)
    fresh = fresh[np.argsort(ids[fresh], kind="stable")]
    new.ad_ids_sorted, new.ad_rows_by_id = merge_id_lookup(
        sorted_ids, rows_by_id, new_of_old, pos[exists], entry_row[exists], ids[fresh], entry_row[fresh])

    # tables and partition ids: copied once, grown; the changed ads' own bitmask rows appended first
    bm_words = index.layout.words
    ch_rows = np.ascontiguousarray(ch.rows[a])
    uniq, inv = _unique_rows(ch_rows[:, :bm_words])
    U = index.bitmask_table.shape[0]
    room = len(a) * (L + 1)  # at most one new union row a node of each path
    bm_table = _grow_table(np.asarray(index.bitmask_table), len(uniq) + room)
    bm_table[U:U + len(uniq)] = uniq
    new.ad_bitmask_ids = np.empty(n_new, np.int32)
    gather_rows(read_only(index.ad_bitmask_ids), (U + inv.reshape(-1)).astype(np.int32), src, new.ad_bitmask_ids)
    bm_used = np.array([U + len(uniq)], np.int64)
    nb = len(index.bloom)
    words = np.array([b["words"] for b in index.bloom], np.int64)
    starts = bm_words + np.concatenate([[0], np.cumsum(words)[:-1]]).astype(np.int64) if nb else np.zeros(0, np.int64)
    sizes = [t.shape[0] for t in index.bloom_tables]
    bases = np.concatenate([[0], np.cumsum([s + room for s in sizes])[:-1]]).astype(np.int64) if nb else \
        np.zeros(0, np.int64)
    bloom_table = np.zeros((sum(sizes) + nb * room, int(words.max(initial=1))), np.uint64)
    for b, t in enumerate(index.bloom_tables):
        bloom_table[bases[b]:bases[b] + sizes[b], :t.shape[1]] = t
    bloom_used = np.array(sizes, np.int64)
    part_bm = _writable(index, "part_bitmask_ids")
    part_bloom = _writable(index, "part_bloom_ids") if nb else np.zeros((len(part_bm), 0), np.int32)
    layout = index.partition_layout
    jagged = layout["kind"] == "jagged"
    by_leaf = np.argsort(leaves, kind="stable")  # paths walked in trie order: neighbours share pages
    report.unions_grown = int(grow_unions(
        leaves[by_leaf], ch_rows[by_leaf], bm_words, starts, words, read_only(index.node_offsets, np.int64), jagged,
        read_only(index.part_offsets if jagged else np.zeros(1), np.int64), read_only(index.level_offsets, np.int64),
        np.asarray(layout.get("level_base", [0] * (L + 2)), np.int64),
        np.asarray(layout.get("level_width", [0] * (L + 1)), np.int64),
        part_bm, part_bloom, bm_table, bm_used, bloom_table, bases, bloom_used))
    new.part_bitmask_ids, new.part_bloom_ids = part_bm, part_bloom
    new.bitmask_table = bm_table[:bm_used[0]]
    new.bloom_tables = [bloom_table[bases[b]:bases[b] + bloom_used[b], :words[b]] for b in range(nb)]

    # exact lists: the index's rows and the changes', gathered in the new row order
    new.ad_allow = [gather_lists(index.ad_allow[b], select_lists(ch.allow[b], a), src) for b in range(nb)]
    new.ad_exclude = [gather_lists(index.ad_exclude[b], select_lists(ch.exclude[b], a), src) for b in range(nb)]
    new._exact_lists = None
    new.__dict__["bloom_dictionaries"] = ch.dictionaries
    # requests encoded before see the appended strings only once re-encoded (Index.follow)
    new.__dict__["fingerprint"] = extended_fingerprint(index.fingerprint, index.bloom_dictionaries, ch.dictionaries)
    rec = {"slack_ads": state["slack_ads"], "added": state["added"] + report.added, "updates": state["updates"] + 1}
    new.manifest = {**index.manifest, "counts": {**index.manifest["counts"], "ads": n_new}, "updates": rec}
    base = index.version.split("+")[0]
    new._version = f"{base}+{rec['updates']}"
    report.version = new.version
    return new, report


def find_ids(sorted_ids, ids) -> tuple:
    """(np.searchsorted(sorted_ids, ids), whether each id is there), with the ids looked up in ascending order: each
    search then starts where the last ended (numpy keeps that bound for ascending keys), so the large array is read
    mostly in order."""
    by_id = np.argsort(ids, kind="stable")
    pos = np.empty(len(ids), np.int64)
    pos[by_id] = np.searchsorted(sorted_ids, ids[by_id])
    n = len(sorted_ids)
    found = (pos < n) & (sorted_ids[np.minimum(pos, n - 1)] == ids) if n else np.zeros(len(ids), bool)
    return pos, found


def _unique_rows(rows):
    """(distinct rows, index of each row's among them), as np.unique(rows, axis=0, return_inverse=True) but by a
    lexsort of the columns (np.unique sorts the rows as opaque records, several times slower)."""
    if len(rows) == 0:
        return rows[:0], np.zeros(0, np.int64)
    order = np.lexsort(rows.T[::-1])
    srt = rows[order]
    first = np.ones(len(rows), bool)
    first[1:] = (srt[1:] != srt[:-1]).any(axis=1)
    inv = np.empty(len(rows), np.int64)
    inv[order] = np.cumsum(first) - 1
    return srt[first], inv


def _writable(index, name: str) -> np.ndarray:
    """The index's array as a private writable copy: a copy-on-write map of the artifact's file when the index
    reads it from there (pages are copied as they are written), else a copy."""
    arr = getattr(index, name)
    if name in index.artifact.names and arr is index.artifact.array(name):
        return index.artifact.private_array(name)
    return np.array(arr)


def select_lists(lists, a):
    """CSR lists (offsets, codes) of entries a, in that order."""
    off, codes = lists
    off = np.asarray(off, np.int64)
    lens = off[a + 1] - off[a]
    new_off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    idx = np.repeat(off[a] - new_off[:-1], lens) + np.arange(new_off[-1])
    return new_off, np.asarray(codes, np.int32)[idx]
