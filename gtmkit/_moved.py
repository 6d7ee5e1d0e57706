"""Module paths that moved when the succinct trie got its own package and the artifact code split into
artifact/ and inputs/: importable under the old name for one release, with a DeprecationWarning naming the new
one. An old package path (gtmkit.formats) is an empty package that only holds the moved modules."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

MOVED = {
    "gtmkit.formats.array_checks": "gtmkit.artifact.array_checks",
    "gtmkit.formats.artifact": "gtmkit.artifact.container",
    "gtmkit.formats.catalog": "gtmkit.inputs.catalog",
    "gtmkit.formats.dataset": "gtmkit.inputs.dataset",
    "gtmkit.formats.index_checks": "gtmkit.artifact.index_checks",
    "gtmkit.formats.index_format": "gtmkit.artifact.index_format",
    "gtmkit.formats.inputs": "gtmkit.inputs.files",
    "gtmkit.formats.layout": "gtmkit.artifact.layout",
    "gtmkit.formats.locks": "gtmkit.artifact.locks",
    "gtmkit.formats.npy": "gtmkit.artifact.npy",
    "gtmkit.formats.output": "gtmkit.artifact.output",
    "gtmkit.formats.schema": "gtmkit.inputs.schema",
    "gtmkit.formats.staging": "gtmkit.artifact.staging",
    "gtmkit.formats.writes": "gtmkit.artifact.writes",
    "gtmkit.indexer.shards.cluster": "gtmkit.sharding.cluster",
    "gtmkit.indexer.shards.worker_output": "gtmkit.sharding.worker_output",
    "gtmkit.indexer.succinct.bits": "gtmkit._rank_select",
    "gtmkit.indexer.succinct.build": "gtmkit.trie.build",
    "gtmkit.indexer.succinct.checks": "gtmkit.artifact.trie_checks",
    "gtmkit.indexer.succinct.format": "gtmkit.artifact.trie_format",
    "gtmkit.indexer.succinct.inputs": "gtmkit.inputs.keys",
    "gtmkit.indexer.succinct.nav": "gtmkit.trie.nav",
    "gtmkit.indexer.succinct.shards": "gtmkit.trie.shards",
    "gtmkit.indexer.succinct.trie": "gtmkit.trie.trie",
    "gtmkit.matcher.args": "gtmkit._args",
    "gtmkit.matcher.cuda.source": "gtmkit._gpu.source",
    "gtmkit.matcher.served": "gtmkit.matcher.matcher",
    "gtmkit.matcher.succinct.gpu_tables": "gtmkit.trie.gpu_tables",
    "gtmkit.matcher.succinct.search": "gtmkit.trie.search",
    "gtmkit.matcher.succinct.search_cpu": "gtmkit.trie.search_cpu",
    "gtmkit.matcher.succinct.search_cuda": "gtmkit.trie.search_cuda",
    "gtmkit.matcher.succinct.server_cuda": "gtmkit.trie.server_cuda",
}
OLD_PACKAGES = ("gtmkit.formats", "gtmkit.indexer.succinct", "gtmkit.matcher.succinct")


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str | None):
        self.new = new

    def create_module(self, spec):
        if self.new is None:
            module = types.ModuleType(spec.name, "Moved: see gtmkit._moved.MOVED")
            module.__path__ = []
            return module
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in OLD_PACKAGES:
            return importlib.util.spec_from_loader(name, _Alias(None), is_package=True)
        new = MOVED.get(name)
        if new is None:
            return None
        warnings.warn(f"{name} is now {new}; the old path goes in the next release", DeprecationWarning,
                      stacklevel=2)
        return importlib.util.spec_from_loader(name, _Alias(new))


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
