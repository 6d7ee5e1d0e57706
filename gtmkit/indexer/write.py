"""The last phase of every build: the index's arrays, statistics and manifest into an artifact writer
(docs/design.md §3), and the phase timer whose seconds go into the statistics."""

from __future__ import annotations

import time

import pyarrow as pa

from ..inputs.stores import resolve_input
from ..artifact import index_format as fmt
from ..progress import Progress, report
from .stats import summarize


class Timer:
    """Seconds by build phase (lap(phase) charges the time since the last lap to it)."""

    def __init__(self):
        self.seconds = {}
        self._t0 = time.perf_counter()
        self._last = self._t0

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._last
        self._last = now

    def total(self) -> float:
        return time.perf_counter() - self._t0


def write_index(w, catalog, schema, layout, rl, trie, matchers: tuple, tables, level_stats, ad_level, ads: dict,
                ad_lists: list, timer: Timer, progress: Progress = None, build: dict = None,
                slack: float = None, updates: dict = None) -> None:
    """The index's arrays, statistics and manifest into the open writer w, committed: shared by the
    single-process and the sharded build, which differ only in how they reach these pieces. trie: level_offsets,
    node_offsets, child_tokens, max_degree, num_sids, num_nodes; matchers: (the nodes' partition id arrays, their
    layout); ads: the SID->ad map and ad-id lookup; ad_lists: per Bloom attribute ((allow offsets, codes),
    (exclude offsets, codes), dictionary); build: how it was built; slack: the new ads `gtmkit update` may add,
    as a share of the ads (None: the default); updates: the update record to keep (a rebuild of an updated index's
    subtrees), instead of a fresh one. Arrays the writer already holds (streamed
    into it) are not written again."""
    L = schema.sid_length
    part_arrays, part_layout = matchers
    arrays = {
        "level_offsets": trie.level_offsets, "node_offsets": trie.node_offsets,
        "child_tokens": trie.child_tokens, "max_degree": trie.max_degree,
        **part_arrays,
        "bitmask_table": tables[0],
        **{k: ads[k] for k in ("sid_ad_offsets", "sid_ad_ids", "ad_bitmask_ids")},
        **{k: ads[k] for k in ("ad_ids_sorted", "ad_rows_by_id")},
    }
    for b, ((a_off, a_codes), (e_off, e_codes), _) in enumerate(ad_lists):
        arrays[fmt.bloom_table(b)] = tables[1 + b]
        arrays.update(zip(fmt.ad_allow(b), (a_off, a_codes)))
        arrays.update(zip(fmt.ad_exclude(b), (e_off, e_codes)))

    counts = {"sids": trie.num_sids, "ads": len(ads["sid_ad_ids"]), "nodes": trie.num_nodes,
              "internal_nodes": int(trie.level_offsets[L]), "sid_length": L, "vocab": schema.vocab}
    stats = summarize(trie, ads["sid_ad_offsets"], schema, layout, rl, tables, level_stats, ad_level, arrays,
                      part_layout)
    manifest = {
        "schema": schema.to_dict(),
        "source": {"catalog": resolve_input(catalog)},  # a URL as it is
        "bitmask_layout": layout.to_dict(),
        "bloom": [{"name": a.name, "bits": a.bits, "hashes": a.hashes, "seed": a.seed, "words": a.words}
                  for a in schema.bloom],
        "counts": counts,
        "partition_layout": part_layout,
        "stats": stats,
        "build": build or {"mode": "single-process"},
        "updates": updates or {"slack_ads": fmt.default_slack_ads(counts["ads"]) if slack is None
                               else int(slack * counts["ads"]), "added": 0, "updates": 0},
    }
    w.expect_arrays(arrays)  # a full disk then says about how much the whole version needs
    for i, (name, arr) in enumerate(arrays.items()):
        if not w.has(name):
            w.add_array(name, arr)
        report(progress, i + 1, len(arrays), "write")
    for b, (_, _, dictionary) in enumerate(ad_lists):
        w.add_table(fmt.bloom_dict(b), pa.table({"value": pa.array(dictionary, pa.string())}))
    timer.lap("write")
    stats["build_seconds"] = {**{k: round(v, 4) for k, v in timer.seconds.items()}, "total": round(timer.total(), 4)}
    if build and "shards" in build:
        stats["shards"] = build["shards"]
    w.commit(manifest)
