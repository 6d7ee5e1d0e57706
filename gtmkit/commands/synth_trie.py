"""`gtmkit synth keys` / `gtmkit synth proposals`: succinct-trie workloads, added to the synth group."""

from __future__ import annotations

import click

from ._common import echo_json, handle_errors, output_options


@click.command("keys")
@click.option("-n", "--count", "n", required=True, type=click.IntRange(min=1), help="Number of distinct keys.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="Seed.")
@click.option("--vocab", type=click.IntRange(2, 2**31), default=2_200_000, show_default=True,
              help="Token vocabulary size (tokens 0 .. vocab-1, Zipf by id).")
@click.option("--min-len", type=click.IntRange(1, 4096), default=2, show_default=True, help="Shortest key.")
@click.option("--max-len", type=click.IntRange(1, 4096), default=8, show_default=True, help="Longest key.")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Parquet file to write (one list<int32> column 'key'); a new directory with --parts / --workers.")
@click.option("--parts", type=click.IntRange(min=1), default=1, show_default=True,
              help="Draw the keys as a directory of this many parts (no two share a key).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes drawing parts at once (implies --parts >= workers).")
@output_options("the summary", notice=False)
@handle_errors
def keys(n, seed, vocab, min_len, max_len, output, parts, workers, as_json, silent):
    """Write keyword-like integer keys (Parquet) for `gtmkit trie build`.

    Lengths min-len..max-len (mode min-len+1), tokens Zipf(1) over the vocabulary; same options give
    the same keys. With --parts, each part keeps the first tokens of one residue class (the Zipf law of the
    whole holds), so the key set differs from the one-file set but not with the number of workers.

    \b
    Example:
        gtmkit synth keys -n 10000000 --seed 1 -o keys.parquet
        gtmkit synth keys -n 1000 --vocab 50000 --max-len 4 -o small.parquet --json
        gtmkit synth keys -n 1000000000 --parts 64 --workers 2 -o keys/
    """
    from ..synth.keys import write_keys
    from ._common import StderrProgress

    if max_len < min_len:
        raise click.BadParameter(f"--max-len {max_len} is below --min-len {min_len}", param_hint="--max-len")
    with StderrProgress(silent=silent or as_json) as progress:
        summary = write_keys(output.rstrip("/") or output, n, seed=seed, vocab=vocab, min_len=min_len,
                             max_len=max_len, parts=parts, workers=workers, progress=progress)
    if as_json:
        echo_json(summary)
    else:
        click.echo(f"{output}: {n:,} keys, {summary['tokens']:,} tokens (mean length {summary['mean_length']})")


@click.command("proposals")
@click.option("--trie", "trie_dir", required=True, type=click.Path(file_okay=False), help="Trie directory.")
@click.option("-b", "--batch", "b", type=click.IntRange(min=1), default=1, show_default=True, help="Queries.")
@click.option("-T", "--steps", "T", type=click.IntRange(1, 4096), default=8, show_default=True, help="Positions.")
@click.option("-K", "--topk", "K", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Proposals per position.")
@click.option("-r", "--head", "r", type=click.IntRange(min=0), default=None,
              help="True-path head size per position [default: K // 10].")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="Seed.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help=".npz file to write.")
@output_options("the summary", silent=False)
@handle_errors
def proposals(trie_dir, b, T, K, r, seed, output, as_json):
    """Write NAR proposal grids (tokens, logp [b, T, K]) for a trie, as in FlashTrie Appendix K.

    Each position holds a head of r true-path tokens of a sampled key and position-stratified noise
    after it, with an AR-like log-prob tail.

    \b
    Example:
        gtmkit synth proposals --trie trie/ -b 16 -T 8 -K 1000 -o props.npz
        gtmkit synth proposals --trie trie/ -b 1 -K 600 -r 0 --seed 3 -o noise.npz
    """
    from ..trie.trie import SuccinctTrie
    from ..synth.proposals import write_proposals

    if r is not None and r > K:
        raise click.BadParameter(f"--head {r} exceeds --topk {K}", param_hint="--head")
    trie = SuccinctTrie.load(trie_dir, verify=False)
    summary = write_proposals(output, trie, b, T, K, seed=seed, r=r)
    if as_json:
        echo_json(summary)
    else:
        click.echo(f"{output}: {b} x {T} x {K} proposals (head r={summary['r']})")


def register(synth_group: click.Group) -> None:
    """Add `keys` and `proposals` to the `gtmkit synth` group."""
    synth_group.add_command(keys)
    synth_group.add_command(proposals)
