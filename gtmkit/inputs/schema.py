"""Catalog schema: which Parquet columns hold the ad id, the SID and each targeting attribute.

Parsed from JSON (see README / docs/format.md); every key is checked so a typo is an error, not a default."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..errors import CatalogError, SchemaError
from .dataset import input_files, is_glob
from .files import parse_json, read_text, short_repr as _show, utf8_problem
from .stores import is_url, locate, pa_errors, read_bytes

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
        raise SchemaError(f"{src}: {where} must be a JSON object, got {_show(d)}")
    unknown = [k for k in d if k not in allowed]
    if unknown:
        raise SchemaError(f"{src}: unknown schema key {_show(unknown[0])} in {where} "
                          f"(allowed: {', '.join(sorted(allowed))})")
    return d


def _int(v: Any, where: str, src: str, lo: int, hi: int = 2**31 - 1) -> int:
    if isinstance(v, np.integer):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise SchemaError(f"{src}: {where} must be an integer in [{lo}, {hi}], got {_show(v)}")
    return v


def _str(v: Any, where: str, src: str) -> str:
    if not isinstance(v, str) or not v:
        raise SchemaError(f"{src}: {where} must be a non-empty string, got {_show(v)}")
    why = utf8_problem(v) or ("holds a control character" if any(c < " " or c == "\x7f" for c in v) else None)
    if why:  # names are quoted in one-line errors and written to the manifest: printable UTF-8 only
        raise SchemaError(f"{src}: {where} {why}, got {_show(v)}")
    return str(v)


def _attrs(d: dict, key: str, src: str) -> dict:
    """The attribute objects under `bitmask` / `bloom` (null: none), names checked."""
    v = d.get(key)
    attrs = _check_keys({} if v is None else v, set(v) if isinstance(v, dict) else set(), key, src)
    for name in attrs:
        _str(name, f"{key} attribute name", src)
        if name.startswith("_"):  # requests keep '_' keys for metadata: such an attribute could never be asked for
            raise SchemaError(f"{src}: {key} attribute name {name!r} must not start with '_'")
    return attrs


def parse_partition(d: Any, sid_length: int, src: str = "schema") -> PartitionSpec:
    d = _check_keys({} if d is None else d, {"mode", "k", "target_fill", "k_max"}, "partition", src)
    return make_partition(d.get("mode", "none"), d.get("k"), d.get("target_fill"), d.get("k_max"),
                          sid_length, src)


def make_partition(mode: str, k=None, target_fill=None, k_max=None, sid_length: int = 4,
                   src: str = "partition") -> PartitionSpec:
    """Validate partition settings (shared by the schema parser, build_index and the CLI)."""
    if not isinstance(mode, str) or mode not in PARTITION_MODES:
        raise SchemaError(f"{src}: partition mode must be one of {', '.join(PARTITION_MODES)}, got {_show(mode)}")
    if mode == "none":
        if k is not None or target_fill is not None or k_max is not None:
            raise SchemaError(f"{src}: k / target_fill / k_max need partition mode 'static' or 'dynamic'")
        return PartitionSpec("none")
    if mode == "static":
        if k is None:
            raise SchemaError(f"{src}: static partitioning needs k (one value per SID level, e.g. 1,4,4,2)")
        if isinstance(k, (list, tuple)):
            ks = tuple(k)
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            ks = (k,) * sid_length
        else:
            raise SchemaError(f"{src}: static k must be an integer or a list of integers, got {_show(k)}")
        if len(ks) != sid_length:
            raise SchemaError(f"{src}: static k needs {sid_length} values (one per SID level), got {len(ks)}")
        ks = tuple(_int(x, "k", src, 1, 64) for x in ks)
        if target_fill is not None or k_max is not None:
            raise SchemaError(f"{src}: target_fill / k_max apply to dynamic partitioning only")
        return PartitionSpec("static", k=ks)
    if k is not None:
        raise SchemaError(f"{src}: dynamic partitioning takes target_fill and k_max, not k")
    tf = DEFAULT_TARGET_FILL if target_fill is None else target_fill
    if isinstance(tf, bool) or not isinstance(tf, (int, float, np.integer, np.floating)) \
            or not 0.0 < tf <= 1.0:  # compared as given: float() of a huge int overflows
        raise SchemaError(f"{src}: target_fill must be a number in (0, 1], got {_show(target_fill)}")
    km = _int(DEFAULT_K_MAX if k_max is None else k_max, "k_max", src, 1, 64)
    return PartitionSpec("dynamic", target_fill=float(tf), k_max=km)


def _domain(domain: Any, where: str, src: str) -> Optional[tuple]:
    if domain is None:
        return None
    if not isinstance(domain, (list, tuple)):
        raise SchemaError(f"{src}: {where}.domain must be a list of strings or null, got {_show(domain)}")
    for i, x in enumerate(domain):
        if not isinstance(x, str):
            raise SchemaError(f"{src}: {where}.domain[{i}] must be a string, got {_show(x)}")
        why = utf8_problem(x)
        if why:
            raise SchemaError(f"{src}: {where}.domain[{i}] {why}")
    if len(set(domain)) != len(domain):
        seen = set()
        dup = next(x for x in domain if x in seen or seen.add(x))
        raise SchemaError(f"{src}: {where}.domain lists {dup!r} twice")
    return tuple(str(x) for x in domain)


def _exclude(a: dict, column: str, where: str, src: str) -> Optional[str]:
    exc = a.get("exclude_column")
    if exc is None:
        return None
    exc = _str(exc, f"{where}.exclude_column", src)
    if exc == column:  # one list would both allow and exclude every value: no targeted ad could match
        raise SchemaError(f"{src}: {where}.exclude_column is the attribute's own column {column!r}")
    return exc


def _check_columns(schema: "Schema", src: str) -> None:
    """No Parquet column serves two roles: each attribute reads its own allow and exclude lists."""
    roles = [("ad_id", schema.ad_id_column), ("sid.column", schema.sid_column)]
    for kind, attrs in (("bitmask", schema.bitmask), ("bloom", schema.bloom)):
        for a in attrs:
            roles.append((f"{kind}.{a.name}.column", a.column))
            if a.exclude_column:
                roles.append((f"{kind}.{a.name}.exclude_column", a.exclude_column))
    first = {}
    for role, col in roles:
        if col in first:
            raise SchemaError(f"{src}: column {col!r} is used by both {first[col]} and {role}")
        first[col] = role


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

    bitmask = []
    for name, a in _attrs(d, "bitmask", src).items():
        where = f"bitmask.{name}"
        a = _check_keys(a if a is not None else {}, {"column", "exclude_column", "domain"}, where, src)
        column = _str(a.get("column", name), f"{where}.column", src)
        bitmask.append(BitmaskAttr(name, column, _exclude(a, column, where, src), _domain(a.get("domain"), where, src)))
    bloom = []
    for name, a in _attrs(d, "bloom", src).items():
        where = f"bloom.{name}"
        if any(b.name == name for b in bitmask):
            raise SchemaError(f"{src}: attribute '{name}' is declared twice")
        a = _check_keys(a if a is not None else {}, {"column", "exclude_column", "bits", "hashes", "seed"}, where, src)
        bits = _int(a.get("bits", 256), f"{where}.bits", src, 64, 1 << 20)
        if bits % 64:
            raise SchemaError(f"{src}: {where}.bits must be a multiple of 64, got {bits}")
        column = _str(a.get("column", name), f"{where}.column", src)
        bloom.append(BloomAttr(name, column, _exclude(a, column, where, src), bits,
                               _int(a.get("hashes", 3), f"{where}.hashes", src, 1, 32),
                               _int(a.get("seed", 0), f"{where}.seed", src, 0, 2**32 - 1)))
    if not bitmask and not bloom:
        raise SchemaError(f"{src}: declare at least one bitmask or bloom attribute")
    meta = {} if d.get("meta") is None else d["meta"]
    if not isinstance(meta, dict):
        raise SchemaError(f"{src}: meta must be a JSON object, got {_show(meta)}")
    try:  # meta goes into the manifest: refuse now what could not be written after the whole build
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SchemaError(f"{src}: meta cannot be written as JSON ({(str(exc).splitlines() or ['?'])[0]})") from None
    # Attributes are kept sorted by name: JSON objects carry no order we could rely on (the manifest
    # is written with sorted keys), and the bit layout must not depend on how a file was written.
    bitmask.sort(key=lambda a: a.name)
    bloom.sort(key=lambda a: a.name)
    schema = Schema(ad_id, sid_col, length, vocab, tuple(bitmask), tuple(bloom),
                    parse_partition(d.get("partition"), length, src), meta)
    _check_columns(schema, src)
    return schema


def load_schema(path) -> Schema:
    """The schema in a JSON file, local or under a URL."""
    if is_url(path):
        data = read_bytes(path, SchemaError, "schema")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(f"{path}: schema is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    else:
        text = read_text(path, SchemaError, "schema")
    return parse_schema(parse_json(text, SchemaError, str(path)), str(path))


def schema_beside(catalog):
    """`<stem>.schema.json` next to the catalog (a file, or a directory of Parquet files): where `gtmkit synth
    catalog` puts it. A URL's is a URL."""
    if is_url(catalog):
        head, _, name = str(catalog).rstrip("/").rpartition("/")
        stem = name[: -len(".parquet")] if name.endswith(".parquet") else name.rsplit(".", 1)[0] or name
        return f"{head}/{stem}.schema.json"
    p = Path(catalog)
    stem = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.stem
    return p.with_name(stem + ".schema.json")


def _exists(path) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    import pyarrow.fs as pafs
    fs, inner = locate(path, SchemaError)
    try:
        return fs.get_file_info(inner).type != pafs.FileType.NotFound
    except pa_errors():
        return True  # load_schema names the problem


def resolve_schema(catalog, schema=None) -> Schema:
    """A Schema from an object, a dict, a path, or (None) the file beside the catalog."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, dict):
        return parse_schema(schema)
    if schema is not None:
        if not isinstance(schema, (str, os.PathLike)):
            raise SchemaError(f"schema must be a Schema, a dict or a path, got {type(schema).__name__}")
        return load_schema(schema)
    if not isinstance(catalog, (str, os.PathLike)):
        raise SchemaError(f"catalog must be a path, got {type(catalog).__name__}")
    input_files(catalog, CatalogError, "Parquet file")  # a missing catalog is named as such, not as a missing schema
    if is_glob(str(catalog)) and (is_url(catalog) or not os.path.exists(catalog)):
        raise SchemaError(f"{catalog}: a schema is needed for the files a glob names: pass --schema FILE")
    beside = schema_beside(catalog)
    if not _exists(beside):
        raise SchemaError(f"{catalog}: a schema is needed: pass --schema FILE (none found at {beside})")
    return load_schema(beside)
