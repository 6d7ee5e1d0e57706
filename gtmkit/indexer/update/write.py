"""An updated index written as a new version of its artifact (`gtmkit update`): every array as the updated index
holds it, the Bloom dictionaries with the strings the changes brought, and the manifest's counts and update
record; readers of the old version keep it until they close it (docs/design.md §4). It is published only over the
version the index was loaded from (a compare-and-switch, docs/design.md §9), so no other writer's version is lost."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import copy

from ...artifact import index_format as fmt
from ...artifact.container import ArtifactWriter
from ...artifact.index_checks import PAUSED
from ...artifact.staging import Switch
from ...progress import Progress, report

_KEPT = ("schema", "source", "bitmask_layout", "bloom", "partition_layout", "stats", "build")


def base_version(index):
    """The version directory of its artifact an index was loaded from (None: the flat layout), which a write of
    a version derived from it must still find served."""
    d = index.artifact.dir
    return None if d == index.path else d.name


def write_updated(index, progress: Progress = None):
    """Write `index` (an Index updated in memory) as the new current version of the artifact it came from, with
    its paused ads (paused_ad_ids) served paused from the first call after a load. VersionChanged (nothing
    written) when the artifact serves another version than the one the index was loaded from by then."""
    arrays = {"level_offsets": index.level_offsets, "node_offsets": index.node_offsets,
              "child_tokens": index.child_tokens, "max_degree": index.max_degree,
              "part_bitmask_ids": index.part_bitmask_ids, "bitmask_table": index.bitmask_table,
              "sid_ad_offsets": index.sid_ad_offsets, "sid_ad_ids": index.sid_ad_ids,
              "ad_bitmask_ids": index.ad_bitmask_ids, "ad_ids_sorted": index.ad_ids_sorted,
              "ad_rows_by_id": index.ad_rows_by_id}
    if index.part_offsets is not None:
        arrays["part_offsets"] = index.part_offsets
    if index.bloom:
        arrays["part_bloom_ids"] = index.part_bloom_ids
    for b in range(len(index.bloom)):
        arrays[fmt.bloom_table(b)] = index.bloom_tables[b]
        arrays.update(zip(fmt.ad_allow(b), index.ad_allow[b]))
        arrays.update(zip(fmt.ad_exclude(b), index.ad_exclude[b]))
    manifest = {k: index.manifest[k] for k in _KEPT if k in index.manifest}
    manifest["counts"] = dict(index.manifest["counts"])
    manifest["updates"] = fmt.update_state(index.manifest)
    if len(index.paused_ad_ids):
        arrays[PAUSED] = np.asarray(index.paused_ad_ids, np.int64)
    with Switch(index.path, base_version(index)), \
            ArtifactWriter(index.path, fmt.FORMAT_NAME, fmt.FORMAT_VERSION, overwrite=True) as w:
        w.expect_arrays(arrays)  # a full disk then says about how much the whole version needs
        for i, (name, arr) in enumerate(arrays.items()):
            w.add_array(name, arr)
            report(progress, i + 1, len(arrays), "write")
        for b, d in enumerate(index.bloom_dictionaries):
            strings = sorted(d, key=d.get)  # by code
            w.add_table(fmt.bloom_dict(b), pa.table({"value": pa.array(strings, pa.string())}))
        w.commit(manifest)
    return index.path


def write_changes(index, ch, paused, progress: Progress = None, check=None) -> tuple:
    """`index` with the changes ch (Changes, or None) applied in place and the ads `paused` (sorted ids) paused,
    written as its artifact's new version when that changes anything. check: ad ids that must be ads of the
    updated index (a RequestError before anything is written). -> (the updated index, UpdateReport, written)."""
    from .apply import UpdateReport, update_index
    if ch is not None:
        updated, rep = update_index(index, ch)
    else:
        u = fmt.update_state(index.manifest)
        updated, rep = index, UpdateReport(version=index.version, slack_left=u["slack_ads"] - u["added"])
    if check is not None and len(check):
        updated.ad_rows(check)  # RequestError naming the first unknown id
    written = updated is not index or not np.array_equal(paused, index.paused_ad_ids)
    if written:
        if updated is index:  # pauses alone: the same arrays, a new version
            updated = copy.copy(index)
            u = fmt.update_state(index.manifest)
            updated.manifest = {**index.manifest, "updates": {**u, "updates": u["updates"] + 1}}
        updated.paused_ad_ids = paused
        write_updated(updated, progress)
    return updated, rep, written
