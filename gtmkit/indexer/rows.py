"""Per-ad targeting rows (docs/design.md §2) for the whole catalog, as numba loops over dictionary codes.

Each ad gets one "combined" row: its bitmask words followed by each Bloom attribute's words, so
subtree unions and partition fill rates treat bitmask and Bloom rows of one partition together."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import prange

from ..threads import parallel_njit
from ..errors import CatalogError
from ..inputs.catalog import Catalog
from ..inputs.schema import Schema
from ..targeting.semantics import BitmaskLayout, bloom_signature

ONE = np.uint64(1)
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class RowLayout:
    """Column ranges of the combined row: bitmask words [0, bitmask_words), then Bloom attribute b
    at [bloom_starts[b], bloom_starts[b] + bloom_words[b])."""

    bitmask_words: int
    bloom_words: tuple
    n_bits: int  # meaningful bits (unpadded bitmask bits + Bloom bits): the fill-rate denominator

    @property
    def bloom_starts(self) -> tuple:
        out, pos = [], self.bitmask_words
        for w in self.bloom_words:
            out.append(pos)
            pos += w
        return tuple(out)

    @property
    def width(self) -> int:
        return self.bitmask_words + sum(self.bloom_words)

    def slices(self) -> list:
        """[bitmask slice, bloom slice per attribute]."""
        out = [slice(0, self.bitmask_words)]
        out += [slice(s, s + w) for s, w in zip(self.bloom_starts, self.bloom_words)]
        return out


def resolve_layout(catalog: Catalog, schema: Schema) -> tuple:
    """Bitmask layout (domains given or inferred sorted) and per attribute code -> bit arrays."""
    domains, code_bits = [], []
    for j, a in enumerate(schema.bitmask):
        dictionary = catalog.allowed[j].dictionary
        dom = tuple(a.domain) if a.domain is not None else tuple(sorted(dictionary))
        domains.append(dom)
    layout = BitmaskLayout.from_domains([a.name for a in schema.bitmask], domains)
    for j in range(len(schema.bitmask)):
        bits = layout.value_bits(j)
        code_bits.append(np.array([bits[s] for s in catalog.allowed[j].dictionary], np.int32))
    row_layout = RowLayout(layout.words, tuple(b.words for b in schema.bloom),
                           layout.n_bits + sum(b.bits for b in schema.bloom))
    return layout, code_bits, row_layout


def rows_in_layout(catalog: Catalog, schema: Schema, layout: BitmaskLayout, bloom_words: tuple,
                   order: np.ndarray) -> np.ndarray:
    """Combined rows (as ad_rows) of a catalog read against an existing index's bit layout (verify --catalog, an
    update's changed ads); a bitmask value outside the index's domain is a CatalogError naming it."""
    code_bits = []
    for j, a in enumerate(schema.bitmask):
        bits = layout.value_bits(j)
        missing = [s for s in catalog.allowed[j].dictionary if s not in bits]
        if missing:
            raise CatalogError(f"attribute '{a.name}': value {missing[0]!r} is not in the index's domain")
        code_bits.append(np.array([bits[s] for s in catalog.allowed[j].dictionary], np.int32))
    return ad_rows(catalog, schema, layout, code_bits, RowLayout(layout.words, tuple(bloom_words), 0), order)


@parallel_njit(cache=True)
def _bitmask_attr(rows, order, a_off, a_codes, e_off, e_codes, code_bit, lo, n_dom):
    """rows[i] |= ad order[i]'s bits of one attribute: allowed - excluded, or (untargeted)
    the whole range (domain + other) - excluded."""
    for i in prange(order.shape[0]):
        ad = order[i]
        if a_off[ad + 1] == a_off[ad]:
            for b in range(lo, lo + n_dom + 1):
                rows[i, b >> 6] |= ONE << np.uint64(b & 63)
        else:
            for j in range(a_off[ad], a_off[ad + 1]):
                b = code_bit[a_codes[j]]
                rows[i, b >> 6] |= ONE << np.uint64(b & 63)
        for j in range(e_off[ad], e_off[ad + 1]):
            b = code_bit[e_codes[j]]
            rows[i, b >> 6] &= ~(ONE << np.uint64(b & 63))


@parallel_njit(cache=True)
def _bloom_attr(rows, order, a_off, a_codes, sigs, start):
    """rows[i, start:start+W] = OR of the signatures of ad order[i]'s strings; all ones if none."""
    W = sigs.shape[1]
    for i in prange(order.shape[0]):
        ad = order[i]
        if a_off[ad + 1] == a_off[ad]:
            for w in range(W):
                rows[i, start + w] = ALL
        else:
            for j in range(a_off[ad], a_off[ad + 1]):
                c = a_codes[j]
                for w in range(W):
                    rows[i, start + w] |= sigs[c, w]


def add_bloom_words(rows, offsets, codes, sigs, start: int) -> None:
    """rows[i, start:start+W] |= the signatures of list i's codes (offsets, codes: CSR lists of n rows; sigs:
    bloom_signatures of the codes' strings); all ones for an empty list."""
    _bloom_attr(rows, np.arange(len(offsets) - 1), offsets, codes, sigs, start)


def bloom_signatures(dictionary: list, bits: int, hashes: int, seed: int) -> np.ndarray:
    """uint64 [len(dictionary), bits/64]: one signature per distinct string (hashed once each)."""
    out = np.zeros((len(dictionary), bits // 64), np.uint64)
    for c, s in enumerate(dictionary):
        out[c] = bloom_signature(s, bits, hashes, seed)
    return out


def ad_rows(catalog: Catalog, schema: Schema, layout: BitmaskLayout, code_bits: list,
            row_layout: RowLayout, order: np.ndarray) -> np.ndarray:
    """uint64 [N, width]: the combined row of ad order[i] in row i."""
    rows = np.zeros((len(order), row_layout.width), np.uint64)
    for j in range(len(schema.bitmask)):
        al, ex = catalog.allowed[j], catalog.excluded[j]
        _bitmask_attr(rows, order, al.offsets, al.codes, ex.offsets, ex.codes, code_bits[j],
                      layout.offsets[j], len(layout.domains[j]))
    nb = len(schema.bitmask)
    for b, attr in enumerate(schema.bloom):
        al = catalog.allowed[nb + b]
        sigs = bloom_signatures(al.dictionary, attr.bits, attr.hashes, attr.seed)
        _bloom_attr(rows, order, al.offsets, al.codes, sigs, row_layout.bloom_starts[b])
    return rows
