"""Refusing a build that cannot fit in memory before it starts, with the size it would need.

The figures are lower bounds (arrays the build must hold at once), so a refusal is never wrong; a build
that passes may still need more (deduplicated tables, Parquet buffers)."""

from __future__ import annotations

from .._machine import physical_memory
from ..errors import CatalogError


def human(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return ""  # unreachable


def build_bytes(n_ads: int, sid_length: int, row_words: int) -> int:
    """Least memory a build holds at its peak: the SIDs and ids of every ad, its combined targeting row
    and the per-SID union rows beside it (at least one SID)."""
    return n_ads * (4 * sid_length + 8 + 8 + 8 * row_words) + 8 * row_words


def least_row_words(schema) -> int:
    """Words of an ad's combined targeting row known before the catalog is read: an inferred domain
    counts only its `other` bit."""
    bits = sum((len(a.domain) if a.domain is not None else 0) + 1 for a in schema.bitmask)
    return max(1, -(-bits // 64)) + sum(b.words for b in schema.bloom)


def check_fits(nbytes: int, what: str, error: type = CatalogError) -> None:
    mem = physical_memory()
    if mem is not None and nbytes > mem:
        raise error(f"{what} would need at least {human(nbytes)} of memory ({nbytes} bytes), more than this "
                    f"machine has ({human(mem)})")
