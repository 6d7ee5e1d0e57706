"""A shard rebuild's tasks (docs/design.md §9): the ads of a run of rebuilt subtrees (the index's rows it keeps, then
the changed ads on its first tokens) gathered by the driver (rebuild.py) into the task's input piece, and the task
that builds the run from them as a sharded build's task builds a shard."""

from __future__ import annotations

import numpy as np

from ..._arrays import join_offsets
from ..adindex import sid_ad_map
from ..rows import RowLayout, add_bloom_words, bloom_signatures
from ..shards.shard import save_ads, save_matchers
from ..shards.split import gather_lists
from ...sharding.pieces import Writer
from ..trie import build_trie
from .apply import select_lists
from .changes import Changes


def row_layout(index) -> RowLayout:
    """The combined-row layout the index was built with."""
    return RowLayout(index.layout.words, tuple(b["words"] for b in index.bloom),
                     index.layout.n_bits + sum(b["bits"] for b in index.bloom))


def write_inputs(out: Writer, index, ch: Changes, run, rows: np.ndarray, mine: np.ndarray, strings: list):
    """The ads of a rebuilt shard into out, as its task reads them: the index's rows it keeps (rows, of the
    subtrees `run`), then its entries (mine): ids, SIDs, combined rows and Bloom lists. -> the piece."""
    sids = np.zeros((0, index.sid_length), np.int32)
    if run is not None:
        sids = run.row_sids(rows)
    out.save("ad_ids", np.concatenate([np.asarray(index.sid_ad_ids)[rows], ch.ad_ids[mine]]))
    out.save("sids", np.ascontiguousarray(np.concatenate([sids, ch.sids[mine].astype(np.int32)])))
    out.save("rows", np.concatenate([_index_rows(index, rows, strings), ch.rows[mine]]))
    for b in range(len(index.bloom)):
        for kind, lists, changed in (("allowed", index.ad_allow[b], ch.allow[b]),
                                     ("excluded", index.ad_exclude[b], ch.exclude[b])):
            a = _rows_lists(lists, rows)
            c = select_lists(changed, mine)
            out.save(f"{kind}{b}_offsets", join_offsets([a[0], c[0]]))
            out.save(f"{kind}{b}_codes", np.concatenate([a[1], c[1]]).astype(np.int32))
    return out.done()


def _index_rows(index, rows: np.ndarray, strings: list) -> np.ndarray:
    """Combined rows (bitmask words, then each Bloom attribute's) of the index's ad rows `rows`: the bitmask words
    are the ads' table rows, the Bloom words made again from their allowed strings, as the build makes them."""
    rl = row_layout(index)
    out = np.zeros((len(rows), rl.width), np.uint64)
    out[:, :rl.bitmask_words] = np.asarray(index.bitmask_table)[np.asarray(index.ad_bitmask_ids)[rows]]
    for b, attr in enumerate(index.bloom):
        off, codes = _rows_lists(index.ad_allow[b], rows)
        used, local = np.unique(codes, return_inverse=True)
        sigs = bloom_signatures([strings[b][c] for c in used], attr["bits"], attr["hashes"], attr["seed"])
        add_bloom_words(out, off, local.astype(np.int32), sigs, rl.bloom_starts[b])
    return out


def _rows_lists(lists, rows: np.ndarray) -> tuple:
    """(offsets, codes) of the CSR lists of the ad rows `rows` (ascending), read from the span they lie in only."""
    if len(rows) == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.int32)
    a, b = int(rows[0]), int(rows[-1]) + 1
    off = np.asarray(lists[0])[a:b + 1]
    codes = np.asarray(lists[1])[int(off[0]):int(off[-1])]
    return gather_lists(off - off[0], codes, rows - a)


def build_subtrees(inputs, s: int, schema, rl, split_first: bool = False, split_last: bool = False,
                   staging: str | None = None) -> dict:
    """Task: rebuilt shard s from its input piece (write_inputs), as a sharded build's task builds a shard. ->
    {"meta", "piece"} as build_shard gives them. split_first / split_last: its first / last depth-1 node is shared
    with the shard before / after it (a hot first token cut between tasks)."""
    ad_ids, sids, rows = (np.asarray(inputs.get(n)) for n in ("ad_ids", "sids", "rows"))
    lists = [tuple((np.asarray(inputs.get(f"{kind}{b}_offsets")), np.asarray(inputs.get(f"{kind}{b}_codes")))
                   for kind in ("allowed", "excluded")) for b in range(len(schema.bloom))]
    del inputs
    trie = build_trie(sids, schema.vocab)
    order, sid_ad_offsets, sid_ad_ids, _, _ = sid_ad_map(trie.ad_sid, ad_ids, trie.num_sids)
    del trie.ad_sid
    out = Writer(staging, f"shard-{s:05d}")
    save_ads(out, order, sid_ad_offsets, sid_ad_ids, np.arange(len(ad_ids), dtype=np.int64), lists)
    meta = save_matchers(out, trie, rows[order], sid_ad_offsets, schema, rl, split_first, split_last)
    return {"meta": meta, "piece": out.done()}
