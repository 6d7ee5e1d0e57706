"""`read_header(path)`: what an artifact is, from its manifest alone: its kind (a GTM index or a succinct trie),
format version, the version it serves and a summary, without opening a single array."""

from __future__ import annotations

import pathlib
from typing import NamedTuple

from ..errors import ArtifactError
from . import index_format, remote, trie_format
from .container import _artifact_path, read_manifest
from .digest import digest_problems as _digest_problems
from .layout import acquire

KINDS = {index_format.FORMAT_NAME: ("index", index_format.SUPPORTED_VERSIONS),
         trie_format.FORMAT_NAME: ("trie", trie_format.SUPPORTED_VERSIONS)}


class Header(NamedTuple):
    """kind: "index" or "trie"; format: its format name ("gtmkit-index", "gtmkit-trie"); format_version;
    gtmkit_version: the gtmkit that wrote it; created: ISO time; version: the version directory the path
    serves (None for an artifact written without versions); nbytes: its members' bytes on disk; summary: for an
    index its counts (ads, sids, sid_length, vocab, nodes, ...), its bitmask and Bloom attributes and partition mode, for a trie its keys,
    nodes, maximum depth and high label bits."""

    kind: str
    format: str
    format_version: int
    gtmkit_version: str
    created: str
    version: str | None
    nbytes: int
    summary: dict


def read_header(path) -> Header:
    """The Header of the version the artifact at `path` serves. Reads manifest.json only (its digest checked
    where the format carries one); ArtifactError, in one line, where path is no gtmkit artifact or its manifest
    is damaged or of an unknown format or version."""
    if remote.is_url(path):  # the pointer and the manifest it names, read from the store (nothing cached)
        name, manifest = remote.read_manifest(path)
        root = remote.normalize(path)
        vdir = remote.Named(f"{root}/{name}", name)
    else:
        root = pathlib.Path(_artifact_path(path))
        vdir, lock = acquire(root)
        try:
            manifest = read_manifest(vdir)
        finally:
            if lock is not None:
                lock.close()
    name = manifest.get("format")
    if name not in KINDS:
        raise ArtifactError(f"{vdir}: not a gtmkit index or trie (format {name!r})")
    kind, supported = KINDS[name]
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version not in supported:
        raise ArtifactError(f"{vdir}: {name} format version {version!r} is not supported by this gtmkit "
                            f"(supported: {', '.join(map(str, supported))})")
    for problem in _digest_problems(vdir, manifest, version):
        raise ArtifactError(problem)
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise ArtifactError(f"{vdir}: invalid manifest (no files table)")
    nbytes = sum(int(f.get("bytes", 0)) for f in files.values() if isinstance(f, dict))
    return Header(kind, name, version, str(manifest.get("gtmkit_version", "")), str(manifest.get("created", "")),
                  None if vdir == root else vdir.name, nbytes, _summary(kind, manifest))


def _summary(kind: str, manifest: dict) -> dict:
    if kind == "trie":
        return {k: manifest.get(k) for k in ("num_keys", "num_nodes", "max_depth", "high_bits")}
    counts = manifest.get("counts")
    summary = dict(counts) if isinstance(counts, dict) else {}
    schema = manifest.get("schema")
    for group in ("bitmask", "bloom"):
        attrs = schema.get(group) if isinstance(schema, dict) else None
        if isinstance(attrs, dict):
            summary[f"{group}_attributes"] = sorted(attrs)
    partition = schema.get("partition") if isinstance(schema, dict) else None
    if isinstance(partition, dict) and "mode" in partition:
        summary["partition"] = partition["mode"]
    return summary
