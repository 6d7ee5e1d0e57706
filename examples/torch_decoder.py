"""A small torch encoder-decoder (random weights) decoding SIDs with the GPU matcher (CD+GTM).

Beam-as-query cross-attention (GRACE §5.1): the M beams of a request are the queries of one attention
over that request's T_ctx encoder tokens, so the encoder K/V is computed once per request and never
repeated per beam. Per-step beam sizes (1, 512, 1024, 1024). Tensors cross to gtmkit through DLPack.

    python examples/torch_decoder.py          # needs a CUDA GPU, torch and cupy
"""
import sys
import tempfile
from pathlib import Path

try:
    import cupy  # noqa: F401  (the GPU matcher's arrays)
    import torch
    import torch.nn.functional as F
except ImportError as exc:
    sys.exit(f"examples/torch_decoder.py needs torch and CuPy ({(exc.name or str(exc)).split('.')[0]} is missing): "
             "pip install torch 'gtmkit[gpu]'")

import gtmkit
from gtmkit.synth import synth_users, write_catalog

D, H, T_CTX, L, V = 256, 8, 32, 4, 512
dev = "cuda"


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.feat = torch.nn.Embedding(4096, D)               # hashed user features -> context tokens
        self.enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, H, batch_first=True), 1)
        self.tok = torch.nn.Embedding(V + 1, D)               # + start token
        self.pos = torch.nn.Embedding(L + 1, D)
        self.self_attn = torch.nn.MultiheadAttention(D, H, batch_first=True)
        self.q, self.kv, self.out = torch.nn.Linear(D, D), torch.nn.Linear(D, 2 * D), torch.nn.Linear(D, V)

    def encode(self, feats):                                  # [B, T_ctx] ints -> per-request K, V
        ctx = self.enc(self.feat(feats))
        k, v = self.kv(ctx).chunk(2, dim=-1)                  # [B, T_ctx, D] each: computed once per request
        return k.view(*k.shape[:2], H, -1).transpose(1, 2), v.view(*v.shape[:2], H, -1).transpose(1, 2)

    def step(self, prefix, k, v, B):                          # prefix [R, t+1] tokens, R = B * M
        R, t1 = prefix.shape
        x = self.tok(prefix) + self.pos(torch.arange(t1, device=prefix.device))
        x = x + self.self_attn(x, x, x, need_weights=False)[0]  # short self-attention over the SID prefix
        h = x[:, -1].view(B, R // B, H, -1).transpose(1, 2)       # beam-as-query: [B, H, M, d]
        h = F.scaled_dot_product_attention(h, k, v)              # one attention per request, K/V not repeated
        h = h.transpose(1, 2).reshape(R, D)
        return F.log_softmax(self.out(h).float(), dim=-1)        # [R, V]


class TorchLogits:
    """logits_fn for gtmkit.beam_search: reorders its per-beam state by parent_rows, feeds prev_tokens."""

    def __init__(self, model, feats):
        self.model, self.B = model, feats.shape[0]
        self.k, self.v = model.encode(feats)

    @torch.no_grad()
    def __call__(self, step, prev_tokens, parent_rows):
        parents = torch.from_dlpack(parent_rows).long()         # CuPy -> torch, no copy
        prev = torch.from_dlpack(prev_tokens).long()
        if step == 0:
            self.prefix = torch.full((self.B, 1), V, device=dev)  # start token
        else:
            self.prefix = torch.cat([self.prefix[parents.clamp(min=0)], prev.clamp(min=0)[:, None]], dim=1)
        return self.model.step(self.prefix, self.k, self.v, self.B)  # torch tensor, read via DLPack


if __name__ == "__main__":
    work = Path(tempfile.mkdtemp())
    catalog, _ = write_catalog(work / "catalog.parquet", 300_000, seed=0)
    index = gtmkit.build_index(catalog, work / "index", partition="static", k=[1, 4, 4, 2])
    matcher = gtmkit.Matcher(index, device="cuda")
    users = synth_users(index.manifest["schema"], 16, seed=0)
    requests = [index.encode_request(u) for u in users]
    torch.manual_seed(0)
    model = TinyModel().to(dev).eval()
    feats = torch.randint(0, 4096, (len(users), T_CTX), device=dev)
    result = gtmkit.beam_search(matcher, requests, TorchLogits(model, feats), beam_sizes=(1, 512, 1024, 1024))
    for b in range(3):
        ads, rank = result.ads[b]
        print(f"request {b}: {int((result.leaf_nodes[b] >= 0).sum())} SIDs, {len(ads)} eligible ads; "
              f"best SID {tuple(result.sids[b, 0].tolist())} score {float(result.scores[b, 0]):.3f}")
