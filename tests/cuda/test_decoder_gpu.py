"""SidDecoder on the GPU: the captured graph equals the eager decoder, also when replayed for other requests and
inputs; fp32 on the GPU equals the CPU decoder; bf16 returns catalog SIDs whose every prefix passes GTM, and
mostly the fp32 decoder's top SIDs."""

from __future__ import annotations

import numpy as np
import pytest

from gtmkit._gpu import cuda_available

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="needs the hf extra: pip install 'gtmkit[hf]'")
pytest.importorskip("transformers", reason="needs the hf extra: pip install 'gtmkit[hf]'")
if not (cuda_available() and torch.cuda.is_available()):
    pytest.skip("needs CuPy and torch with a CUDA device", allow_module_level=True)

import cupy as cp  # noqa: E402

import gtmkit  # noqa: E402
from gtmkit.decoding import SidDecoder  # noqa: E402
from gtmkit.integrations.transformers import SidTokenLayout, gtmkit_beam_search  # noqa: E402
from support.catalogs import random_catalog, random_user, schema_dict, write  # noqa: E402
from support.hf_models import SPECIALS  # noqa: E402

V, L = 12, 3
SIZES = (1, 16, 32)


def _model(seed, gated=False):
    from transformers import T5Config, T5ForConditionalGeneration
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=SPECIALS + V, d_model=64, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                   d_kv=16, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                   feed_forward_proj="gated-gelu" if gated else "relu")
    return T5ForConditionalGeneration(cfg).eval()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decoder")
    cat = write(tmp, random_catalog(seed=11, n_ads=3000, L=L, V=V, n_sids=900), schema_dict(L=L, V=V))
    idx = gtmkit.build_index(cat, tmp / "idx")
    rng = np.random.default_rng(4)
    users = [random_user(rng) for _ in range(8)]
    return idx, [idx.encode_request(u) for u in users]


def _inputs(seed, B, N=9):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(SPECIALS, SPECIALS + V, (B, N), generator=g)
    mask = torch.ones(B, N, dtype=torch.long)
    mask[0, N - 3:] = 0  # one request with padded context
    return ids, mask


def _same(a, b, atol=1e-4):
    assert np.array_equal(cp.asnumpy(a.sids), cp.asnumpy(b.sids))
    sa, sb = cp.asnumpy(a.scores), cp.asnumpy(b.scores)
    assert np.array_equal(np.isfinite(sa), np.isfinite(sb))
    assert np.allclose(sa[np.isfinite(sa)], sb[np.isfinite(sb)], atol=atol)
    for (x1, r1), (x2, r2) in zip(a.ads, b.ads):
        assert np.array_equal(cp.asnumpy(x1), cp.asnumpy(x2)) and np.array_equal(cp.asnumpy(r1), cp.asnumpy(r2))


@pytest.mark.parametrize("dtype,gated", [("float32", False), ("bfloat16", False), ("bfloat16", True)])
def test_graph_replays_equal_eager(built, dtype, gated):
    idx, reqs = built
    model = _model(1, gated).cuda()
    layout = SidTokenLayout(SPECIALS, SPECIALS + V, eos_token_id=1)
    dec = SidDecoder(model, gtmkit.Matcher(idx, "cuda"), layout, dtype=dtype)
    for seed, rs in ((0, reqs[:4]), (1, reqs[4:]), (2, reqs[2:6])):  # the first captures, the others replay
        ids, mask = _inputs(seed, 4)
        ids, mask = ids.cuda(), mask.cuda()
        eager = dec.search(ids, rs, SIZES, attention_mask=mask, graph=False)
        graphed = dec.search(ids, rs, SIZES, attention_mask=mask)
        _same(graphed, eager, atol=1e-4 if dtype == "float32" else 1e-2)
    assert len(dec._graphs) == 1


def test_fp32_gpu_equals_cpu_and_generate(built):
    idx, reqs = built
    layout = SidTokenLayout(SPECIALS, SPECIALS + V, eos_token_id=1)
    model = _model(2)
    ids, mask = _inputs(3, 4)
    cpu = SidDecoder(model, gtmkit.Matcher(idx, "cpu"), layout).search(ids, reqs[:4], SIZES, attention_mask=mask)
    gpu_model = _model(2).cuda()
    m = gtmkit.Matcher(idx, "cuda")
    gpu = SidDecoder(gpu_model, m, layout, dtype="float32").search(ids.cuda(), reqs[:4], SIZES,
                                                                   attention_mask=mask.cuda())
    _same(gpu, cpu)
    ref = gpu_model.generate(ids.cuda(), attention_mask=mask.cuda(), custom_generate=gtmkit_beam_search,
                             requests=reqs[:4], matcher=m, beam_sizes=SIZES, layout=layout)
    _same(gpu, ref)


def test_bf16_sids_are_eligible_and_mostly_fp32s(built):
    idx, reqs = built
    layout = SidTokenLayout(SPECIALS, SPECIALS + V, eos_token_id=1)
    model = _model(5).cuda()
    m = gtmkit.Matcher(idx, "cuda")
    ids, mask = (x.cuda() for x in _inputs(6, 8))
    bf = SidDecoder(model, m, layout).search(ids, reqs, SIZES, attention_mask=mask)
    fp = SidDecoder(model, m, layout, dtype="float32").search(ids, reqs, SIZES, attention_mask=mask)
    sids, leaves = cp.asnumpy(bf.sids), cp.asnumpy(bf.leaf_nodes)
    for b in range(len(reqs)):
        for j in range(sids.shape[1]):
            if leaves[b, j] < 0:
                continue
            n = 0
            for tok in sids[b, j]:
                n = idx.child(n, int(tok))
                assert n >= 0 and idx.node_passes(n, reqs[b])  # a catalog SID, every prefix passing GTM
            assert n == leaves[b, j] == idx.find(sids[b, j])
    top_bf, top_fp = sids[:, 0], cp.asnumpy(fp.sids)[:, 0]
    agree = float(np.mean([np.array_equal(a, b) for a, b in zip(top_bf, top_fp)]))
    assert agree >= 0.5, agree  # bf16 rounding may reorder near-ties; the share is printed by decode_gpu.py
