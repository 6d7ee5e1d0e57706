"""Loading users for eval / match: JSON lines, or drawn from a synth index's world."""

from __future__ import annotations

from ..errors import GtmkitError, RequestError
from ..inputs.files import parse_json, read_text


def read_users_file(path, index=None) -> list:
    """One JSON object per line (blank lines skipped). With an index, every user is also encoded, so
    a bad value is named by its line before any search runs."""
    users = []
    for i, line in enumerate(read_text(path, GtmkitError, "users file").splitlines(), 1):
        if not line.strip():
            continue
        u = parse_json(line, GtmkitError, f"{path}: line {i}")
        if not isinstance(u, dict):
            raise GtmkitError(f"{path}: line {i}: a user must be a JSON object, got {type(u).__name__}")
        if index is not None:
            check_user(index, u, f"{path}: line {i}")
        users.append(u)
    if not users:
        raise GtmkitError(f"{path}: no users")
    return users


def check_user(index, user, where: str) -> None:
    try:
        index.encode_request(user)
    except RequestError as exc:
        raise RequestError(f"{where}: {exc}") from None


def synth_users_for(index, n: int, seed: int) -> list:
    """n users drawn from the world of a `gtmkit synth catalog` index; for any other index, one line that points to
    --users-file and its format."""
    from ..synth import synth_users
    from ..synth.world import GENERATOR

    meta = index.manifest.get("schema", {}).get("meta")
    if not isinstance(meta, dict) or meta.get("generator") != GENERATOR:
        names = [a["name"] for a in index.layout.to_dict()["attributes"]] + [b["name"] for b in index.bloom]
        example = "{" + ", ".join(f'"{n}": "..."' for n in names[:3]) + "}"
        raise GtmkitError(f"{index.path}: this index was not built from a `gtmkit synth catalog` catalog, so there are "
                          f"no synthetic users to draw: give your users with --users-file users.jsonl, one JSON object "
                          f"a line of attribute -> value or list of values, e.g. {example}")
    return synth_users(index.manifest["schema"], n, seed)


def parse_user(text: str) -> dict:
    """--user accepts inline JSON or @file.json."""
    where = "--user"
    if text.startswith("@"):
        where = text[1:]
        text = read_text(where, GtmkitError, "user file")
    u = parse_json(text, GtmkitError, where)
    if not isinstance(u, dict):
        raise GtmkitError(f"{where}: a user must be a JSON object, e.g. '{{\"country\": \"US\"}}', "
                          f"got {type(u).__name__}")
    return u


def parse_beams(ctx, param, value):
    """--beams: comma-separated positive integers, or None (the index's default, index_beams)."""
    import click

    if value is None:
        return None
    try:
        beams = tuple(int(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter("expected comma-separated integers, e.g. 1,512,1024,1024") from None
    if not beams or min(beams) < 1:
        raise click.BadParameter(f"sizes must be positive integers, got {value}")
    return beams


def index_beams(index, beams) -> tuple:
    """The per-step beam sizes for an index: `beams` checked against its SID length L, or by default GRACE's
    schedule fitted to L (one start row, 512 after the first step, 1024 after every later one: (1, 512, 1024, 1024)
    at L=4, (1, 1024) at L=2, (1024,) at L=1)."""
    L = index.sid_length
    if beams is None:
        return (1024,) if L == 1 else (1, 1024) if L == 2 else (1, 512) + (1024,) * (L - 2)
    if len(beams) != L:
        raise GtmkitError(f"--beams: this index's SIDs have {L} tokens, so --beams takes {L} sizes (one a step, the "
                          f"first 1), got {len(beams)}: {','.join(map(str, beams))}")
    return beams
