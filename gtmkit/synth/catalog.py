"""Synthetic catalogs: deterministic generation in row groups, Parquet + schema JSON output."""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import GtmkitError
from ..progress import Progress, report
from ._hashing import _hash, _rng
from .parts import check_target, write_parts
from .sids import _ADS_PER_SID_MEAN, _SidCodec, _ads_per_sid, _generate_sids, ads_per_sid_stats
from .targeting import TargetingRates, _targeting
from .world import AGE_BUCKETS, GENDERS, GENERATOR, ROWS_PER_GROUP, World

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------
# catalog


ARROW_SCHEMA = pa.schema([
    ("ad_id", pa.int64()), ("sid", pa.list_(pa.int32())),
    ("country", pa.list_(pa.string())), ("country_exclude", pa.list_(pa.string())),
    ("age", pa.list_(pa.string())), ("gender", pa.list_(pa.string())),
    ("location", pa.list_(pa.string())), ("location_exclude", pa.list_(pa.string())),
])


@dataclass(frozen=True)
class _Plan:
    n_ads: int
    seed: int
    vocab: int
    sid_length: int
    world_seed: int
    rates: TargetingRates
    bloom_bits: int
    bloom_hashes: int
    bloom_seed: int


def _check_plan(n_ads, seed, vocab, sid_length, world_seed, rates, overrides, bloom_bits, bloom_hashes,
                bloom_seed) -> _Plan:
    def whole(name, v, lo, hi=2 ** 62):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= int(v) <= hi:
            raise GtmkitError(f"synth: {name} must be an integer in [{lo}, {hi}], got {v!r}")
        return int(v)

    plan = _Plan(whole("n_ads", n_ads, 1), whole("seed", seed, 0, 2 ** 32 - 1), whole("vocab", vocab, 2, 2 ** 31 - 1),
                 whole("sid_length", sid_length, 1, 64), whole("world_seed", world_seed, 0, 2 ** 32 - 1),
                 TargetingRates.make(rates, **overrides), whole("bloom_bits", bloom_bits, 64, 1 << 20),
                 whole("bloom_hashes", bloom_hashes, 1, 32), whole("bloom_seed", bloom_seed, 0, 2 ** 32 - 1))
    if plan.bloom_bits % 64:
        raise GtmkitError(f"synth: bloom_bits must be a multiple of 64, got {plan.bloom_bits}")
    expected_sids = plan.n_ads / _ADS_PER_SID_MEAN
    if expected_sids > 0.5 * float(plan.vocab) ** plan.sid_length:
        raise GtmkitError(f"synth: {plan.n_ads} ads need ~{expected_sids:.0f} distinct SIDs, more than half of "
                          f"vocab^sid_length = {plan.vocab}^{plan.sid_length}; raise --vocab or --sid-length")
    return plan


def _scramble40(x: np.ndarray, a: np.uint64, b: np.uint64) -> np.ndarray:
    """A bijection of [0, 2^40) (uint64 in, uint64 out): unique ids that look unordered."""
    mask = np.uint64((1 << 40) - 1)
    x = (x + (b >> np.uint64(24))) & mask
    for mul in (a, b):
        x = (x * mul) & mask
        x ^= x >> np.uint64(21)
    return x


class _Generation:
    """SIDs and ads->SID assignment of a plan; batches are made on demand (one row group each)."""

    def __init__(self, plan: _Plan, progress: Progress = None):
        self.plan = plan
        report(progress, 0, 3, "synth sids")
        self.counts = _ads_per_sid(plan.n_ads, plan.seed)
        self.codec = _SidCodec(plan.vocab, plan.sid_length)
        report(progress, 1, 3, "synth sids")
        self.sid_keys = _generate_sids(len(self.counts), plan.seed, plan.vocab, plan.sid_length)
        report(progress, 2, 3, "synth sids")
        ad_sid = np.repeat(np.arange(len(self.counts), dtype=np.int32), self.counts)
        _rng(plan.seed, 4).shuffle(ad_sid)
        self.ad_sid = ad_sid
        report(progress, 3, 3, "synth sids")
        self.world = World(plan.world_seed)
        self.clusters = self.world.clusters(plan.vocab)
        # ad ids: a bijection of the row number on [0, 2^40) (odd multiplies and xor-shifts), shifted
        h = _hash(plan.seed, 0xAD1D)[0]
        self._id_keys = (np.uint64(int(h) | 1), np.uint64(int(_hash(plan.seed, 0xAD1E)[0]) | 1))
        self._leader_cache = None

    @property
    def n_batches(self) -> int:
        return -(-self.plan.n_ads // ROWS_PER_GROUP)

    def batch(self, b: int) -> pa.Table:
        lo, hi = b * ROWS_PER_GROUP, min((b + 1) * ROWS_PER_GROUP, self.plan.n_ads)
        n, L = hi - lo, self.plan.sid_length
        rows = np.arange(lo, hi, dtype=np.uint64)
        ad_id = _scramble40(rows, *self._id_keys).astype(np.int64) + 10 ** 12
        toks = self.codec.decode(self.sid_keys[self.ad_sid[lo:hi]])
        sid = pa.ListArray.from_arrays(pa.array(np.arange(0, n * L + 1, L, dtype=np.int32)),
                                       pa.array(toks.ravel()))
        cols = _targeting(self.world, self.clusters, toks[:, 0].astype(np.int64),
                          _rng(self.plan.seed, 5, b), self.plan.rates)
        if self.plan.rates.sid_coherence > 0.0:
            cols = self._cohere(cols, self.ad_sid[lo:hi], _rng(self.plan.seed, 6, b))
        return pa.Table.from_arrays([pa.array(ad_id), sid] + [cols[name] for name in ARROW_SCHEMA.names[2:]],
                                    schema=ARROW_SCHEMA)

    def _leaders(self) -> tuple:
        """(rank int32 [n_sids]: row of the SID's leader profile, -1 for single-ad SIDs; leader
        targeting columns). One `_targeting` draw per SID holding >= 2 ads (a single ad copying its
        own leader would only swap one independent draw for another), made once, lazily, in chunks
        of ROWS_PER_GROUP SIDs, each from its own seeded generator."""
        if self._leader_cache is None:
            multi = self.counts > 1
            rank = np.cumsum(multi, dtype=np.int32) - 1
            rank[~multi] = -1
            lead_sids = np.flatnonzero(multi)
            del multi
            parts = {name: [] for name in ARROW_SCHEMA.names[2:]}
            for c, i in enumerate(range(0, len(lead_sids), ROWS_PER_GROUP)):
                t1 = self.codec.decode(self.sid_keys[lead_sids[i:i + ROWS_PER_GROUP]])[:, 0].astype(np.int64)
                cols = _targeting(self.world, self.clusters, t1, _rng(self.plan.seed, 7, c), self.plan.rates)
                for name, col in cols.items():
                    parts[name].append(col)
            empty = {name: pa.array([], ARROW_SCHEMA.field(name).type) for name in parts}
            self._leader_cache = (rank, {name: pa.concat_arrays(ch) if ch else empty[name]
                                         for name, ch in parts.items()})
        return self._leader_cache

    def _cohere(self, cols: dict, ad_sid: np.ndarray, rng: np.random.Generator) -> dict:
        """Ads of multi-ad SIDs take their SID's leader targeting (every column) with probability
        sid_coherence; the others keep their own draw."""
        rank, leaders = self._leaders()
        n = len(ad_sid)
        lead = rank[ad_sid]
        src = np.flatnonzero((rng.random(n) < self.plan.rates.sid_coherence) & (lead >= 0))
        if not len(src):
            return cols
        idx = np.arange(n, dtype=np.int64)
        idx[src] = n + np.arange(len(src))
        idx, lead = pa.array(idx), pa.array(lead[src])
        return {name: pa.concat_arrays([col, leaders[name].take(lead)]).take(idx) for name, col in cols.items()}

    def batches(self) -> Iterator[pa.Table]:
        for b in range(self.n_batches):
            yield self.batch(b)

    def schema(self) -> dict:
        p, world = self.plan, self.world
        meta = {"generator": GENERATOR, "ads": p.n_ads, "seed": p.seed, "world_seed": p.world_seed,
                "vocab": p.vocab, "sid_length": p.sid_length, "sids": len(self.counts),
                "ads_per_sid": ads_per_sid_stats(self.counts), **asdict(p.rates)}
        return {"ad_id": "ad_id",
                "sid": {"column": "sid", "length": p.sid_length, "vocab": p.vocab},
                "bitmask": {"country": {"column": "country", "exclude_column": "country_exclude",
                                        "domain": sorted(world.countries)},
                            "age": {"column": "age", "domain": sorted(AGE_BUCKETS)},
                            "gender": {"column": "gender", "domain": sorted(GENDERS)}},
                "bloom": {"location": {"column": "location", "exclude_column": "location_exclude",
                                       "bits": p.bloom_bits, "hashes": p.bloom_hashes, "seed": p.bloom_seed}},
                "meta": meta}


def synth_catalog(n_ads: int, seed: int = 0, vocab: int = 512, sid_length: int = 4, world_seed: int = 0,
                  rates: Optional[TargetingRates] = None, *, bloom_bits: int = 256, bloom_hashes: int = 3,
                  bloom_seed: int = 0, progress: Progress = None, **knobs) -> pa.Table:
    """A synthetic ad catalog of n_ads rows (columns: ARROW_SCHEMA), deterministic in its arguments.

    knobs: TargetingRates fields (e.g. untargeted_country=0.3) overriding `rates`. The matching
    schema dict is `catalog_schema(...)` with the same arguments (or what write_catalog writes)."""
    gen = _Generation(_check_plan(n_ads, seed, vocab, sid_length, world_seed, rates, knobs, bloom_bits,
                                  bloom_hashes, bloom_seed), progress)
    parts = []
    for b, t in enumerate(gen.batches()):
        parts.append(t)
        report(progress, min((b + 1) * ROWS_PER_GROUP, n_ads), n_ads, "synth catalog")
    return pa.concat_tables(parts)


def catalog_schema(n_ads: int, seed: int = 0, vocab: int = 512, sid_length: int = 4, world_seed: int = 0,
                   rates: Optional[TargetingRates] = None, *, bloom_bits: int = 256, bloom_hashes: int = 3,
                   bloom_seed: int = 0, **knobs) -> dict:
    """The schema dict (as written to `<stem>.schema.json`) of the catalog of these arguments.

    Redraws the SIDs (for the meta statistics) but none of the targeting."""
    return _Generation(_check_plan(n_ads, seed, vocab, sid_length, world_seed, rates, knobs, bloom_bits,
                                   bloom_hashes, bloom_seed)).schema()


def schema_path_for(catalog_path) -> Path:
    """`<stem>.schema.json` beside the catalog (stem: the file name without `.parquet`)."""
    p = Path(catalog_path)
    stem = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.name
    return p.with_name(stem + ".schema.json")


def dumps_schema(schema: dict) -> str:
    """The schema file's text: sorted keys, so equal schemas give equal bytes."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


_PARQUET_OPTIONS = dict(compression="zstd", compression_level=3, use_dictionary=True, write_statistics=True,
                        version="2.6", data_page_version="1.0", store_schema=True)


_GENERATION = None  # the parent's generation while parts are written: forked workers inherit it


def _write_part(file, lo: int, hi: int) -> int:
    """Row groups lo..hi-1 of the generation as one Parquet part; -> row groups written."""
    with pq.ParquetWriter(str(file), ARROW_SCHEMA, **_PARQUET_OPTIONS) as writer:
        for b in range(lo, hi):
            writer.write_table(_GENERATION.batch(b), row_group_size=ROWS_PER_GROUP)
    return hi - lo


def _write_dataset(path: Path, schema_path: Path, gen: _Generation, parts: int, workers: int, progress) -> tuple:
    """The catalog as parts (synth/parts.py): part i holds a contiguous range of row groups, so the parts in
    path order are the single file's rows."""
    global _GENERATION
    if gen.plan.rates.sid_coherence > 0.0:
        gen._leaders()  # drawn once here, before the workers fork, not once a worker
    nb = gen.n_batches
    if parts > nb:
        log.warning("%s: %d parts asked, %d written: a part holds whole row groups of %d ads", path, parts, nb,
                    ROWS_PER_GROUP)
    parts = max(1, min(parts, nb))
    schema_tmp = schema_path.with_name(f".{schema_path.name}.tmp{os.getpid()}")
    _GENERATION = gen
    try:
        schema_tmp.write_text(dumps_schema(gen.schema()))
        write_parts(path, _write_part, [(i * nb // parts, (i + 1) * nb // parts) for i in range(parts)], workers,
                    progress, nb, "synth catalog")
        os.replace(schema_tmp, schema_path)
    except OSError as exc:
        raise GtmkitError(f"{schema_path}: cannot write the schema ({exc.strerror or exc})") from None
    finally:
        _GENERATION = None
        if schema_tmp.exists():
            schema_tmp.unlink()
    return str(path), str(schema_path)


def parts_written(n_ads: int, parts: int) -> int:
    """How many parts write_catalog(parts=...) writes: a part holds whole row groups of ROWS_PER_GROUP ads."""
    return max(1, min(parts, -(-n_ads // ROWS_PER_GROUP)))


def write_catalog(path, n_ads: int, seed: int = 0, vocab: int = 512, sid_length: int = 4, world_seed: int = 0,
                  rates: Optional[TargetingRates] = None, *, bloom_bits: int = 256, bloom_hashes: int = 3,
                  bloom_seed: int = 0, parts: int = 1, workers: int = 1, progress: Progress = None,
                  **knobs) -> tuple:
    """Write the catalog (Parquet, one row group per ROWS_PER_GROUP ads) and `<stem>.schema.json` beside it.

    parts > 1 (or workers > 1, which makes parts at least workers): `path` is a directory of that many Parquet
    parts (synth/parts.py), written by `workers` processes; read in path order they hold the single file's rows.
    Returns (catalog_path, schema_path). Same arguments give byte-identical files; each file is
    written under a temporary name and renamed, so no half file is left under the final name."""
    plan = _check_plan(n_ads, seed, vocab, sid_length, world_seed, rates, knobs, bloom_bits, bloom_hashes,
                       bloom_seed)
    for name, v in (("parts", parts), ("workers", workers)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise GtmkitError(f"synth: {name} must be a positive integer, got {v!r}")
    path = Path(path)
    schema_path = schema_path_for(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GtmkitError(f"{path.parent}: cannot create directory ({exc.strerror or exc})") from None
    if parts > 1 or workers > 1:
        check_target(path)
    gen = _Generation(plan, progress)
    if parts > 1 or workers > 1:
        return _write_dataset(path, schema_path, gen, max(parts, workers), workers, progress)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    schema_tmp = schema_path.with_name(f".{schema_path.name}.tmp{os.getpid()}")
    try:
        # generation (numpy) overlaps with encoding/compression (pyarrow, GIL released) of the previous batch
        with pq.ParquetWriter(str(tmp), ARROW_SCHEMA, **_PARQUET_OPTIONS) as writer, \
                ThreadPoolExecutor(max_workers=1) as pool:
            pending = None
            for b, table in enumerate(gen.batches()):
                if pending is not None:
                    pending.result()
                pending = pool.submit(writer.write_table, table, row_group_size=ROWS_PER_GROUP)
                report(progress, min((b + 1) * ROWS_PER_GROUP, plan.n_ads), plan.n_ads, "synth catalog")
            if pending is not None:
                pending.result()
        schema_tmp.write_text(dumps_schema(gen.schema()))
        os.replace(tmp, path)
        os.replace(schema_tmp, schema_path)
    except OSError as exc:
        raise GtmkitError(f"{path}: cannot write catalog ({exc.strerror or exc})") from None
    finally:
        for t in (tmp, schema_tmp):
            if t.exists():
                t.unlink()
    return str(path), str(schema_path)
