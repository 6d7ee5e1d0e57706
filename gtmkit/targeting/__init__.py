"""Targeting semantics: the bitmask layout, Bloom hashing and request encoding (semantics.py) and the exact
ad-level eligibility kernel (exact.py)."""
