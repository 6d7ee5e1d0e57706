"""The sharded build's driver: the three phases as tasks, in this process one after another or on a Dask
cluster (docs/design.md §3). On Dask the pieces move as task results (or through --staging); the driver lands
each shard's piece in the artifact's staging directory as its task ends, so a failed or interrupted build leaves
nothing behind."""

from __future__ import annotations

import shutil

import numpy as np

from ...artifact import index_format as fmt
from ...artifact.container import ArtifactWriter
from ...inputs.catalog import Catalog, StringLists, open_catalog
from ...progress import Progress
from ...sharding.plan import shard_count
from ...sharding.runner import Held
from ..rows import resolve_layout
from ..write import write_index
from .assemble import ShardFiles, assemble
from .plan import SHARD_BYTES_PER_AD, hot_tokens, merge_dictionaries, shard_keys
from .shard import build_shard
from .split import cut, meta_of, second_rows, split_file


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
        held = Held(run)
        try:
            keep = run.pieces_at(stage)  # where tasks keep pieces: None, returned as results
            folders = source.partition_types
            where, paths = run.paths(catalog, files)
            split = run.keep(split_file, [(where, paths, i, schema, keep, folders) for i in range(len(files))],
                             progress, "split")
            held.add("split", split)
            infos = run.map(meta_of, [(r,) for r in split], None, "split")
            timer.lap("split")
            n_attrs = len(schema.bitmask) + len(schema.bloom)
            dictionaries, remaps = merge_dictionaries(infos, n_attrs)
            tokens = np.sum([r["tokens"] for r in infos], axis=0)
            # pieces returned as task results stay in the workers' memory while the shards run: room for them
            in_memory = sum(r["bytes"] for r in infos) if keep is None else 0
            del infos
            n = shards or shard_count(total, run.workers, memory_limit or run.worker_memory(), SHARD_BYTES_PER_AD,
                                      in_memory)
            hot = hot_tokens(tokens, n, schema.sid_length)
            bounds = shard_keys(tokens, _second_rows(run, split, hot, schema.vocab), n)
            starts = source.starts
            shared = [run.share(dictionaries), run.share(remaps)]
            held.add("shared", shared)
            # a file's cuts one after another, then its piece is let go: freed once they are made
            cuts = [[None] * len(split) for _ in range(len(bounds) - 1)]
            for i, r in enumerate(split):
                for s in range(len(cuts)):
                    cuts[s][i] = run.later(cut, r, bounds[s], bounds[s + 1], schema.vocab, n_attrs, phase="cut")
            for s, row in enumerate(cuts):
                held.add(s, row)
            held.drop("split")
            split = None
            # each shard's piece lands on this machine's disk as its task ends, a block of rows at a time; its cuts
            # are let go then
            built = run.map(build_shard, [(cuts[s], s, bounds[s], bounds[s + 1], starts, schema, *shared, keep)
                                          for s in range(len(cuts))], progress, "shards",
                            land=lambda s: stage / f"shard-{s:05d}", after=lambda s: held.drop(s))
            metas, landed = [m for m, _ in built], [p for _, p in built]
            held.release()
            cuts = None
            timer.lap("shards")
            probe = Catalog(str(catalog), np.zeros(0, np.int64), np.zeros((0, schema.sid_length), np.int32),
                            [StringLists(np.zeros(1, np.int64), np.zeros(0, np.int32), d) for d in dictionaries], [])
            layout, _, rl = resolve_layout(probe, schema)
            parts = assemble(stage, metas, schema, rl, dictionaries, source, w,
                             ShardFiles(landed, len(rl.slices())))
            shutil.rmtree(stage)
            run.clear_pieces()
            timer.lap("assemble")
            build = {"mode": "sharded", "shards": len(metas), "workers": run.workers, "scheduler": run.address,
                     "prefix_bounds": [[int(b) // schema.vocab, int(b) % schema.vocab] for b in bounds],
                     "files": len(files)}
            write_index(w, catalog, schema, layout, rl, parts["trie"], parts["matchers"], parts["tables"],
                        parts["level_stats"], parts["ad_level"], parts["ads"], parts["ad_lists"], timer, progress,
                        build, slack)
        except BaseException:
            held.release()
            run.close()  # this build's own workers stop before the files they write are removed
            run.clear_pieces()
            shutil.rmtree(stage, ignore_errors=True)
            raise


def _second_rows(run, split: list, hot: list, vocab: int) -> dict:
    """{hot first token: rows by second token [V]} over every file's piece."""
    out = {f: np.zeros(vocab, np.int64) for f in hot}
    if hot:
        for part in run.map(second_rows, [(r, hot, vocab) for r in split], None, "split"):
            for f in hot:
                out[f] += part[f]
    return out
