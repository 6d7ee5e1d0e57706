"""Modules that moved into gtmkit/trie, gtmkit/artifact and gtmkit/inputs import under their old paths for one
release, with a DeprecationWarning naming the new one, and are the same module objects; every public name
imports from gtmkit."""

from __future__ import annotations

import importlib
import sys

import pytest

import gtmkit
from gtmkit._moved import MOVED


def test_public_names_import():
    for name in gtmkit.__all__:
        assert getattr(gtmkit, name) is not None, name


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_is_the_new_module(old, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported before: the finder is asked again
    with pytest.warns(DeprecationWarning, match=f"{old} is now {MOVED[old]}"):
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(MOVED[old])


def test_old_package_holds_only_moved_modules():
    with pytest.raises(ImportError):
        importlib.import_module("gtmkit.formats.no_such_module")
