"""The manifest's own digest: a checksum over every other manifest field, so that an edit of any field is seen."""

from __future__ import annotations

import hashlib
import json
from typing import Iterator

DIGEST = "manifest_sha256"
DIGEST_SINCE = 2  # both gtmkit formats carry the manifest digest from version 2; version 1 never had one
MANIFEST = "manifest.json"


def manifest_digest(manifest: dict) -> str:
    """Hex sha256 of the canonical JSON (sorted keys, no whitespace, ASCII) of every manifest field but the
    digest itself: any edit of any field changes it."""
    body = {k: v for k, v in manifest.items() if k != DIGEST}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _why(exc: BaseException) -> str:
    """One-line description of a library exception, so no message ever spans lines."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def digest_problems(path, manifest: dict, version: int) -> Iterator[str]:
    """The digest must be present from DIGEST_SINCE on (deleting it is no way around it) and match."""
    digest = manifest.get(DIGEST)
    if digest is None:
        if version >= DIGEST_SINCE:
            yield f"{path / MANIFEST}: no {DIGEST} (format version {version} requires it)"
        return
    try:
        want = manifest_digest(manifest)
    except ValueError as exc:  # NaN/inf cannot be in a manifest gtmkit wrote
        yield f"{path / MANIFEST}: invalid manifest ({_why(exc)})"
        return
    if digest != want:
        yield f"{path / MANIFEST}: {DIGEST} mismatch, the manifest was edited (sha256 {want[:12]}...)"
