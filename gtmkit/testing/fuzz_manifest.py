"""Manifest digests for the fuzz suite: find how an artifact's manifest digest was made and rewrite a
mutated manifest so that its digest stays valid (the writer's way), or say it cannot."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from ..artifact.container import MANIFEST, manifest_path

DIGEST_KEY = re.compile(r"(manifest_)?(sha256|digest|checksum)", re.I)


def digest_key(manifest: dict):
    keys = [k for k in manifest if k != "files" and DIGEST_KEY.fullmatch(k) and isinstance(manifest[k], str)]
    return keys[0] if keys else None


def _digest_forms(manifest: dict, key: str) -> list:
    body = {k: v for k, v in manifest.items() if k != key}
    dumps = [json.dumps(body, sort_keys=True, indent=1, allow_nan=False) + "\n",
             json.dumps(body, sort_keys=True, indent=1, allow_nan=False),
             json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False),
             json.dumps(body, sort_keys=True, allow_nan=False)]
    return [hashlib.sha256(d.encode()).hexdigest() for d in dumps]


def digest_status(path) -> str:
    """How value edits can keep a manifest digest valid: 'none' (the format has none), 'recomputed
    (<key>)', or 'not reproducible (<key>)' (then every value edit is refused by the digest alone)."""
    man = json.loads(manifest_path(path).read_text())
    key = digest_key(man)
    if key is None:
        return "none"
    return f"{'recomputed' if man[key] in _digest_forms(man, key) else 'not reproducible'} ({key})"


def write_manifest(path: Path, manifest: dict, original: dict, recompute: bool) -> None:
    """Write the manifest as the writer does; with recompute, refresh a manifest digest the way the
    untouched manifest's digest was made (found by trying the writer's likely spellings)."""
    key = digest_key(original)
    if key and recompute and key in manifest:
        forms = _digest_forms(original, key)
        if original[key] in forms:
            manifest[key] = _digest_forms(manifest, key)[forms.index(original[key])]
    (path / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n", encoding="utf-8")
