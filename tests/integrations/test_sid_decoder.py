"""gtmkit.decoding.SidDecoder on the CPU against generate(): tiny random T5 models (relu and gated FFN, tied and
separate heads, several depths) decode the same SIDs, scores and post-filtered ads as
generate(custom_generate=gtmkit_beam_search) with per-step beam sizes, and as generate(num_beams=M) with
GTMLogitsProcessor at a fixed beam size; with gtm=False the same SIDs as the CD-only search, all of them catalog
SIDs; and every input it refuses, it refuses with a one-line GtmkitError."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the hf extra: pip install 'gtmkit[hf]'")
pytest.importorskip("transformers", reason="needs the hf extra: pip install 'gtmkit[hf]'")

from transformers import T5Config, T5ForConditionalGeneration  # noqa: E402

import gtmkit  # noqa: E402
from gtmkit.decoding import SidDecoder  # noqa: E402
from gtmkit.errors import GtmkitError  # noqa: E402
from gtmkit.integrations.transformers import GTMLogitsProcessor, SidTokenLayout, gtmkit_beam_search  # noqa: E402

from support.catalogs import random_catalog, random_user, schema_dict, write  # noqa: E402
from support.hf_models import SPECIALS, gpt2  # noqa: E402

V = 6  # SID vocabulary of both indexes


def _world(folder, L: int, seed: int):
    """(index, catalog SIDs as a set of tuples) of a random catalog with SIDs of L tokens."""
    table = random_catalog(seed, n_ads=240, L=L, V=V, n_sids=120)
    index = gtmkit.build_index(write(folder, table, schema_dict(L=L, V=V)), folder / "index")
    return index, {tuple(int(t) for t in s) for s in table.column("sid").to_pylist()}


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    return {L: _world(tmp_path_factory.mktemp(f"sid_decoder_L{L}"), L, seed=10 + L) for L in (3, 4)}


def _layout(L: int, kind: str) -> SidTokenLayout:
    """per_position: a range per SID position after the specials; shared: one range in the middle. Both leave
    tokens outside every SID range (the log-softmax runs over the whole vocabulary)."""
    if kind == "per_position":
        return SidTokenLayout([SPECIALS + d * V for d in range(L)], SPECIALS + L * V + 5)
    return SidTokenLayout(SPECIALS + 4, SPECIALS + 4 + V + 3)


def _t5(vocab: int, ff: str, head: str, layers: int, seed: int, heads: int = 2):
    """A random T5 with `layers` encoder and decoder blocks. head "tied": the embeddings, the decoder's output scaled
    by d_model ** -0.5; "unscaled": tie_word_embeddings=False as it comes (transformers 5 keeps the head tied and
    only drops the scaling, as a T5 v1.1 config loads); "separate": that, and its own random lm_head."""
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=vocab, d_model=32, d_ff=48, num_layers=layers, num_decoder_layers=layers,
                   num_heads=heads, d_kv=32 // heads, feed_forward_proj=ff, decoder_start_token_id=0, pad_token_id=0,
                   eos_token_id=1, tie_word_embeddings=head == "tied")
    model = T5ForConditionalGeneration(cfg).eval()
    if head == "tied":
        assert model.lm_head.weight.data_ptr() == model.shared.weight.data_ptr()
        return model
    assert not getattr(cfg, "scale_decoder_outputs", False)
    if head == "separate":
        if model.lm_head.weight.data_ptr() == model.shared.weight.data_ptr():
            model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
        assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr()
    return model


def _requests(index, B: int, seed: int):
    rng = np.random.default_rng(seed)
    users = [random_user(rng) for _ in range(B - 1)] + [{}]  # one user with no targeting attributes
    return [index.encode_request(u) for u in users]


def _inputs(vocab: int, B: int, N: int, seed: int):
    """Random context tokens [B, N] and a mask: row 0 padded on the right, row 1 on the left (pad id 0 under the
    mask), the others full."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(SPECIALS, vocab, (B, N), generator=g)
    mask = torch.ones_like(x)
    mask[0, N // 2 + 1:] = 0
    if B > 1:
        mask[1, :N // 3] = 0
    return x.masked_fill(mask == 0, 0), mask


def _same_result(got, want):
    """got and want decode the same SIDs (exactly), scores (1e-4, -inf in the same places), leaves, beams, ads."""
    assert np.array_equal(got.sids, want.sids)
    assert np.array_equal(got.leaf_nodes, want.leaf_nodes)
    assert np.array_equal(got.beams, want.beams)
    s, w = np.asarray(got.scores), np.asarray(want.scores)
    assert np.array_equal(np.isneginf(s), np.isneginf(w))
    assert np.isfinite(w).any() and not np.isnan(s).any()
    assert np.allclose(s[np.isfinite(w)], w[np.isfinite(w)], atol=1e-4, rtol=0)
    if want.ads is None:
        assert got.ads is None
        return
    assert len(got.ads) == len(want.ads)
    for (a, ra), (b, rb) in zip(got.ads, want.ads):
        assert np.array_equal(a, b) and np.array_equal(ra, rb)


def _check_ads(index, result, requests):
    """The post-filter is exact: per request, (rank, ad id) of every eligible ad of every returned SID, in order."""
    for b, (ads, rank) in enumerate(result.ads):
        want = []
        for r, leaf in enumerate(np.asarray(result.leaf_nodes[b]).tolist()):
            if leaf >= index.first_leaf:
                ids = index.sid_ads(leaf)
                want += [(r, int(a)) for a in ids[index.ad_eligible(ids, requests[b])]]
        assert list(zip(rank.tolist(), ads.tolist())) == sorted(want)


# --- per-step beam sizes: SidDecoder == generate(custom_generate=gtmkit_beam_search) ----------------------
CONFIGS = [  # (feed-forward, head, depth of encoder and decoder)
    ("relu", "tied", 2),
    ("gated-gelu", "tied", 1),
    ("relu", "separate", 3),
    ("gated-gelu", "separate", 2),
    ("gated-gelu", "unscaled", 2),
]
CASES = [  # (seed, SID length, per-step beam sizes, layout, context length)
    (0, 3, (1, 4, 8), "per_position", 7),
    (1, 4, (1, 8, 8, 16), "shared", 9),
    (2, 4, (1, 3, 12, 5), "per_position", 4),
]


@pytest.mark.parametrize("ff, head, layers", CONFIGS)
@pytest.mark.parametrize("seed, L, sizes, kind, N", CASES)
def test_decoder_equals_custom_generate(worlds, ff, head, layers, seed, L, sizes, kind, N):
    index, _ = worlds[L]
    lay = _layout(L, kind)
    model = _t5(lay.vocab_size, ff, head, layers, seed=100 + seed, heads=1 + seed % 2 * 3)
    m = gtmkit.Matcher(index)
    decoder = SidDecoder(model, m, lay)
    for B, batch_seed in ((3, seed), (2, seed + 50)):  # one decoder, searches of different shapes
        reqs = _requests(index, B, batch_seed)
        x, mask = _inputs(lay.vocab_size, B, N + B - 3, batch_seed)
        want = model.generate(x, attention_mask=mask, custom_generate=gtmkit_beam_search, requests=reqs, matcher=m,
                              beam_sizes=sizes, layout=lay, max_new_tokens=L)
        got = decoder.search(x, reqs, sizes, attention_mask=mask)
        assert isinstance(got, gtmkit.Result) and got.sids.shape == (B, sizes[-1], L)
        _same_result(got, want)
        _check_ads(index, got, reqs)


def test_long_sids(tmp_path):
    """SIDs longer than 16 tokens (a schema allows 64): the decoder's position bias reaches every step."""
    L, v = 20, 3
    table = random_catalog(5, n_ads=40, L=L, V=v, n_sids=20)
    index = gtmkit.build_index(write(tmp_path, table, schema_dict(L=L, V=v)), tmp_path / "index")
    lay = SidTokenLayout(SPECIALS, SPECIALS + v + 2)
    model = _t5(lay.vocab_size, "gated-gelu", "separate", 2, seed=5)
    m = gtmkit.Matcher(index)
    reqs = _requests(index, 2, 5)
    x, mask = _inputs(lay.vocab_size, 2, 6, 5)
    sizes = (1, 3) + (6,) * (L - 2)
    want = model.generate(x, attention_mask=mask, custom_generate=gtmkit_beam_search, requests=reqs, matcher=m,
                          beam_sizes=sizes, layout=lay, max_new_tokens=L)
    got = SidDecoder(model, m, lay).search(x, reqs, sizes, attention_mask=mask)
    _same_result(got, want)
    assert (np.asarray(got.leaf_nodes) >= 0).any()


def test_decoder_finds_ads_and_uses_the_mask(worlds):
    """Decoded ads are found at all, and the mask matters: unmasking the padded tokens changes the scores."""
    index, _ = worlds[3]
    lay = _layout(3, "per_position")
    model = _t5(lay.vocab_size, "relu", "tied", 2, seed=7)
    decoder = SidDecoder(model, gtmkit.Matcher(index), lay)
    reqs = _requests(index, 3, 7)
    x, mask = _inputs(lay.vocab_size, 3, 8, 7)
    masked = decoder.search(x, reqs, (1, 8, 8), attention_mask=mask)
    assert sum(len(a) for a, _ in masked.ads) > 0
    full = decoder.search(x, reqs, (1, 8, 8))
    assert not np.allclose(np.nan_to_num(masked.scores[0]), np.nan_to_num(full.scores[0]))
    assert np.array_equal(masked.sids[2], full.sids[2])  # an unpadded row is untouched
    assert np.array_equal(np.isneginf(masked.scores[2]), np.isneginf(full.scores[2]))
    assert np.allclose(np.nan_to_num(masked.scores[2]), np.nan_to_num(full.scores[2]), atol=1e-5, rtol=0)
    for other in (mask.bool(), mask.float()):  # any mask dtype: nonzero is a real token
        again = decoder.search(x, reqs, (1, 8, 8), attention_mask=other)
        assert np.array_equal(again.sids, masked.sids) and np.array_equal(again.scores, masked.scores)
    no_ads = decoder.search(x, reqs, (1, 8, 8), attention_mask=mask, postfilter=False)
    assert no_ads.ads is None
    assert np.array_equal(no_ads.sids, masked.sids) and np.array_equal(no_ads.scores, masked.scores)


# --- one beam size: SidDecoder == generate(num_beams=M, logits_processor=[GTMLogitsProcessor]) -----------
@pytest.mark.parametrize("ff, head, layers, L, M, seed", [
    ("relu", "tied", 2, 3, 8, 0),
    ("gated-gelu", "separate", 2, 4, 6, 1),
    ("gated-gelu", "tied", 3, 3, 5, 2),
])
def test_decoder_equals_generate_with_processor(worlds, ff, head, layers, L, M, seed):
    index, _ = worlds[L]
    lay = _layout(L, "per_position" if seed % 2 == 0 else "shared")
    model = _t5(lay.vocab_size, ff, head, layers, seed=200 + seed)
    m = gtmkit.Matcher(index)
    B = 3
    reqs = _requests(index, B, 30 + seed)
    x, mask = _inputs(lay.vocab_size, B, 6, 30 + seed)
    out = model.generate(x, attention_mask=mask, num_beams=M, num_return_sequences=M, max_new_tokens=L,
                         length_penalty=0.0, do_sample=False, early_stopping=False, return_dict_in_generate=True,
                         output_scores=True, logits_processor=[GTMLogitsProcessor(m, reqs, M, lay)])
    seqs = out.sequences[:, 1:1 + L].reshape(B, M, -1).numpy()
    scores = out.sequences_scores.reshape(B, M).float().numpy()
    got = SidDecoder(model, m, lay).search(x, reqs, (1,) + (M,) * (L - 1), attention_mask=mask)
    live = scores > -1e8  # generate() fills the beams past the valid SIDs with -1e9 placeholders
    assert live.any()
    assert np.array_equal(np.asarray(got.scores) > -np.inf, live)
    assert np.allclose(np.asarray(got.scores)[live], scores[live], atol=1e-4, rtol=0)
    bound = lay.check(index)
    assert np.array_equal(bound.to_sid(seqs, None)[live], np.asarray(got.sids)[live])
    for b in range(B):  # as sets too
        assert {tuple(s) for s in bound.to_sid(seqs[b], None)[live[b]].tolist()} == \
            {tuple(s) for s in np.asarray(got.sids[b])[live[b]].tolist()}


# --- gtm=False: the CD-only search ---------------------------------------------------------------------------
@pytest.mark.parametrize("ff, head, layers, L, sizes, seed", [
    ("relu", "separate", 2, 3, (1, 6, 12), 0),
    ("gated-gelu", "tied", 2, 4, (1, 8, 8, 16), 1),
])
def test_decoder_without_gtm_is_the_cd_only_search(worlds, ff, head, layers, L, sizes, seed):
    index, catalog = worlds[L]
    lay = _layout(L, "per_position")
    model = _t5(lay.vocab_size, ff, head, layers, seed=300 + seed)
    m = gtmkit.Matcher(index)
    B = 3
    reqs = _requests(index, B, 60 + seed)
    x, mask = _inputs(lay.vocab_size, B, 5, 60 + seed)
    got = SidDecoder(model, m, lay).search(x, reqs, sizes, attention_mask=mask, gtm=False)
    want = model.generate(x, attention_mask=mask, custom_generate=gtmkit_beam_search, requests=reqs, matcher=m,
                          beam_sizes=sizes, layout=lay, gtm=False, max_new_tokens=L)
    _same_result(got, want)
    live = np.asarray(got.leaf_nodes) >= 0
    assert live.any()
    for sid in np.asarray(got.sids)[live].tolist():
        assert tuple(sid) in catalog
    beams = np.asarray(got.beams)
    for b in range(B):
        assert live[b, :live[b].sum()].all()  # live SIDs first, each once
        assert len({tuple(s) for s in np.asarray(got.sids[b])[live[b]].tolist()}) == live[b].sum() == beams[-1, b]
        for t in range(1, L):  # CD alone never loses a beam: every kept prefix has a child in the catalog
            assert beams[t, b] >= min(sizes[t + 1] if t + 1 < L else sizes[-1], beams[t - 1, b])
    with_gtm = SidDecoder(model, m, lay).search(x, reqs, sizes, attention_mask=mask)
    gtm_live = np.asarray(with_gtm.leaf_nodes) >= 0
    for sid in np.asarray(with_gtm.sids)[gtm_live].tolist():  # GTM's SIDs are catalog SIDs too
        assert tuple(sid) in catalog
    assert not np.array_equal(with_gtm.sids, got.sids)  # random users: GTM prunes something


# --- refusals -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def setup(worlds):
    index, _ = worlds[3]
    lay = _layout(3, "per_position")
    model = _t5(lay.vocab_size, "relu", "tied", 1, seed=0)
    m = gtmkit.Matcher(index)
    reqs = _requests(index, 2, 0)
    x, mask = _inputs(lay.vocab_size, 2, 5, 0)
    return index, lay, model, m, reqs, x, mask, SidDecoder(model, m, lay)


def _refused(fn, match):
    with pytest.raises(GtmkitError, match=match) as e:
        fn()
    assert "\n" not in str(e.value), str(e.value)


def test_constructor_refusals(setup):
    index, lay, model, m, reqs, x, mask, _ = setup
    _refused(lambda: SidDecoder(gpt2(lay.vocab_size), m, lay), "encoder-decoder")
    _refused(lambda: SidDecoder(model, index, lay), "matcher must be a gtmkit.Matcher")
    _refused(lambda: SidDecoder(model, "matcher", lay), "matcher must be a gtmkit.Matcher")
    _refused(lambda: SidDecoder(model, m, (SPECIALS, lay.vocab_size)), "layout must be a SidTokenLayout")
    _refused(lambda: SidDecoder(model, m, SidTokenLayout(lay.offsets, lay.vocab_size + 1)),
             f"scores {lay.vocab_size} tokens")
    _refused(lambda: SidDecoder(model, m, lay, dtype="bfloat16"), "float32 only")
    _refused(lambda: SidDecoder(model, m, lay, dtype=torch.float16), "float32 only")
    _refused(lambda: SidDecoder(model, m, lay, dtype="float64"), "dtype must be")
    assert SidDecoder(model, m, lay, dtype=torch.float32).dtype == torch.float32


def test_search_refusals(setup):
    index, lay, model, m, reqs, x, mask, decoder = setup
    sizes = (1, 4, 4)
    search = decoder.search
    _refused(lambda: search(x[0], reqs, sizes), "2-d torch integer tensor")
    _refused(lambda: search(x[:, :, None], reqs, sizes), "2-d torch integer tensor")
    _refused(lambda: search(x.float(), reqs, sizes), "2-d torch integer tensor")
    _refused(lambda: search(x.numpy(), reqs, sizes), "2-d torch integer tensor")
    _refused(lambda: search(x[:, :0], reqs, sizes), "at least one token")
    _refused(lambda: search(x, reqs[:1], sizes), "2 inputs and 1 requests")
    _refused(lambda: search(x[:1], reqs, sizes, attention_mask=mask[:1]), "1 inputs and 2 requests")
    _refused(lambda: search(x, reqs, (2, 4, 4)), "must start with 1")
    _refused(lambda: search(x, reqs, (1, 4)), "beam_sizes must hold 3")
    _refused(lambda: search(x, reqs, (1, 0, 4)), "beam_sizes must hold 3")
    zero = mask.clone()
    zero[1] = 0
    _refused(lambda: search(x, reqs, sizes, attention_mask=zero), "without any context token")
    _refused(lambda: search(x, reqs, sizes, attention_mask=mask[:, 1:]), "shaped like input_ids")
    _refused(lambda: search(x, reqs, sizes, attention_mask=mask.numpy()), "shaped like input_ids")
    high, low = x.clone(), x.clone()
    high[0, 0] = lay.vocab_size
    low[1, 2] = -1
    _refused(lambda: search(high, reqs, sizes), rf"\[0, {lay.vocab_size}\)")
    _refused(lambda: search(low, reqs, sizes), rf"\[0, {lay.vocab_size}\)")
    _refused(lambda: search(x, reqs, sizes, graph=True), "graph=True needs a device='cuda' Matcher")
    _refused(lambda: search(x, reqs, sizes, gtm=1), "gtm must be True or False")
    # nothing refused leaves a trace: the same decoder still searches
    ok = search(x, reqs, sizes, attention_mask=mask)
    assert np.array_equal(ok.sids, SidDecoder(model, m, lay).search(x, reqs, sizes, attention_mask=mask).sids)
