"""GRACE's encoder-decoder end to end: a T5 of GRACE's decoder shape (random weights, built from a config: nothing
is downloaded) encodes each request's context tokens, gtmkit.decoding.SidDecoder decodes SIDs with per-step beam
sizes under CD+GTM, and the exact post-filter turns the SIDs into the ads each request may see.

    python examples/grace_decoder.py            # a GPU: GRACE's shape in bf16, the search one CUDA graph
    python examples/grace_decoder.py --small    # a small model and catalog (the default without a GPU)

Needs the extra hf (pip install 'gtmkit[hf]'), and gtmkit[gpu] (CuPy) for the GPU."""
import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration
except ImportError:
    sys.exit("examples/grace_decoder.py needs transformers and torch: pip install 'gtmkit[hf]'")

import gtmkit
from gtmkit.decoding import SidDecoder
from gtmkit.integrations.layout import SidTokenLayout
from gtmkit.synth import synth_users, write_catalog

ap = argparse.ArgumentParser(description="GRACE's encoder-decoder with SidDecoder, CD+GTM and the post-filter")
size = ap.add_mutually_exclusive_group()
size.add_argument("--small", action="store_true", help="a small model and catalog (the default without a GPU)")
size.add_argument("--grace", action="store_true", help="GRACE's shape (the default on a GPU)")
args = ap.parse_args()

try:
    import cupy  # noqa: F401  (the GPU matcher)
    gpu = torch.cuda.is_available()
except ImportError:
    gpu = False
grace = args.grace or (gpu and not args.small)
if grace and not gpu:
    print("no GPU (torch.cuda and CuPy): GRACE's shape runs on the CPU in float32, which takes a few minutes")
if grace:   # GRACE's decoder: 3 layers, 16 heads x 128, 128 context tokens, 16 requests, beams 1,512,1024,1024
    shape, n_ads, B, context, beams = dict(d_model=1024, num_heads=16, d_kv=128, d_ff=4096), 300_000, 16, 128, \
        (1, 512, 1024, 1024)
else:
    shape, n_ads, B, context, beams = dict(d_model=64, num_heads=2, d_kv=32, d_ff=256), 20_000, 4, 16, (1, 32, 64, 64)
if not gpu:
    torch.set_num_threads(1)  # the CPU matcher's numba threads take the cores between steps

work = Path(tempfile.mkdtemp())
catalog, _ = write_catalog(work / "catalog.parquet", n_ads, seed=0)  # 512 SID tokens, SIDs of 4 tokens
index = gtmkit.build_index(catalog, work / "index", partition="static", k=[1, 4, 4, 2])
matcher = gtmkit.Matcher(index, device="cuda" if gpu else "cpu")
V, L = index.vocab_size, index.sid_length
users = synth_users(index.manifest["schema"], B, seed=0)
requests = [index.encode_request(u) for u in users]

# vocabulary: 3 specials (pad and decoder start 0, EOS 1, unk 2), then one range of V SID tokens for every position
layout = SidTokenLayout(3, 3 + V, eos_token_id=1)
torch.manual_seed(0)
config = T5Config(vocab_size=3 + V, **shape, feed_forward_proj="relu", num_layers=3, num_decoder_layers=3,
                  decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
device = "cuda" if gpu else "cpu"
model = T5ForConditionalGeneration(config).to(device, torch.bfloat16 if gpu else torch.float32).eval()
# each request's context: tokens a real model would get from the user's history (random here)
context_ids = torch.randint(3, 3 + V, (B, context), device=device)

decoder = SidDecoder(model, matcher, layout)  # bf16 on the GPU, float32 on the CPU
result = decoder.search(context_ids, requests, beams)  # on the GPU the first call captures the CUDA graph


def timed(reps):
    """ms a batch of B requests (encoder, decoder, CD+GTM, post-filter), the median of `reps` calls."""
    ms = []
    for _ in range(reps):
        t = time.perf_counter()
        decoder.search(context_ids, requests, beams)  # returns once the ads are known
        if gpu:
            torch.cuda.synchronize()
        ms.append(1e3 * (time.perf_counter() - t))
    return float(np.median(ms))


ms = timed(20 if gpu else 5)
plain = decoder.search(context_ids, requests, beams, gtm=False)  # CD only: the model's favourite SIDs


def eligible_share(res):
    """The eligible-ad share: of the SIDs a search returns (the final beams that hold a SID, over all requests),
    the share that hold at least one ad the request may see, i.e. one the exact post-filter keeps. GTM tests the ORed
    targeting of the ads below each trie node (a few partitions a node, Bloom filters for string rules): it never
    prunes an eligible ad, but a SID it lets through can hold none, so the share is high with GTM, not always 100%."""
    returned = sum(int((np.asarray(leaves.get() if hasattr(leaves, "get") else leaves) >= 0).sum())
                   for leaves in res.leaf_nodes)
    kept = sum(len(np.unique(rank.get() if hasattr(rank, "get") else rank)) for _, rank in res.ads)
    return kept / max(returned, 1)


print(f"{index.num_sids:,} SIDs of {n_ads:,} ads; T5 d_model {shape['d_model']}, {shape['num_heads']} heads x "
      f"{shape['d_kv']}, 3 + 3 layers, {'bf16 on the GPU (one CUDA graph)' if gpu else 'float32 on the CPU'}; "
      f"{B} requests x {context} context tokens, beams {beams}")
print(f"{ms:.1f} ms a batch of {B} requests ({ms / B:.2f} ms a request): encoder, decoder, CD+GTM, post-filter")
print(f"eligible-ad share of the returned SIDs: CD+GTM {eligible_share(result):.1%}, "
      f"CD only {eligible_share(plain):.1%}")
for b in range(min(B, 3)):
    ads, rank = result.ads[b]
    ads = np.asarray(ads.get() if hasattr(ads, "get") else ads)
    sid = np.asarray(result.sids[b, 0].get() if hasattr(result.sids, "get") else result.sids[b, 0])
    print(f"request {b} ({users[b]['country']}): {len(ads)} eligible ads, best SID {tuple(sid.tolist())}, "
          f"first ads {ads[:3].tolist()}")
