"""Synthetic users (requests) drawn from a synth catalog's world."""

from __future__ import annotations

import json

import numpy as np

from ..errors import GtmkitError
from ._hashing import _draw_cdf, _rng, _segment_cdf
from .sids import first_token_weights
from .world import _AGE_SHARE, AGE_BUCKETS, GENDERS, GENERATOR, World


# ---------------------------------------------------------------------------------------------------
# users


def synth_users(schema: dict, n: int, seed: int = 0) -> list:
    """n users drawn from the world of a synth catalog's schema (dict with meta from write_catalog).

    A user: {"country": "US", "age": "25-34", "gender": "f" (absent for ~10%), "location":
    ["US", "US:R07", "US:R07:C012"], "_interests": [t1, ...]}: 1..5 first SID tokens whose clusters
    have the user's country as a home (by token popularity; any token when none does). Keys starting
    with "_" are metadata the request encoder ignores."""
    meta = schema.get("meta") if isinstance(schema, dict) else None
    if not isinstance(meta, dict) or meta.get("generator") != GENERATOR or "world_seed" not in meta:
        raise GtmkitError("schema has no synth metadata (meta.generator == 'gtmkit synth catalog' with a world_seed):"
                          " users can only be drawn for catalogs written by `gtmkit synth catalog`")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise GtmkitError(f"synth users: n must be a non-negative integer, got {n!r}")
    try:
        world = World(int(meta["world_seed"]))
        vocab = int(meta.get("vocab", (schema.get("sid") or {}).get("vocab")))
        cat_seed = int(meta.get("seed", 0))
    except (TypeError, ValueError):
        raise GtmkitError("schema meta: world_seed, seed and vocab must be integers") from None
    cl = world.clusters(vocab)
    n = int(n)
    rng = _rng(seed, 0x05E7)
    country = world.draw_countries(rng.random(n))
    region = world.draw_regions(country, rng.random(n))
    city = world.draw_cities(region, rng.random(n))
    age = _draw_cdf(np.cumsum(_AGE_SHARE) / _AGE_SHARE.sum(), rng.random(n))
    no_gender = rng.random(n) < 0.10
    gender = np.where(rng.random(n) < 0.03, 2, (rng.random(n) < 0.5).astype(np.int64))
    n_int = 1 + _draw_cdf(np.cumsum([0.3, 0.25, 0.2, 0.15, 0.1]), rng.random(n))

    # clusters per home country, weighted by first-token popularity (segment-CDF draw)
    tw = first_token_weights(cat_seed, vocab)
    tok, slot = np.nonzero(cl.homes >= 0)
    hc = cl.homes[tok, slot]
    order = np.lexsort((tok, hc))
    hc, tok = hc[order], tok[order]
    seg = np.searchsorted(hc, np.arange(world.n_countries + 1))
    seg_cdf = _segment_cdf(hc, tw[tok] + 1e-12) if len(hc) else np.zeros(0)
    any_cdf = np.cumsum(tw)
    any_cdf[-1] = 1.0
    u = rng.random((n, 5))
    has = (seg[country + 1] > seg[country])[:, None]
    in_seg = np.minimum(np.searchsorted(seg_cdf, country[:, None] + u, side="right"),
                        np.maximum(seg[country + 1] - 1, 0)[:, None]) if len(hc) else np.zeros((n, 5), np.int64)
    interests = np.where(has, tok[in_seg] if len(hc) else 0, _draw_cdf(any_cdf, u))

    C, Rg = world.n_countries, world.n_regions
    names = world.location_strings
    users = []
    for i in range(n):
        c, rg, ct = int(country[i]), int(region[i]), int(city[i])
        user = {"country": names[c], "age": AGE_BUCKETS[age[i]]}
        if not no_gender[i]:
            user["gender"] = GENDERS[gender[i]]
        user["location"] = [names[c], names[C + rg], names[C + Rg + ct]]
        user["_interests"] = list(dict.fromkeys(interests[i, :n_int[i]].tolist()))
        users.append(user)
    return users


def write_users(path_or_stdout, users) -> int:
    """Write users as JSON lines (sorted keys) to a path or an open text stream; returns the count."""
    if hasattr(path_or_stdout, "write"):
        for u in users:
            path_or_stdout.write(json.dumps(u, sort_keys=True) + "\n")
        return len(users)
    try:
        with open(path_or_stdout, "w", encoding="utf-8", newline="\n") as f:
            return write_users(f, users)
    except OSError as exc:
        raise GtmkitError(f"{path_or_stdout}: cannot write users ({exc.strerror or exc})") from None

