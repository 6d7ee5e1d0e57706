"""model.generate() of a Hugging Face model, with and without gtmkit: a small T5 (random weights, built from a
config: nothing is downloaded) over a synthetic catalog's SIDs. Needs the extra hf: pip install 'gtmkit[hf]'."""
import sys
import tempfile
from pathlib import Path

import numpy as np

try:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration
except ImportError:
    sys.exit("examples/hf_generate.py needs transformers and torch: pip install 'gtmkit[hf]'")

import gtmkit
from gtmkit.integrations.transformers import GTMLogitsProcessor, SidTokenLayout, gtmkit_beam_search
from gtmkit.synth import synth_users, write_catalog

work = Path(tempfile.mkdtemp())
catalog, _ = write_catalog(work / "catalog.parquet", 20_000, seed=0)
index = gtmkit.build_index(catalog, work / "index")
V, L = index.vocab_size, index.sid_length
matcher = gtmkit.Matcher(index, device="cuda" if torch.cuda.is_available() else "cpu")
users = synth_users(index.manifest["schema"], 4, seed=1)
requests = [index.encode_request(u) for u in users]

# vocabulary: 3 specials (pad/start 0, EOS 1, unk 2), then one range of V SID tokens for every position
layout = SidTokenLayout(offset=3, vocab_size=3 + V)
torch.manual_seed(0)
model = T5ForConditionalGeneration(T5Config(vocab_size=3 + V, d_model=64, d_ff=128, num_layers=2, num_heads=4,
                                            d_kv=16, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))
model = model.to(matcher.device).eval()
context = torch.randint(3, 3 + V, (len(users), 16), device=matcher.device)  # the requests' context tokens
M = 16


def shares(out):
    """Live sequences (a request's beam can hold fewer valid SIDs than M: generate() pads with -1e9 scores),
    and the shares of them that are catalog SIDs and that hold an ad the request may see."""
    sids = layout.to_sid(out.sequences[:, 1:1 + L].cpu().numpy())  # after the decoder start token
    live = (out.sequences_scores > -1e8).cpu().numpy()
    valid = eligible = 0
    for row in np.flatnonzero(live):
        node = index.find(sids[row]) if (sids[row] >= 0).all() else -1
        valid += node >= 0
        eligible += node >= 0 and bool(index.ad_eligible(index.sid_ads(node), requests[row // M]).any())
    return int(live.sum()), valid / max(live.sum(), 1), eligible / max(live.sum(), 1)


kw = dict(num_beams=M, num_return_sequences=M, max_new_tokens=L, eos_token_id=None, length_penalty=0.0,
          return_dict_in_generate=True, output_scores=True)
plain = model.generate(context, **kw)
constrained = model.generate(context, logits_processor=[GTMLogitsProcessor(matcher, requests, M, layout)], **kw)
for name, out in (("generate()", plain), ("generate() + GTMLogitsProcessor", constrained)):
    live, valid, eligible = shares(out)
    print(f"{name:32s} {live:3d} live sequences: catalog SIDs {valid:6.1%}, holding an eligible ad {eligible:6.1%}")

# GRACE's per-step beam sizes inside generate(), with the exact post-filter
result = model.generate(context, custom_generate=gtmkit_beam_search, requests=requests, matcher=matcher,
                        beam_sizes=(1, 16, 64, 64), layout=layout, max_new_tokens=L)
for b, (ad_ids, _) in enumerate(result.ads):
    print(f"request {b}: {len(ad_ids)} eligible ads, best SID {tuple(int(t) for t in result.sids[b, 0])}, "
          f"first ads {np.asarray(ad_ids[:3]).tolist()}")
