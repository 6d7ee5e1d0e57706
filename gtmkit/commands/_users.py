"""Loading users for eval / match: JSON lines, or drawn from a synth index's world."""

from __future__ import annotations

from ..errors import GtmkitError, RequestError
from ..formats.inputs import parse_json, read_text


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
    from ..synth import synth_users

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
    import click

    try:
        beams = tuple(int(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter("expected comma-separated integers, e.g. 1,512,1024,1024") from None
    return beams
