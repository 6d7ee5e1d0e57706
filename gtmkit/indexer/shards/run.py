"""The sharded build's driver: the three phases as tasks, in this process one after another or on a Dask
cluster (docs/design.md §3). Working files live in the artifact's staging directory, so a failed or
interrupted build leaves nothing behind."""

from __future__ import annotations

import shutil

import numpy as np

from ...artifact import index_format as fmt
from ...artifact.container import ArtifactWriter
from ...inputs.catalog import Catalog, StringLists, open_catalog
from ...progress import Progress
from ..rows import resolve_layout
from .assemble import assemble
from .plan import SHARD_BYTES_PER_AD, hot_tokens, merge_dictionaries, save_dictionaries, shard_keys
from ...sharding.plan import shard_count
from .shard import build_shard
from .split import second_token_rows, split_file
from ..write import write_index


def build_sharded(catalog, out_dir, schema, spec, shards: int | None, run, memory_limit: int | None,
                  progress: Progress, overwrite: bool, timer, slack: float = None, source=None):
    """The index of `catalog` built in shards by `run` (InProcess or OnDask) into out_dir. source: the catalog
    opened (open_catalog: every file's columns and types checked, as the single-process read does)."""
    source = open_catalog(catalog, schema) if source is None else source
    total = source.num_rows
    if total == 0:
        from ...errors import CatalogError
        raise CatalogError(f"{catalog}: the catalog has no rows")
    files = [str(f) for f in source.files]
    timer.lap("plan")
    with ArtifactWriter(out_dir, fmt.FORMAT_NAME, fmt.FORMAT_VERSION, overwrite=overwrite) as w:
        stage = w.staging / "shards"
        stage.mkdir()
        try:
            folders = source.partition_types
            where, paths = run.paths(catalog, files)
            split = run.map(split_file, [(where, paths, i, schema, str(stage), folders)
                                         for i in range(len(files))], progress, "split")
            timer.lap("split")
            n_attrs = len(schema.bitmask) + len(schema.bloom)
            dictionaries, remaps = merge_dictionaries(split, n_attrs)
            save_dictionaries(stage, dictionaries, remaps)
            tokens = np.sum([r["tokens"] for r in split], axis=0)
            n = shards or shard_count(total, run.workers, memory_limit or run.worker_memory(), SHARD_BYTES_PER_AD)
            hot = hot_tokens(tokens, n, schema.sid_length)
            bounds = shard_keys(tokens, second_token_rows(stage, len(files), hot, schema.vocab), n)
            starts = source.starts
            metas = run.map(build_shard, [(str(stage), s, bounds[s], bounds[s + 1], starts, schema)
                                          for s in range(len(bounds) - 1)], progress, "shards")
            timer.lap("shards")
            probe = Catalog(str(catalog), np.zeros(0, np.int64), np.zeros((0, schema.sid_length), np.int32),
                            [StringLists(np.zeros(1, np.int64), np.zeros(0, np.int32), d) for d in dictionaries], [])
            layout, _, rl = resolve_layout(probe, schema)
            parts = assemble(stage, metas, schema, rl, dictionaries, source, w)
            shutil.rmtree(stage)
            timer.lap("assemble")
            build = {"mode": "sharded", "shards": len(metas), "workers": run.workers, "scheduler": run.address,
                     "prefix_bounds": [[int(b) // schema.vocab, int(b) % schema.vocab] for b in bounds],
                     "files": len(files)}
            write_index(w, catalog, schema, layout, rl, parts["trie"], parts["matchers"], parts["tables"],
                        parts["level_stats"], parts["ad_level"], parts["ads"], parts["ad_lists"], timer, progress,
                        build, slack)
        except BaseException:
            run.close()  # this build's own workers stop before the files they write are removed
            shutil.rmtree(stage, ignore_errors=True)
            raise
