"""Loading users for eval / match: JSON lines, or drawn from a synth index's world."""

from __future__ import annotations

import json

from ..errors import GtmkitError


def read_users_file(path) -> list:
    users = []
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    u = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise GtmkitError(f"{path}: line {i}: not valid JSON ({exc.msg})") from None
                if not isinstance(u, dict):
                    raise GtmkitError(f"{path}: line {i}: a user must be a JSON object")
                users.append(u)
    except OSError as exc:
        raise GtmkitError(f"{path}: cannot read users ({exc.strerror or exc})") from None
    if not users:
        raise GtmkitError(f"{path}: no users")
    return users


def synth_users_for(index, n: int, seed: int) -> list:
    from ..synth import synth_users

    return synth_users(index.manifest["schema"], n, seed)


def parse_user(text: str) -> dict:
    """--user accepts inline JSON or @file.json."""
    if text.startswith("@"):
        try:
            text = open(text[1:], encoding="utf-8").read()
        except OSError as exc:
            raise GtmkitError(f"{text[1:]}: cannot read user ({exc.strerror or exc})") from None
    try:
        u = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GtmkitError(f"--user: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(u, dict):
        raise GtmkitError("--user must be a JSON object, e.g. '{\"country\": \"US\"}'")
    return u


def parse_beams(ctx, param, value):
    import click

    try:
        beams = tuple(int(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter("expected comma-separated integers, e.g. 1,512,1024,1024") from None
    return beams
