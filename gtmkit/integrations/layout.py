"""`SidTokenLayout`: where a model's vocabulary holds the SID tokens (docs/design.md §8)."""

from __future__ import annotations

import operator

import numpy as np

from ..errors import GtmkitError
from .._args import int_arg


class SidTokenLayout:
    """How SID tokens sit in a model's vocabulary.

    offset: an int (one range shared by every SID position: model token = offset + token) or a sequence of L
    ints (one range per position, TIGER-style: offset[d] + token at position d); vocab_size: the model's
    vocabulary size; eos_token_id: a token the model emits after the L-th SID token (None: no EOS);
    sid_vocab: the SID vocabulary V (the index's; None: the room each range has, up to the next range, EOS or
    the end of the vocabulary). `check(index)` refuses a layout that does not fit a model and an index."""

    def __init__(self, offset, vocab_size: int, eos_token_id: int = None, sid_vocab: int = None):
        self.shared = isinstance(offset, (int, np.integer)) and not isinstance(offset, (bool, np.bool_))
        try:
            offs = [int(offset)] if self.shared else [_index(x) for x in offset]
        except TypeError:
            raise GtmkitError(f"offset must be an int or a sequence of ints, got {offset!r}") from None
        if not offs or min(offs) < 0:
            raise GtmkitError(f"offset must hold non-negative ints, got {offset!r}")
        self.offsets = tuple(offs)
        self.vocab_size = _int(vocab_size, "vocab_size", 1)
        if max(offs) >= self.vocab_size:
            raise GtmkitError(f"offset {max(offs)} lies outside the model's vocabulary of {self.vocab_size}")
        self.eos_token_id = None if eos_token_id is None else _int(eos_token_id, "eos_token_id", 0)
        if self.eos_token_id is not None and self.eos_token_id >= self.vocab_size:
            raise GtmkitError(f"eos_token_id {self.eos_token_id} outside the model's vocabulary of {self.vocab_size}")
        self.sid_vocab = self._room() if sid_vocab is None else _int(sid_vocab, "sid_vocab", 1)
        self._check_ranges()

    def _room(self) -> int:
        """The largest V with every range inside the vocabulary and clear of the other ranges and of EOS."""
        room = []
        for o in self.offsets:
            ends = [x for x in (*self.offsets, self.vocab_size, self.eos_token_id) if x is not None and x > o]
            room.append(min(ends) - o)
        return max(min(room), 0)

    def _check_ranges(self) -> None:
        V = self.sid_vocab
        for d, o in enumerate(self.offsets):
            where = "SID tokens" if self.shared else f"SID position {d}"
            if o + V > self.vocab_size:
                raise GtmkitError(f"{where}: model tokens {o}..{o + V - 1} run past the model's vocabulary of "
                                  f"{self.vocab_size}")
            if self.eos_token_id is not None and o <= self.eos_token_id < o + V:
                raise GtmkitError(f"{where}: eos_token_id {self.eos_token_id} lies in the range {o}..{o + V - 1}")
        spans = sorted((o, d) for d, o in enumerate(self.offsets))
        for (a, da), (b, db) in zip(spans, spans[1:]):
            if b < a + V:
                raise GtmkitError(f"SID positions {da} and {db} overlap: model tokens {a}..{a + V - 1} and "
                                  f"{b}..{b + V - 1} (pass one int offset for a shared range)")

    def check(self, index) -> "SidTokenLayout":
        """This layout bound to an index: its V and L checked against the ranges; returns the bound layout."""
        try:
            L, V = int(index.sid_length), int(index.vocab_size)
        except (AttributeError, TypeError, ValueError):
            raise GtmkitError(f"index must be a gtmkit Index, got {type(index).__name__}") from None
        if not self.shared and len(self.offsets) != L:
            raise GtmkitError(f"offset holds {len(self.offsets)} ranges; the index's SIDs have {L} tokens")
        if V > self.sid_vocab and self.sid_vocab != V:
            raise GtmkitError(f"the index's {V} SID tokens do not fit the layout: {self._describe(V)}")
        bound = SidTokenLayout(self.offsets[0] if self.shared else self.offsets, self.vocab_size,
                               self.eos_token_id, sid_vocab=V)
        bound.sid_length = L
        return bound

    def _describe(self, V: int) -> str:
        try:
            SidTokenLayout(self.offsets[0] if self.shared else self.offsets, self.vocab_size, self.eos_token_id, V)
        except GtmkitError as e:
            return str(e)
        return f"room for {self.sid_vocab} tokens a range"

    def offsets_for(self, length: int) -> np.ndarray:
        """int64 [length]: the offset of each of the first `length` SID positions."""
        if self.shared:
            return np.full(length, self.offsets[0], np.int64)
        if length > len(self.offsets):
            raise GtmkitError(f"{length} SID positions asked for; the layout's offset holds {len(self.offsets)}")
        return np.asarray(self.offsets[:length], np.int64)

    def _offsets_of(self, x, depth, name: str):
        """The offsets to add to int64 tokens x: one int at `depth`, else one a position along x's last axis."""
        if depth is not None:
            depth = int_arg(depth, "depth", lo=0)
            if not self.shared and depth >= len(self.offsets):
                raise GtmkitError(f"depth {depth} is outside the layout's {len(self.offsets)} SID positions")
            return int(self.offsets_for(depth + 1)[-1])
        if len(x.shape) == 0:
            raise GtmkitError(f"{name}: a single token needs depth= (its SID position)")
        if not self.shared and x.shape[-1] > len(self.offsets):
            raise GtmkitError(f"{name} hold {x.shape[-1]} SID positions on the last axis; the layout's offset "
                              f"holds {len(self.offsets)}")
        offs = self.offsets_for(x.shape[-1])
        if type(x).__module__.startswith("torch"):
            import torch
            offs = torch.as_tensor(offs, device=x.device)
        elif not isinstance(x, np.ndarray) and hasattr(x, "__cuda_array_interface__"):
            import cupy
            offs = cupy.asarray(offs)
        return offs

    def to_model(self, sid_tokens, depth: int = None):
        """Model tokens of SID tokens at position `depth` (None: the last axis holds positions 0, 1, ...); -1
        where a SID token lies outside [0, sid_vocab) (e.g. a dead beam's -1). Vectorised over numpy, CuPy and
        torch arrays."""
        x = _int64(sid_tokens, "sid_tokens")
        ok = (x >= 0) & (x < self.sid_vocab)
        return (x + self._offsets_of(x, depth, "sid_tokens") + 1) * ok - 1

    def to_sid(self, model_tokens, depth: int = None):
        """SID tokens of model tokens at position `depth` (None: positions 0, 1, ... along the last axis); -1
        where a model token lies outside that position's range."""
        x = _int64(model_tokens, "model_tokens")
        s = x - self._offsets_of(x, depth, "model_tokens")
        ok = (s >= 0) & (s < self.sid_vocab)
        return (s + 1) * ok - 1  # -1 outside the range, without boolean indexing (no device sync)

    def __repr__(self) -> str:
        off = self.offsets[0] if self.shared else list(self.offsets)
        return (f"SidTokenLayout(offset={off}, vocab_size={self.vocab_size}, eos_token_id={self.eos_token_id}, "
                f"sid_vocab={self.sid_vocab})")


def _int(x, name: str, lo: int) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < lo:
        raise GtmkitError(f"{name} must be an integer >= {lo}, got {x!r}")
    return int(x)


def _index(x) -> int:
    """One offset: an integer of any kind (numpy, torch 0-d), never a bool, a float or a string."""
    if isinstance(x, (bool, np.bool_)) or "bool" in str(getattr(x, "dtype", "")):
        raise TypeError("a bool is no offset")
    return operator.index(x)


def _int64(x, name: str):
    """Tokens as int64 of their own module (numpy, CuPy, torch); lists and scalars through numpy."""
    if type(x).__module__.startswith("torch"):
        if x.dtype.is_floating_point or x.dtype.is_complex or "bool" in str(x.dtype):
            raise GtmkitError(f"{name} must be integers, got dtype {x.dtype}")
        return x.long()
    if not hasattr(x, "shape"):
        try:
            x = np.asarray(x)
        except (TypeError, ValueError, OverflowError) as e:
            raise GtmkitError(f"{name}: not an array of integers ({str(e).splitlines()[0]})") from None
        if x.size == 0:  # [] reads as float64: an empty token array is still one
            x = x.astype(np.int64)
    kind = np.dtype(x.dtype).kind if hasattr(x, "dtype") else "O"
    if kind not in "iu":
        raise GtmkitError(f"{name} must be integers, got dtype {x.dtype}")
    return x.astype(np.int64, copy=False)
