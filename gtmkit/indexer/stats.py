"""Build statistics (GRACE Table 1 and more): sizes, dedup savings and fill rates per trie level."""

from __future__ import annotations

import numpy as np

from .._bits import row_popcount

FILL_BINS = 20


def level_table_stats(parts: np.ndarray, counts: np.ndarray, ids: list, slices: list, rl) -> dict:
    """Per table: rows (= partitions) before dedup, distinct rows after, bytes, mean fill, histogram."""
    return table_stats(counts, ids, [row_popcount(parts[:, s]) for s in slices], [s.stop - s.start for s in slices],
                       rl)


def table_stats(counts: np.ndarray, ids: list, pops: list, widths: list, rl) -> dict:
    """level_table_stats from each table's set bits of every partition (pops[t] [partitions]) and row widths:
    what a build that holds the ids and tables, not the partitions' rows, can compute."""
    out = {"nodes": int(len(counts)), "partitions": int(counts.sum()),
           "partitions_per_node": {"mean": float(counts.mean()) if len(counts) else 0.0,
                                   "max": int(counts.max()) if len(counts) else 0},
           "tables": []}
    bits = [rl.n_bits - sum(b * 64 for b in rl.bloom_words)] + [w * 64 for w in rl.bloom_words]
    for t, (width, tid) in enumerate(zip(widths, ids)):
        fill = pops[t] / max(bits[t], 1)
        seen = np.zeros(int(tid.max()) + 1 if len(tid) else 0, bool)
        seen[tid] = True  # ids are dense table indices: marking beats np.unique's hashing by far
        uniq = int(np.count_nonzero(seen))
        hist, _ = np.histogram(fill, bins=FILL_BINS, range=(0.0, 1.0))
        out["tables"].append({"rows": int(len(tid)), "bytes_before": int(len(tid) * width * 8),
                              "unique_rows": uniq, "bytes_after": int(uniq * width * 8),
                              "mean_fill": float(fill.mean()) if len(fill) else 0.0,
                              "fill_hist": hist.tolist()})
    return out


def _quantiles(x: np.ndarray) -> dict:
    return {"p50": float(np.percentile(x, 50)), "p90": float(np.percentile(x, 90)),
            "p99": float(np.percentile(x, 99)), "max": int(x.max()), "mean": float(x.mean())}


def summarize(trie, sid_ad_offsets, schema, layout, rl, tables, level_stats, ad_level, arrays,
              part_layout) -> dict:
    names = ["bitmask"] + [f"bloom:{a.name}" for a in schema.bloom]
    for lv in level_stats + [ad_level]:
        for name, t in zip(names, lv["tables"]):
            t["table"] = name
    topo = sum(arrays[k].nbytes for k in ("level_offsets", "node_offsets", "child_tokens"))
    matcher_ids = sum(a.nbytes for k, a in arrays.items() if k.startswith("part_"))
    table_bytes = {n: int(t.nbytes) for n, t in zip(names, tables)}
    ad_index = sum(a.nbytes for k, a in arrays.items() if k.startswith("ad_"))
    sid_ad = arrays["sid_ad_offsets"].nbytes + arrays["sid_ad_ids"].nbytes
    L = schema.sid_length
    return {
        "sids": int(trie.num_sids),
        "ads": int(sid_ad_offsets[-1]),
        "nodes": trie.num_nodes,
        "sid_length": L,
        "vocab": schema.vocab,
        "ads_per_sid": _quantiles(np.diff(sid_ad_offsets)),
        "bitmask_bits": layout.n_bits,
        "bitmask_words": layout.words,
        "bloom_words": {a.name: a.words for a in schema.bloom},
        "partition": {**schema.partition.to_dict(), "layout": part_layout["kind"]},
        # Level d = nodes of depth d (children of depth d-1); GRACE's p1..p3 are levels 2..4.
        "levels": [{"level": d + 1, "max_parent_degree": int(trie.max_degree[d]), **lv}
                   for d, lv in enumerate(level_stats)],
        "max_degree": [int(x) for x in trie.max_degree],
        "ad_level": ad_level,
        "tables": {n: {"unique_rows": int(t.shape[0]), "bytes": table_bytes[n]} for n, t in zip(names, tables)},
        "bytes": {"topology": int(topo), "matcher_ids": int(matcher_ids), "matcher_tables": int(sum(table_bytes.values())),
                  "sid_ad_map": int(sid_ad), "ad_index": int(ad_index),
                  "total": int(sum(a.nbytes for a in arrays.values()))},
        "topology_bytes_per_million_sids": float(topo / max(trie.num_sids, 1) * 1e6),
    }
