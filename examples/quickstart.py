"""Build a GTM index from a synthetic catalog and beam-search it with your own decoder (logits_fn)."""
import tempfile
from pathlib import Path

import numpy as np

import gtmkit
from gtmkit.synth import write_catalog

work = Path(tempfile.mkdtemp())
catalog, _ = write_catalog(work / "catalog.parquet", 50_000, seed=0)  # + catalog.schema.json
index = gtmkit.build_index(catalog, work / "index", partition="static", k=[1, 4, 4, 2])
matcher = gtmkit.Matcher(index, device="auto")                        # GPU when CuPy sees one

users = [{"country": "US", "age": "25-34", "gender": "f", "location": ["US"]},
         {"country": "DE", "location": ["DE", "DE:R03"]}]
requests = [index.encode_request(u) for u in users]
rng = np.random.default_rng(0)


def logits_fn(step, prev_tokens, parent_rows):
    # A real decoder reorders its KV cache by parent_rows, feeds prev_tokens and returns log-probs.
    x = rng.normal(size=(len(prev_tokens), index.vocab_size)).astype(np.float32)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


result = gtmkit.beam_search(matcher, requests, logits_fn, beam_sizes=(1, 64, 128, 128))
for b, (ad_ids, sid_rank) in enumerate(result.ads):  # exact post-filter output per request
    print(users[b]["country"], f"{len(ad_ids)} eligible ads; best SID {tuple(result.sids[b, 0].tolist())};",
          "first ads", ad_ids[:5].tolist())
