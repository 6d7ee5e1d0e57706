"""`gtmkit synth`: synthetic ad catalogs (Parquet + schema JSON) and users (JSON lines)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import fields
from pathlib import Path

import click

from ..errors import ArtifactError, SchemaError
from ..artifact.container import manifest_path
from ..inputs.files import parse_json, read_text, short_repr
from ..inputs.schema import parse_schema
from ..synth import TargetingRates, synth_users, write_catalog, write_users
from ._common import StderrProgress, echo_json, handle_errors, output_options


def _rate_options(fn):
    for f in reversed(fields(TargetingRates)):
        fn = click.option(f"--{f.name.replace('_', '-')}", f.name, type=click.FloatRange(0.0, 1.0), default=None,
                          help=f"{f.metadata['help'][0].upper()}{f.metadata['help'][1:]} (default {f.default}).")(fn)
    return fn


@click.group("synth", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def command():
    """Generate synthetic ad catalogs and users, deterministic from their seeds.

    Catalogs follow the GRACE shape (ads/SID p50/p90/p99 = 1/2/11, Zipf first SID token, ~250
    countries, 7 age buckets, 3 genders, hierarchical locations) with targeting correlated with
    SID clusters; users come from the same world.

    \b
    Example:
        gtmkit synth catalog --ads 100000 --seed 1 -o catalog.parquet
        gtmkit synth users --schema catalog.schema.json -n 1000 -o users.jsonl
    """


@command.command("catalog")
@click.option("--ads", "n_ads", required=True, type=click.IntRange(min=1), help="Number of ads (rows).")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True, help="Catalog seed.")
@click.option("--vocab", type=click.IntRange(2, 2**31 - 1), default=512, show_default=True, help="SID vocabulary size.")
@click.option("--sid-length", type=click.IntRange(1, 64), default=4, show_default=True, help="Tokens per SID.")
@click.option("--world-seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True,
              help="Seed of the world (countries, places, SID-cluster profiles) shared with users.")
@_rate_options
@click.option("--bloom-bits", type=int, default=256, show_default=True, help="Location Bloom row bits (schema).")
@click.option("--bloom-hashes", type=int, default=3, show_default=True, help="Location Bloom hashes (schema).")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Parquet file to write (a new directory with --parts / --workers); the schema goes to "
                   "<stem>.schema.json beside it.")
@click.option("--parts", type=click.IntRange(min=1), default=1, show_default=True,
              help="Write a directory of this many Parquet parts (at most one a million ads).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes writing parts at once (implies --parts >= workers).")
@output_options("the summary")
@handle_errors
def catalog(n_ads, seed, vocab, sid_length, world_seed, bloom_bits, bloom_hashes, output, parts, workers, as_json,
            silent, **rates):
    """Write a synthetic ad catalog (Parquet) and its schema JSON.

    Same options give byte-identical files, with any number of workers. The rate options are shares in [0, 1].

    \b
    Example:
        gtmkit synth catalog --ads 1000000 --seed 7 -o data/catalog.parquet
        gtmkit synth catalog --ads 20000 --untargeted-country 0.5 -o small.parquet --json
        gtmkit synth catalog --ads 100000000 --parts 96 --workers 2 -o data/catalog/
    """
    from ..synth.catalog import parts_written
    from ..synth.world import ROWS_PER_GROUP

    asked = max(parts, workers)
    if asked > 1 and parts_written(n_ads, asked) < asked:
        click.echo(f"gtmkit: warning: {asked} parts asked but {n_ads:,} ads make {parts_written(n_ads, asked)} "
                   f"(a part holds whole row groups of {ROWS_PER_GROUP:,} ads)", err=True)
    t0 = time.perf_counter()
    with StderrProgress(silent=silent or as_json) as progress:
        cat_path, schema_path = write_catalog(output.rstrip("/") or output, n_ads, seed=seed, vocab=vocab,
                                              sid_length=sid_length, world_seed=world_seed, bloom_bits=bloom_bits,
                                              bloom_hashes=bloom_hashes, parts=parts, workers=workers,
                                              progress=progress, **rates)
    seconds = time.perf_counter() - t0
    meta = json.loads(Path(schema_path).read_text())["meta"]
    q = meta["ads_per_sid"]
    if as_json:
        echo_json({"catalog": cat_path, "schema": schema_path, "ads": meta["ads"], "sids": meta["sids"],
                   "ads_per_sid": q, "seconds": round(seconds, 3)})
    else:
        click.echo(f"{cat_path}: {meta['ads']} ads, {meta['sids']} SIDs, ads/SID p50/p90/p99 "
                   f"{q['p50']}/{q['p90']}/{q['p99']} (schema {schema_path}, {seconds:.1f} s)")


def _schema_from_index(index_dir) -> dict:
    manifest = manifest_path(index_dir)
    if not manifest.exists() and not manifest.is_symlink():
        raise ArtifactError(f"{index_dir}: no manifest.json; is this a gtmkit index directory?")
    d = parse_json(read_text(manifest, ArtifactError, "manifest"), ArtifactError, str(manifest))
    schema = d.get("schema") if isinstance(d, dict) else None
    if not isinstance(schema, dict):
        raise ArtifactError(f"{manifest}: no 'schema' object")
    return _checked(schema, str(manifest))


def _schema_from_file(path) -> dict:
    return _checked(parse_json(read_text(path, SchemaError, "schema"), SchemaError, str(path)), str(path))


def _checked(schema: dict, src: str) -> dict:
    """The same checks as a build (every key and type, one line each), and a world vocabulary that is
    the SID vocabulary: the world draws one cluster per token."""
    meta = schema.get("meta")
    if not isinstance(meta, dict) or "world_seed" not in meta:
        return schema  # not a synth catalog's schema: synth_users says so
    vocab = parse_schema(schema, src).vocab
    if "vocab" in meta and meta["vocab"] != vocab:
        raise SchemaError(f"{src}: meta.vocab {short_repr(meta['vocab'])} differs from sid.vocab {vocab}")
    return schema


@command.command("users")
@click.option("--index", "index_dir", type=click.Path(file_okay=False),
              help="Index directory: read the schema from its manifest.json.")
@click.option("--schema", "schema_file", type=click.Path(dir_okay=False),
              help="Schema JSON written by `gtmkit synth catalog`.")
@click.option("-n", "--count", "n", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Number of users.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True, help="Users seed.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="JSON-lines file [default: stdout].")
@output_options("the summary", silent=False, needs="-o")
@handle_errors
def users(index_dir, schema_file, n, seed, output, as_json):
    """Write synthetic users (JSON lines) drawn from a synth catalog's world.

    Give exactly one of --index and --schema. A user is {"country", "age", "gender" (absent for
    ~10%), "location": [country, region, city], "_interests": [first SID tokens]}; keys starting
    with "_" are metadata that request encoding ignores.

    \b
    Example:
        gtmkit synth users --index index/ -n 100 --seed 3 -o users.jsonl
        gtmkit synth users --schema catalog.schema.json -n 5 | head -1
    """
    if (index_dir is None) == (schema_file is None):
        raise click.UsageError("give exactly one of --index DIR and --schema FILE")
    schema = _schema_from_index(index_dir) if index_dir is not None else _schema_from_file(schema_file)
    people = synth_users(schema, n, seed=seed)
    if output is None:
        write_users(sys.stdout, people)
        return
    write_users(output, people)
    if as_json:
        echo_json({"users": output, "count": len(people), "seed": seed})
    else:
        click.echo(f"{output}: {len(people)} users")

