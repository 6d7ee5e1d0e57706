"""`gtmkit match`: one request end to end (beam search with CD+GTM, post-filter, top ads)."""

from __future__ import annotations

import click

from ._common import cache_option, echo_json, handle_errors, output_options
from ._users import check_user, index_beams, parse_beams, parse_user


def match_user(index, user: dict, beams, logits: str = "peaked", seed: int = 0, device: str = "cpu",
               top: int = 10, gtm: bool = True) -> dict:
    import time

    from ..synth.logits import SyntheticDecoder
    from ..matcher.beam import as_numpy, beam_search
    from ..matcher.matcher import Matcher

    m = Matcher(index, device=device)
    req = index.encode_request(user)

    def search():
        return beam_search(m, [req], SyntheticDecoder([user], index.vocab_size, logits, seed), beams, gtm=gtm)

    search()  # warm-up: compiles the kernels on a first run, so that "ms" is the request alone
    t0 = time.perf_counter()
    res = search()
    secs = time.perf_counter() - t0
    ads, rank = (as_numpy(x) for x in res.ads[0])  # results may live on the GPU
    sids, scores, leaves = as_numpy(res.sids), as_numpy(res.scores), as_numpy(res.leaf_nodes)
    out = []
    for a, r in zip(ads[:top].tolist(), rank[:top].tolist()):
        out.append({"ad_id": a, "sid": [int(x) for x in sids[0, r]], "sid_rank": r, "score": float(scores[0, r])})
    return {"user": user, "sids_returned": int((leaves[0] >= 0).sum()), "eligible_ads": int(len(ads)),
            "ms": 1000 * secs, "top": out}


@click.command("match")
@click.argument("index_dir", type=click.Path(file_okay=False))
@click.option("--user", "user_json", required=True, help="Request as JSON (or @file.json).")
@click.option("--beams", callback=parse_beams, help="Per-step beam sizes, one a SID token [default: 1,512,1024,... "
              "fitted to the index's SID length: 1,512,1024,1024 for 4 tokens].")
@click.option("--logits", type=click.Choice(["random", "peaked"]), default="peaked", show_default=True,
              help="Synthetic decoder standing in for the model.")
@click.option("--seed", default=0, show_default=True)
@click.option("--top", default=10, show_default=True, help="Ads to print.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="cpu", show_default=True)
@cache_option
@output_options(silent=False)
@handle_errors
def command(index_dir, user_json, beams, logits, seed, top, device, cache, as_json):
    """Run one request end to end and print its top eligible ads with their SIDs and scores.

    \b
    Example:
        gtmkit match index/ --user '{"country": "US", "age": "25-34", "location": ["US", "US:R07"]}'
        gtmkit match index/ --user @user.json --top 20 --json
    """
    from ..index import load_index

    user = parse_user(user_json)
    index = load_index(index_dir, verify=False, cache=cache)
    check_user(index, user, "--user")
    beams = index_beams(index, beams)
    r = match_user(index, user, beams, logits, seed, device, top)
    if as_json:
        echo_json(r)
        return
    click.echo(f"{r['sids_returned']} SIDs -> {r['eligible_ads']} eligible ads in {r['ms']:.1f} ms")
    click.echo(f"{'rank':>5} {'ad_id':>16}  {'sid':<22}{'score':>10}")
    for x in r["top"]:
        click.echo(f"{x['sid_rank']:>5} {x['ad_id']:>16}  {str(tuple(x['sid'])):<22}{x['score']:>10.3f}")
