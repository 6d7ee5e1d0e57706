"""`gtmkit trie`: build, inspect and search a succinct (LOUDS) trie of integer-token keys (docs/design.md §6)."""

from __future__ import annotations

import math
import time

import click
import numpy as np

from ..errors import GtmkitError
from ..inputs.files import regular_file
from ._cluster import check_cluster, dask_client, inputs, sharding_options, warnings_shown
from ._common import StderrProgress, cache_option, echo_json, handle_errors, output_options, report_problems
from ._stops import watched


def _why(exc: BaseException) -> str:
    """First line of a library exception, so an error stays one line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _summary(trie, seconds=None) -> str:
    s = trie.stats()
    took = f", built in {seconds:.2f} s" if seconds is not None else ""
    return (f"{s['keys']:,} keys, {s['nodes']:,} nodes, depth <= {s['max_depth']}, {s['bytes']:,} bytes "
            f"({s['bits_per_node']:.2f} bits/node, {s['bytes_per_key']:.2f} bytes/key){took}")


@click.group("trie", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def command():
    """Succinct trie of integer-token keys and constrained beam search over it.

    \b
    Example:
        gtmkit synth keys -n 1000000 -o keys.parquet
        gtmkit trie build keys.parquet -o trie/
        gtmkit synth proposals --trie trie/ -b 4 -o props.npz
        gtmkit trie search trie/ --proposals props.npz --bw 100
    """


@command.command("build")
@click.argument("keys", type=click.Path())
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(),
              help="Trie directory to write.")
@click.option("--column", default="key", show_default=True, help="Parquet column of list<int> keys.")
@sharding_options("KEYS", "key prefixes")
@click.option("-f", "--force", is_flag=True, help="Replace an existing trie directory (the output names the version replaced).")
@output_options("the statistics")
@handle_errors
def build(keys, out_dir, column, shards, workers, scheduler, memory_limit, force, as_json, silent,
          no_worker_timeout, staging):
    """Build a succinct trie from a Parquet column of integer lists: a file, a directory of Parquet files
    (hive partitions too) or a quoted glob, local or under a URL (s3://, gs://, hdfs://, file://).

    Keys are sorted and deduplicated; tokens must lie in [0, 2^31-1] and keys must not be empty.

    \b
    Example:
        gtmkit trie build keys.parquet -o trie/
        gtmkit trie build 'keys/part-*.parquet' -o trie/
        gtmkit trie build s3://bucket/keys/ -o trie/
        gtmkit trie build queries.parquet --column tokens -o trie/ -f --json
        gtmkit trie build keys/ -o trie/ --workers 2
    """
    from ..artifact.output import check_output
    from ..inputs.keys import key_error_at, read_key_column
    from ..trie.trie import SuccinctTrie

    check_output(out_dir, overwrite=force)  # before the keys are read: a refusal costs nothing
    check_cluster(workers, scheduler, no_worker_timeout, staging, shards)
    keys, = inputs(keys)
    if shards or workers or scheduler:
        t0 = time.perf_counter()
        with StderrProgress(silent or as_json) as bar, dask_client(scheduler) as client, watched(out_dir) as sw, \
                warnings_shown(silent):
            trie = SuccinctTrie.build_dataset(keys, out_dir, column, shards=shards, client=client, workers=workers,
                                              memory_limit=memory_limit, progress=bar, overwrite=force,
                                              no_worker_timeout=no_worker_timeout, staging=staging)
        _report(trie, out_dir, time.perf_counter() - t0, as_json, sw)
        return
    with watched(out_dir) as sw:
        col, src = read_key_column(keys, column)
        t0 = time.perf_counter()
        with StderrProgress(silent or as_json) as bar:
            try:
                trie = SuccinctTrie.build(col, progress=bar)
            except GtmkitError as exc:  # the library names key i: here that is row i of the file's column
                raise key_error_at(exc, src, column) from None
        seconds = time.perf_counter() - t0
        trie.save(out_dir, overwrite=force)
    _report(trie, out_dir, seconds, as_json, sw)


def _report(trie, out_dir, seconds: float, as_json: bool, sw) -> None:
    from .build import echo_replaced, replaced_fields
    if as_json:
        echo_json(dict(trie.stats(), path=str(out_dir), build_seconds=round(seconds, 3), **replaced_fields(sw)))
    else:
        click.echo(f"{out_dir}: {_summary(trie, seconds)}")
        echo_replaced(out_dir, sw)


@command.command("verify")
@click.argument("trie_dir", type=click.Path(file_okay=False))
@cache_option
@output_options(silent=False)
@handle_errors
def verify(trie_dir, cache, as_json):
    """Check a trie: manifest digest, checksums and every invariant the trie search relies on (the LOUDS tree,
    its directories, labels, levels, terminal flags), in bounded memory at any size.

    Prints each problem on one line (FAIL ...) and exits 1 when there is any.

    \b
    Example:
        gtmkit trie verify trie/
        gtmkit trie verify trie/ --json
    """
    from ..trie.trie import verify_trie

    t0 = time.perf_counter()
    problems = verify_trie(trie_dir, cache=cache)
    seconds = round(time.perf_counter() - t0, 3)
    report_problems(problems, as_json, {"trie": trie_dir, "seconds": seconds},
                    f"OK {trie_dir}: checksums, tree, directories, labels, levels, terminal flags ({seconds} s)")


@command.command("stats")
@click.argument("trie_dir", type=click.Path(file_okay=False))
@cache_option
@output_options("the statistics", silent=False)
@handle_errors
def stats(trie_dir, cache, as_json):
    """Counts, nodes per depth and bytes per array of a trie.

    \b
    Example:
        gtmkit trie stats trie/
        gtmkit trie stats trie/ --json
    """
    from ..trie.trie import SuccinctTrie

    trie = SuccinctTrie.load(trie_dir, verify=False, cache=cache)
    s = dict(trie.stats(), path=str(trie_dir))
    if as_json:
        echo_json(s)
        return
    click.echo(f"{trie_dir}: {_summary(trie)}")
    click.echo(f"{'depth':>5} {'nodes':>14}")
    for d, n in enumerate(s["nodes_per_depth"]):
        click.echo(f"{d:>5} {n:>14,}")
    click.echo(f"tails: {s['tail_nodes']:,} tail nodes below {s['link_nodes']:,} link nodes, {s['tail_bytes']:,} bytes "
               f"({s['tail_dict']:,} distinct tokens, codes {s['tail_code_bits'][0]}+{s['tail_code_bits'][1]} bits)")
    click.echo("bytes by structure: " + "  ".join(f"{k} {v:,}" for k, v in s["structure_bytes"].items()))
    click.echo("arrays: " + "  ".join(f"{k} {v:,}" for k, v in s["array_bytes"].items()))


NPZ_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip archive's first bytes: an .npz is one


def _load_proposals(path):
    p = regular_file(path, GtmkitError, "proposals .npz")
    try:
        with open(p, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise GtmkitError(f"{path}: cannot read proposals .npz ({exc.strerror or exc})") from None
    if head not in NPZ_MAGIC:  # np.load would try it as .npy or pickle and say so
        raise GtmkitError(f"{path}: not an .npz archive (expected arrays 'tokens' and 'logp', as written by "
                          f"gtmkit synth proposals)")
    try:
        with np.load(p, allow_pickle=False) as z:
            if "tokens" not in z or "logp" not in z:
                raise GtmkitError(f"{path}: need arrays 'tokens' and 'logp' (has {', '.join(z.files)})")
            tokens, logp = z["tokens"], z["logp"]
    except GtmkitError:
        raise
    except ValueError as exc:
        if "pickle" in str(exc):  # an object array: the member is not plain numbers
            raise GtmkitError(f"{path}: 'tokens' and 'logp' must be numeric arrays, not Python objects") from None
        raise GtmkitError(f"{path}: cannot read proposals .npz ({_why(exc)})") from None
    except Exception as exc:
        raise GtmkitError(f"{path}: cannot read proposals .npz ({_why(exc)})") from None
    if tokens.ndim != 3 or logp.shape != tokens.shape:
        raise GtmkitError(f"{path}: 'tokens' and 'logp' must both be [b, T, K], got shapes {list(tokens.shape)} "
                          f"and {list(logp.shape)}")
    if tokens.dtype.kind not in "iu" or logp.dtype.kind != "f":
        raise GtmkitError(f"{path}: 'tokens' must be integers and 'logp' floats, got {tokens.dtype} and {logp.dtype}")
    return tokens, logp


@command.command("search")
@click.argument("trie_dir", type=click.Path(file_okay=False))
@click.option("--proposals", "proposals", required=True, type=click.Path(dir_okay=False),
              help=".npz with tokens [b, T, K] int and logp [b, T, K] float (NAR grids).")
@click.option("--bw", "beam_width", required=True, type=click.IntRange(min=1), help="Beam width (results per query).")
@click.option("--theta-tok", type=float, default=-math.inf, help="Drop proposals with logp <= this.")
@click.option("--theta-sent", type=float, default=-math.inf, help="Drop prefixes with summed logp <= this.")
@click.option("--alpha", type=float, default=0.0, show_default=True, help="Length normalisation exponent.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), default="auto", show_default=True)
@click.option("--top", type=click.IntRange(min=0), default=5, show_default=True,
              help="Results shown per query (0 = all); JSON always has all.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write key_ids / scores to this .npz.")
@cache_option
@output_options("results", silent=False)
@handle_errors
def search(trie_dir, proposals, beam_width, theta_tok, theta_sent, alpha, device, top, output, cache, as_json):
    """Constrained beam search (NAR) of proposal grids over a trie.

    Prints, per query, the best keys (tokens) with their length-normalised scores.

    \b
    Example:
        gtmkit trie search trie/ --proposals props.npz --bw 100
        gtmkit trie search trie/ --proposals props.npz --bw 1000 --theta-tok -20 --alpha 1 --json
    """
    from ..trie.trie import SuccinctTrie
    from ..trie.search import trie_beam_search

    trie = SuccinctTrie.load(trie_dir, cache=cache)
    tokens, logp = _load_proposals(proposals)
    trie_beam_search(trie, tokens[:1], logp[:1], beam_width, theta_tok=theta_tok, theta_sent=theta_sent,
                     alpha=alpha, device=device)  # warm-up: "seconds" leaves out the first run's compile
    t0 = time.perf_counter()
    ids, scores = trie_beam_search(trie, tokens, logp, beam_width, theta_tok=theta_tok, theta_sent=theta_sent,
                                   alpha=alpha, device=device)
    if not isinstance(ids, np.ndarray):  # CuPy results from the GPU search: copying back waits for it
        ids, scores = ids.get(), scores.get()
    seconds = time.perf_counter() - t0
    if output:
        with open(output, "wb") as f:
            np.savez(f, key_ids=ids, scores=scores)
    found = (ids >= 0).sum(axis=1)
    if as_json:
        results = [[{"key_id": int(k), "tokens": list(trie.key(int(k))), "score": float(s)}
                    for k, s in zip(ids[q], scores[q]) if k >= 0] for q in range(len(ids))]
        echo_json({"trie": str(trie_dir), "queries": len(ids), "beam_width": beam_width,
                   "seconds": round(seconds, 6), "found": found.tolist(), "results": results})
        return
    click.echo(f"{len(ids)} queries, beam width {beam_width}: {seconds * 1e3:.2f} ms, "
               f"{int(found.sum()):,} keys found")
    for q in range(len(ids)):
        n = int(found[q]) if top == 0 else min(top, int(found[q]))
        shown = "  ".join(f"{list(trie.key(int(ids[q, i])))} {scores[q, i]:.3f}" for i in range(n))
        click.echo(f"query {q}: {int(found[q])} keys  {shown}")
