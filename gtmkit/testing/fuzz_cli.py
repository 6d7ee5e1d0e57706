"""Fuzz kind "cli": the `gtmkit` command line (click's CliRunner, in the case's child) on mutated
artifacts (verify, stats), malformed catalogs (build) and odd requests (match).

Property: exit 0, or exit 1 (2 for a usage error) with one `Error: ...` line on stderr (`verify` may
print one `FAIL ...` line per problem); never a traceback. An artifact `verify` passes must load and
answer like the untouched one."""

from __future__ import annotations

import json
from pathlib import Path

from .fuzz_core import OK_SAME, REFUSED, Wrong
from .fuzz_artifact import judge, mutate
from .fuzz_catalog import leftovers, make_inputs
from .fuzz_gen import random_user

ODD_USERS = [('{"%s": "\\ud800"}', "odd"), ('{"%s": ["\\udfff", "US"]}', "odd"), ('{"%s": 5}', "bad"),
             ('{"%s": ["US", null]}', "bad"), ('{"%s": {"a": 1}}', "bad"), ('[1]', "bad"), ('{"nope": "x"}', "bad"),
             ('{"%s": ', "bad"), ('@/nonexistent/user.json', "bad")]
BEAMS = [("1,3,5", ""), ("1,2,2", ""), ("0,3,5", "bad"), ("1,2", "bad"), ("a,b,c", "bad"), ("1,3,1000000000000", "bad"),
         ("1,-3,5", "bad")]


def invoke(args: list):
    """-> (exit code, stdout, stderr); re-raises an exception the command let escape."""
    from click.testing import CliRunner

    from ..cli import cli

    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception.with_traceback(r.exc_info[2])
    return r.exit_code, r.stdout, r.stderr


def check_refusal(code: int, err: str, what: str, per_problem: bool = False) -> None:
    """Raise Wrong unless a failed command said why in one line (or one FAIL line per problem)."""
    lines = [x for x in err.splitlines() if x.strip()]
    if code not in (1, 2):
        raise Wrong(f"{what}: exit code {code}")
    if any("Traceback" in x for x in lines):
        raise Wrong(f"{what}: traceback on stderr")
    if code == 2:  # click's usage error: usage lines, then one "Error:" line
        if not lines or not lines[-1].startswith("Error:"):
            raise Wrong(f"{what}: usage error without an Error line: {lines[-3:]}")
        return
    fails = [x for x in lines if x.startswith("FAIL ")] if per_problem else []
    rest = [x for x in lines if x not in fails]
    if len(rest) > 1 or (not rest and not fails):
        raise Wrong(f"{what}: {len(lines)} lines on stderr: {[x[:80] for x in lines[:3]]}")


def _artifact_command(rng, ctx, work: Path) -> str:
    name, art, what, checksummed = mutate(rng, ctx, work)
    cmd = "verify" if name != "trie" and rng.random() < 0.7 else "stats"
    ctx["note"] = f"gtmkit {cmd} on {name}: {what}"
    args = [cmd, art] + (["--json"] if rng.random() < 0.3 else []) + (["-s"] if cmd == "verify" else [])
    if name == "trie":
        args = ["trie", "stats", art]
    code, out, err = invoke(args)
    if code != 0 and "--json" in args and cmd == "verify":
        if code != 1 or json.loads(out).get("ok") is not False or "Traceback" in err:
            raise Wrong(f"gtmkit verify --json: exit {code}, output {out[:200]!r}")
        return REFUSED
    if code != 0:
        check_refusal(code, err, f"gtmkit {' '.join(map(str, args[:2]))}", per_problem=cmd == "verify")
        return REFUSED
    if cmd == "verify" and judge(rng, ctx, name, art, checksummed) == REFUSED:
        raise Wrong("gtmkit verify says OK, load_index(verify=True) refuses")
    return OK_SAME


def _build(rng, ctx, work: Path) -> str:
    x = make_inputs(rng, work)
    ctx["note"] = f"gtmkit build: {', '.join(x['bad']) or 'valid'}"
    part = x["partition"]
    args = ["build", x["catalog"], "-o", x["out"], "--schema", x["schema"], "-s"]
    if part.get("partition"):
        args += ["--partition", part["partition"]]
    if "k" in part:
        args += ["--k", ",".join(map(str, part["k"]))]
    if "target_fill" in part:
        args += ["--target-fill", part["target_fill"], "--k-max", part["k_max"]]
    code, out, err = invoke(args)
    if code == 0:
        if x["bad"]:
            raise Wrong(f"gtmkit build accepted {', '.join(x['bad'])}")
        return OK_SAME
    check_refusal(code, err, "gtmkit build")
    if leftovers(work):
        raise Wrong(f"gtmkit build failed but left {leftovers(work)}")
    if not x["bad"]:
        raise Wrong(f"gtmkit build refused a valid catalog: {err.strip()[:200]}")
    return REFUSED


def _user_json(rng, spec) -> tuple:
    """-> (--user text, label): a valid request of the fixture's attributes, or an odd / bad one."""
    if rng.random() < 0.35:
        return json.dumps(random_user(rng, spec)), ""
    text, label = ODD_USERS[int(rng.integers(len(ODD_USERS)))]
    names = sorted(spec["bitmask"]) + sorted(spec["bloom"])
    return (text % str(rng.choice(names)) if "%s" in text else text), label


def _match(rng, ctx, work: Path) -> str:
    user, ul = _user_json(rng, ctx["spec"])
    beams, bl = BEAMS[int(rng.integers(len(BEAMS)))]
    labels = [x for x in (ul, bl) if x]
    ctx["note"] = f"gtmkit match --user {user} --beams {beams}"
    args = ["match", ctx["paths"][str(rng.choice(["fixed", "jagged"]))], "--user", user, "--beams", beams, "--json"]
    code, out, err = invoke(args)
    if code == 0:
        if "bad" in labels:
            raise Wrong(f"gtmkit match accepted {user} / {beams}")
        json.loads(out)
        return OK_SAME
    check_refusal(code, err, "gtmkit match")
    if not labels:
        raise Wrong(f"gtmkit match refused a valid request: {err.strip()[:200]}")
    return REFUSED


def case(rng, ctx) -> str:
    work = Path(ctx["work"])
    r = rng.random()
    if r < 0.45:
        return _artifact_command(rng, ctx, work)
    if r < 0.75:
        return _build(rng, ctx, work)
    return _match(rng, ctx, work)
