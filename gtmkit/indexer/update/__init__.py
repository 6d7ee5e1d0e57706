"""Catalog updates without a rebuild (docs/design.md §9): changed ads read against an index (changes.py), and
the updated index derived from it by copy-on-write (apply.py)."""

from .apply import UpdateReport, update_index
from .changes import read_changes

__all__ = ["UpdateReport", "read_changes", "update_index"]
