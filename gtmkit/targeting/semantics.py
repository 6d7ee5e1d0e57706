"""Targeting semantics (docs/design.md §2), in one place: bit layout, Bloom hashing, request encoding and the
GTM / exact tests. The builder, the matchers and the tests all use (or mirror) these definitions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import mmh3
import numpy as np

from ..errors import RequestError
from ..inputs.files import short_repr, utf8_problem

ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
# a bitmask attribute with more values than this costs every matcher row a bit a value: a Bloom attribute fits it
WIDE_BITMASK = 256


@dataclass(frozen=True)
class BitmaskLayout:
    """Per attribute a bit range of len(domain)+1 bits; the last bit of a range is `other`.

    Ranges are concatenated in schema order and padded to whole 64-bit words."""

    names: tuple
    domains: tuple  # tuple of tuples of strings
    offsets: tuple  # first bit of each attribute's range

    @classmethod
    def from_domains(cls, names: Sequence[str], domains: Sequence[Sequence[str]]) -> "BitmaskLayout":
        offsets, pos = [], 0
        for dom in domains:
            offsets.append(pos)
            pos += len(dom) + 1
        return cls(tuple(names), tuple(tuple(d) for d in domains), tuple(offsets))

    @property
    def n_bits(self) -> int:
        return sum(len(d) + 1 for d in self.domains)

    @property
    def words(self) -> int:
        return max(1, -(-self.n_bits // 64))

    def other_bit(self, a: int) -> int:
        return self.offsets[a] + len(self.domains[a])

    def value_bits(self, a: int) -> dict:
        """value -> bit for attribute a (values outside the domain map to the `other` bit)."""
        off = self.offsets[a]
        return {v: off + i for i, v in enumerate(self.domains[a])}

    def to_dict(self) -> dict:
        return {"attributes": [{"name": n, "domain": list(d), "offset": o, "bits": len(d) + 1}
                               for n, d, o in zip(self.names, self.domains, self.offsets)],
                "n_bits": self.n_bits, "words": self.words}

    @classmethod
    def from_dict(cls, d: dict) -> "BitmaskLayout":
        attrs = d["attributes"]
        return cls.from_domains([a["name"] for a in attrs], [a["domain"] for a in attrs])


def wide_attributes(layout: BitmaskLayout) -> dict:
    """Bitmask attributes with more than WIDE_BITMASK values -> their number of values."""
    return {n: len(d) for n, d in zip(layout.names, layout.domains) if len(d) > WIDE_BITMASK}


def wide_note(wide: dict) -> str:
    """One line on the wide bitmask attributes of wide_attributes."""
    named = ", ".join(f"'{n}' ({v:,} values, {v + 1:,} bits a matcher row)" for n, v in wide.items())
    return (f"bitmask attribute{'s' if len(wide) > 1 else ''} {named}: past {WIDE_BITMASK} values a Bloom attribute "
            "(schema \"bloom\") stores such targeting in a fixed number of bits")


def set_bit(row: np.ndarray, bit: int) -> None:
    row[bit >> 6] |= np.uint64(1) << np.uint64(bit & 63)


def bitmask_ad_row(layout: BitmaskLayout, allowed: Sequence[Sequence[str]],
                   excluded: Sequence[Sequence[str]]) -> np.ndarray:
    """Reference encoding of one ad's bitmask row (slow, obviously right).

    Per attribute: targeted -> bits of (allowed - excluded); untargeted (empty) -> every domain bit
    except excluded ones, plus `other`. Values must lie in the domain (the builder checks)."""
    row = np.zeros(layout.words, np.uint64)
    for a in range(len(layout.names)):
        bits = layout.value_bits(a)
        allow, excl = set(allowed[a] or ()), set(excluded[a] or ())
        if allow:
            vals = allow - excl
        else:
            vals = set(layout.domains[a]) - excl
            set_bit(row, layout.other_bit(a))
        for v in vals:
            set_bit(row, bits[v])
    return row


def bloom_positions(s: str, bits: int, hashes: int, seed: int) -> list:
    """Bit positions of string s: double hashing over MurmurHash3 x64 128 (mmh3.hash64, seeded).

    position_i = (h1 + i * h2) mod bits for i < hashes, in exact integer arithmetic."""
    h1, h2 = mmh3.hash64(s.encode("utf-8"), seed, True, False)
    return [(h1 + i * h2) % bits for i in range(hashes)]


def bloom_signature(s: str, bits: int, hashes: int, seed: int) -> np.ndarray:
    row = np.zeros(bits // 64, np.uint64)
    for p in bloom_positions(s, bits, hashes, seed):
        set_bit(row, p)
    return row


def bloom_ad_row(strings: Sequence[str], bits: int, hashes: int, seed: int) -> np.ndarray:
    """OR of the strings' signatures; an untargeted ad (no strings) is all ones."""
    if not strings:
        return np.full(bits // 64, ALL_ONES, np.uint64)
    row = np.zeros(bits // 64, np.uint64)
    for s in strings:
        row |= bloom_signature(s, bits, hashes, seed)
    return row


class Request(NamedTuple):
    """One encoded request.

    bitmask:     uint64 [A_bitmask, W]: row a holds the request's bits of attribute a only (a missing
                 value or one outside the domain sets that attribute's `other` bit).
    bloom_sigs:  per Bloom attribute, uint64 [n_strings, W_b] signatures. A request without strings for
                 an attribute gets one all-ones signature: it passes only where an untargeted ad lies
                 below (an untargeted ad's row is all ones), which is exactly who is eligible.
    bloom_codes: per Bloom attribute, int64 [n_strings] dictionary codes of the strings (-1: a string no
                 ad mentions), used by the exact ad-level test.
    fingerprint: what it was encoded against (`Index.fingerprint`: the bit layout, Bloom parameters and string
                 dictionaries); None for a request made by hand, which is taken as it is.
    user:        the attributes it was encoded from (a copy), so that an index with another fingerprint
                 re-encodes it (docs/design.md §9).
    """

    bitmask: np.ndarray
    bloom_sigs: tuple
    bloom_codes: tuple
    fingerprint: str = None
    user: dict = None


def _values(user: dict, name: str) -> list:
    """The attribute's strings; None (JSON null) is the same as leaving the attribute out."""
    v = user.get(name)
    if v is None:
        return []
    vals = [v] if isinstance(v, str) else list(v) if isinstance(v, (list, tuple)) else None
    if vals is None or not all(isinstance(x, str) for x in vals):
        bad = v if vals is None else next(x for x in vals if not isinstance(x, str))
        raise RequestError(f"request attribute '{name}': expected a string or a list of strings, got "
                           f"{type(bad).__name__} {short_repr(bad)}")
    for i, x in enumerate(vals):
        why = utf8_problem(x)
        if why:  # such a string has no bytes to hash nor to compare with the catalog's
            raise RequestError(f"request attribute '{name}': value {i} {why}")
    return [str(x) for x in vals]


def encode_request(user: dict, layout: BitmaskLayout, bloom_params: Sequence[tuple],
                   bloom_names: Sequence[str], bloom_lookup: Sequence, fingerprint: str = None) -> Request:
    """Encode a user dict: attribute name -> value or list of values; keys starting with '_' are metadata.

    bloom_params: per Bloom attribute (bits, hashes, seed); bloom_lookup: per Bloom attribute a
    callable mapping a list of strings to int64 codes (-1 unknown); fingerprint: the encoding's
    (Index.fingerprint), recorded with a copy of the user's attributes."""
    if not isinstance(user, dict):
        raise RequestError(f"a request must be a JSON object (attribute -> values), got {type(user).__name__}")
    known = set(layout.names) | set(bloom_names)
    for key in user:
        if not isinstance(key, str) or (key not in known and not key.startswith("_")):
            raise RequestError(f"unknown request attribute {short_repr(key)} (known: {', '.join(sorted(known))})")
    bm = np.zeros((len(layout.names), layout.words), np.uint64)
    kept = {}
    for a, name in enumerate(layout.names):
        vals = _values(user, name)
        if vals:
            kept[name] = vals
        bits = layout.value_bits(a)
        if not vals:
            set_bit(bm[a], layout.other_bit(a))
        for v in vals:
            set_bit(bm[a], bits.get(v, layout.other_bit(a)))
    sigs, codes = [], []
    for b, name in enumerate(bloom_names):
        vals = _values(user, name)
        if vals:
            kept[name] = vals
        bits, hashes, seed = bloom_params[b]
        if vals:
            sigs.append(np.stack([bloom_signature(s, bits, hashes, seed) for s in vals]))
        else:
            sigs.append(np.full((1, bits // 64), ALL_ONES, np.uint64))
        codes.append(np.asarray(bloom_lookup[b](vals), np.int64))
    return Request(bm, tuple(sigs), tuple(codes), fingerprint, kept if fingerprint is not None else None)


def row_passes(bitmask_row: np.ndarray, bloom_rows: Sequence[np.ndarray], request: Request) -> bool:
    """GTM test of one matcher partition (docs/design.md §2): every bitmask attribute meets the request, and
    for every Bloom attribute some request signature is contained in the row."""
    for a in range(request.bitmask.shape[0]):
        if not np.any(bitmask_row & request.bitmask[a]):
            return False
    for b, sigs in enumerate(request.bloom_sigs):
        row = bloom_rows[b]
        if not any(np.array_equal(row & s, s) for s in sigs):
            return False
    return True


def ad_eligible_reference(ad_bitmask_row: np.ndarray, allowed_codes: Sequence[Sequence[int]],
                          excluded_codes: Sequence[Sequence[int]], request: Request) -> bool:
    """Exact eligibility of one ad (docs/design.md §2): bitmask rows meet; per Bloom attribute the ad is
    untargeted or allows one request string; no request string is excluded."""
    for a in range(request.bitmask.shape[0]):
        if not np.any(ad_bitmask_row & request.bitmask[a]):
            return False
    for b, req in enumerate(request.bloom_codes):
        req = set(int(c) for c in req if c >= 0)
        allow = set(int(c) for c in allowed_codes[b])
        if allow and not (allow & req):
            return False
        if set(int(c) for c in excluded_codes[b]) & req:
            return False
    return True


def _int_array(x, what: str, ndim: int) -> np.ndarray:
    try:
        a = np.asarray(x)
    except (TypeError, ValueError, OverflowError):
        a = np.asarray(None)
    if a.ndim != ndim or a.dtype.kind not in "iu":
        raise RequestError(f"{what} must be a {ndim}-d integer array, got {a.dtype} {list(a.shape)}")
    return a


def check_request(r, b: int, n_bitmask: int, words: int, bloom_widths) -> Request:
    """Request b (an encoded Request, possibly hand-made) against the index's widths: integer bitmask
    [A, W], per Bloom matcher t integer signatures [n, bloom_widths[t]] and 1-d integer codes.
    -> the request with the dtypes the kernels read (uint64 rows, int64 codes)."""
    if not isinstance(r, Request):
        raise RequestError(f"request {b}: expected an encoded Request (index.encode_request(user)), "
                           f"got {type(r).__name__}")
    bm = _int_array(r.bitmask, f"request {b}: bitmask", 2)
    nb = len(bloom_widths)
    if bm.shape != (n_bitmask, words) or not isinstance(r.bloom_sigs, (tuple, list)) or \
            not isinstance(r.bloom_codes, (tuple, list)) or len(r.bloom_sigs) != nb or len(r.bloom_codes) != nb:
        raise RequestError(f"request {b} was encoded for another index")
    sigs, codes = [], []
    for t, w in enumerate(bloom_widths):
        s = _int_array(r.bloom_sigs[t], f"request {b}: Bloom signatures {t}", 2)
        if s.shape[1] != w:
            raise RequestError(f"request {b}: Bloom signatures {t} must be [n, {w}], got {list(s.shape)}")
        sigs.append(np.ascontiguousarray(s.astype(np.uint64, copy=False)))
        codes.append(np.ascontiguousarray(_int_array(r.bloom_codes[t], f"request {b}: Bloom codes {t}", 1), np.int64))
    return Request(np.ascontiguousarray(bm.astype(np.uint64, copy=False)), tuple(sigs), tuple(codes),
                   r.fingerprint, r.user)
