"""Catalog schema: which Parquet columns hold the ad id, the SID and each targeting attribute.

Parsed from JSON (see README / docs/format.md); every key is checked so a typo is an error, not a default."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import SchemaError

PARTITION_MODES = ("none", "static", "dynamic")
DEFAULT_TARGET_FILL = 0.5
DEFAULT_K_MAX = 8


@dataclass(frozen=True)
class BitmaskAttr:
    name: str
    column: str
    exclude_column: Optional[str] = None
    domain: Optional[tuple] = None  # None: inferred (sorted) from the catalog's values

    def to_dict(self) -> dict:
        return {"column": self.column, "exclude_column": self.exclude_column,
                "domain": list(self.domain) if self.domain is not None else None}


@dataclass(frozen=True)
class BloomAttr:
    name: str
    column: str
    exclude_column: Optional[str] = None
    bits: int = 256
    hashes: int = 3
    seed: int = 0

    @property
    def words(self) -> int:
        return self.bits // 64

    def to_dict(self) -> dict:
        return {"column": self.column, "exclude_column": self.exclude_column, "bits": self.bits,
                "hashes": self.hashes, "seed": self.seed}


@dataclass(frozen=True)
class PartitionSpec:
    """k-way partitioning of the matchers (GRACE §4.2). `k` holds one value per SID level (1..L)."""

    mode: str = "none"
    k: Optional[tuple] = None
    target_fill: Optional[float] = None
    k_max: Optional[int] = None

    def to_dict(self) -> dict:
        return {"mode": self.mode, "k": list(self.k) if self.k is not None else None,
                "target_fill": self.target_fill, "k_max": self.k_max}


@dataclass(frozen=True)
class Schema:
    ad_id_column: str
    sid_column: str
    sid_length: int
    vocab: int
    bitmask: tuple = ()
    bloom: tuple = ()
    partition: PartitionSpec = PartitionSpec()
    meta: dict = field(default_factory=dict)

    def columns(self) -> list:
        """Every Parquet column the build reads, in a stable order."""
        cols = [self.ad_id_column, self.sid_column]
        for a in (*self.bitmask, *self.bloom):
            cols.append(a.column)
            if a.exclude_column:
                cols.append(a.exclude_column)
        return cols

    def to_dict(self) -> dict:
        return {"ad_id": self.ad_id_column,
                "sid": {"column": self.sid_column, "length": self.sid_length, "vocab": self.vocab},
                "bitmask": {a.name: a.to_dict() for a in self.bitmask},
                "bloom": {a.name: a.to_dict() for a in self.bloom},
                "partition": self.partition.to_dict(),
                "meta": dict(self.meta)}

    def with_partition(self, partition: "PartitionSpec") -> "Schema":
        return Schema(self.ad_id_column, self.sid_column, self.sid_length, self.vocab, self.bitmask,
                      self.bloom, partition, self.meta)


def _check_keys(d: Any, allowed: set, where: str, src: str) -> dict:
    if not isinstance(d, dict):
        raise SchemaError(f"{src}: {where} must be a JSON object, got {type(d).__name__}")
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise SchemaError(f"{src}: unknown schema key '{unknown[0]}' in {where} (allowed: {', '.join(sorted(allowed))})")
    return d


def _int(v: Any, where: str, src: str, lo: int, hi: int = 2**31 - 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise SchemaError(f"{src}: {where} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def _str(v: Any, where: str, src: str) -> str:
    if not isinstance(v, str) or not v:
        raise SchemaError(f"{src}: {where} must be a non-empty string, got {v!r}")
    return v


def parse_partition(d: Any, sid_length: int, src: str = "schema") -> PartitionSpec:
    d = _check_keys(d or {}, {"mode", "k", "target_fill", "k_max"}, "partition", src)
    return make_partition(d.get("mode", "none"), d.get("k"), d.get("target_fill"), d.get("k_max"),
                          sid_length, src)


def make_partition(mode: str, k=None, target_fill=None, k_max=None, sid_length: int = 4,
                   src: str = "partition") -> PartitionSpec:
    """Validate partition settings (shared by the schema parser, build_index and the CLI)."""
    if mode not in PARTITION_MODES:
        raise SchemaError(f"{src}: partition mode must be one of {', '.join(PARTITION_MODES)}, got {mode!r}")
    if mode == "none":
        if k is not None or target_fill is not None or k_max is not None:
            raise SchemaError(f"{src}: k / target_fill / k_max need partition mode 'static' or 'dynamic'")
        return PartitionSpec("none")
    if mode == "static":
        if k is None:
            raise SchemaError(f"{src}: static partitioning needs k (one value per SID level, e.g. 1,4,4,2)")
        ks = (k,) * sid_length if isinstance(k, int) and not isinstance(k, bool) else tuple(k)
        if len(ks) != sid_length:
            raise SchemaError(f"{src}: static k needs {sid_length} values (one per SID level), got {len(ks)}")
        ks = tuple(_int(x, "k", src, 1, 64) for x in ks)
        if target_fill is not None or k_max is not None:
            raise SchemaError(f"{src}: target_fill / k_max apply to dynamic partitioning only")
        return PartitionSpec("static", k=ks)
    if k is not None:
        raise SchemaError(f"{src}: dynamic partitioning takes target_fill and k_max, not k")
    tf = DEFAULT_TARGET_FILL if target_fill is None else target_fill
    if isinstance(tf, bool) or not isinstance(tf, (int, float)) or not 0.0 < float(tf) <= 1.0:
        raise SchemaError(f"{src}: target_fill must be a number in (0, 1], got {target_fill!r}")
    km = _int(DEFAULT_K_MAX if k_max is None else k_max, "k_max", src, 1, 64)
    return PartitionSpec("dynamic", target_fill=float(tf), k_max=km)


def parse_schema(d: Any, src: str = "schema") -> Schema:
    d = _check_keys(d, {"ad_id", "sid", "bitmask", "bloom", "partition", "meta"}, "the top level", src)
    ad_id = _str(d.get("ad_id", "ad_id"), "ad_id", src)
    if "sid" not in d:
        raise SchemaError(f"{src}: missing key 'sid' (e.g. {{\"column\": \"sid\", \"length\": 4, \"vocab\": 512}})")
    sid = _check_keys(d["sid"], {"column", "length", "vocab"}, "sid", src)
    sid_col = _str(sid.get("column", "sid"), "sid.column", src)
    if "length" not in sid or "vocab" not in sid:
        raise SchemaError(f"{src}: sid needs 'length' and 'vocab'")
    length = _int(sid["length"], "sid.length", src, 1, 64)
    vocab = _int(sid["vocab"], "sid.vocab", src, 1)

    names = set()
    bitmask = []
    for name, a in _check_keys(d.get("bitmask", {}), set(d.get("bitmask", {}) or {}), "bitmask", src).items():
        where = f"bitmask.{name}"
        a = _check_keys(a if a is not None else {}, {"column", "exclude_column", "domain"}, where, src)
        domain = a.get("domain")
        if domain is not None:
            if not isinstance(domain, list) or not all(isinstance(x, str) for x in domain):
                raise SchemaError(f"{src}: {where}.domain must be a list of strings or null")
            if len(set(domain)) != len(domain):
                raise SchemaError(f"{src}: {where}.domain lists a value twice")
            domain = tuple(domain)
        exc = a.get("exclude_column")
        bitmask.append(BitmaskAttr(name, _str(a.get("column", name), f"{where}.column", src),
                                   _str(exc, f"{where}.exclude_column", src) if exc is not None else None, domain))
        names.add(name)
    bloom = []
    for name, a in _check_keys(d.get("bloom", {}), set(d.get("bloom", {}) or {}), "bloom", src).items():
        where = f"bloom.{name}"
        if name in names:
            raise SchemaError(f"{src}: attribute '{name}' is declared twice")
        a = _check_keys(a if a is not None else {}, {"column", "exclude_column", "bits", "hashes", "seed"}, where, src)
        bits = _int(a.get("bits", 256), f"{where}.bits", src, 64, 1 << 20)
        if bits % 64:
            raise SchemaError(f"{src}: {where}.bits must be a multiple of 64, got {bits}")
        exc = a.get("exclude_column")
        bloom.append(BloomAttr(name, _str(a.get("column", name), f"{where}.column", src),
                               _str(exc, f"{where}.exclude_column", src) if exc is not None else None,
                               bits, _int(a.get("hashes", 3), f"{where}.hashes", src, 1, 32),
                               _int(a.get("seed", 0), f"{where}.seed", src, 0, 2**32 - 1)))
    if not bitmask and not bloom:
        raise SchemaError(f"{src}: declare at least one bitmask or bloom attribute")
    meta = d.get("meta") or {}
    if not isinstance(meta, dict):
        raise SchemaError(f"{src}: meta must be a JSON object")
    # Attributes are kept sorted by name: JSON objects carry no order we could rely on (the manifest
    # is written with sorted keys), and the bit layout must not depend on how a file was written.
    bitmask.sort(key=lambda a: a.name)
    bloom.sort(key=lambda a: a.name)
    return Schema(ad_id, sid_col, length, vocab, tuple(bitmask), tuple(bloom),
                  parse_partition(d.get("partition"), length, src), meta)


def load_schema(path) -> Schema:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SchemaError(f"{path}: cannot read schema ({exc.strerror or exc})") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return parse_schema(d, str(path))


def schema_beside(catalog) -> Path:
    """`<stem>.schema.json` next to the catalog: where `gtmkit synth catalog` puts it."""
    p = Path(catalog)
    stem = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.stem
    return p.with_name(stem + ".schema.json")


def resolve_schema(catalog, schema=None) -> Schema:
    """A Schema from an object, a dict, a path, or (None) the file beside the catalog."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, dict):
        return parse_schema(schema)
    if schema is not None:
        return load_schema(schema)
    beside = schema_beside(catalog)
    if not beside.exists():
        raise SchemaError(f"{catalog}: a schema is needed: pass --schema FILE (none found at {beside})")
    return load_schema(beside)
