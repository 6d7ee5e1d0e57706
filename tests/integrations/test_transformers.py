"""gtmkit.integrations: SID token layouts, node recovery, masking of a model's scores, and real generate() calls
of tiny transformers models (T5, GPT-2, Llama; random weights) with GTMLogitsProcessor and with
custom_generate=gtmkit_beam_search, against gtmkit.beam_search running the same network and against the index's
own navigation and GTM test."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the hf extra: pip install 'gtmkit[hf]'")
pytest.importorskip("transformers", reason="needs the hf extra: pip install 'gtmkit[hf]'")

import gtmkit  # noqa: E402
from gtmkit.errors import GtmkitError  # noqa: E402
from gtmkit.integrations.masking import SidMasker  # noqa: E402
from gtmkit.integrations.torch import ModuleLogits  # noqa: E402
from gtmkit.integrations.transformers import GTMLogitsProcessor, SidTokenLayout, gtmkit_beam_search  # noqa: E402
from gtmkit.synth import synth_users, write_catalog  # noqa: E402

from support.hf_models import MODELS, SPECIALS, OneStep, start_state, synthetic_world  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _device_or_skip(device):
    if device == "cuda":
        from gtmkit._gpu import cuda_available
        if not (cuda_available() and torch.cuda.is_available()):
            pytest.skip("needs CuPy and torch with a CUDA device")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return synthetic_world(tmp_path_factory.mktemp("hf"), 3000, seed=3, n_users=4)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An index of 3 ads and a request eligible for at least one, so that it has fewer valid SIDs than beams."""
    d = tmp_path_factory.mktemp("hf_tiny")
    catalog, _ = write_catalog(d / "catalog.parquet", 3, seed=1)
    index = gtmkit.build_index(catalog, d / "index")
    ads = np.concatenate([index.sid_ads(n) for n in range(index.first_leaf, index.num_nodes)])
    for user in synth_users(index.manifest["schema"], 200, seed=2):
        req = index.encode_request(user)
        if index.ad_eligible(ads, req).any():
            return index, [req]
    raise AssertionError("no synthetic user is eligible for the tiny catalog")


def layouts(index, eos: bool):
    """A shared range after the specials, and a range per position (TIGER-style), optionally with EOS 1."""
    V, L = index.vocab_size, index.sid_length
    e = 1 if eos else None
    return {"shared": SidTokenLayout(SPECIALS, SPECIALS + V, eos_token_id=e),
            "per_position": SidTokenLayout([SPECIALS + d * V for d in range(L)], SPECIALS + L * V, eos_token_id=e)}


# --- layout ------------------------------------------------------------------------------------------------
def test_layout_round_trips_and_marks_foreign_tokens():
    lay = SidTokenLayout([3, 13, 23], 33)
    sid = np.array([[0, 9, 4], [9, 0, 0]])
    assert np.array_equal(lay.to_model(sid), sid + [3, 13, 23])
    assert np.array_equal(lay.to_sid(lay.to_model(sid)), sid)
    assert np.array_equal(lay.to_model(np.array([1, 2]), 2), [24, 25])
    assert np.array_equal(lay.to_sid(np.array([2, 3, 12, 13, 40]), 0), [-1, 0, 9, -1, -1])
    t = torch.tensor([[3, 13, 23]])
    assert torch.equal(lay.to_sid(t), torch.zeros_like(t))


@pytest.mark.parametrize("kw, msg", [
    (dict(offset=3, vocab_size=100, sid_vocab=512), "past the model's vocabulary"),
    (dict(offset=[3, 10], vocab_size=100, sid_vocab=20), "overlap"),
    (dict(offset=0, vocab_size=600, eos_token_id=5, sid_vocab=512), "eos_token_id 5 lies in"),
    (dict(offset=3, vocab_size=10, eos_token_id=10), "outside the model's vocabulary"),
    (dict(offset=-1, vocab_size=10), "non-negative"),
    (dict(offset="x", vocab_size=10), "an int or a sequence"),
])
def test_layout_that_does_not_fit_is_refused(kw, msg):
    with pytest.raises(GtmkitError, match=msg):
        SidTokenLayout(**kw)


def test_layout_checked_against_the_index(world):
    index, _ = world
    V, L = index.vocab_size, index.sid_length
    with pytest.raises(GtmkitError, match="ranges"):
        SidTokenLayout([3, 3 + V], 3 + 2 * V).check(index)  # L ranges needed
    with pytest.raises(GtmkitError, match="do not fit"):
        SidTokenLayout(3, 3 + V - 1).check(index)
    assert SidTokenLayout(3, 3 + V).check(index).sid_vocab == V


# --- node recovery and masking -----------------------------------------------------------------------------
def _random_prefixes(index, rng, n, depth, offsets):
    """Prefixes of real SIDs, every third one with random tokens (inside and outside the range), as model
    tokens; -> (tokens [n, depth] int64, the SID-token prefixes)."""
    leaves = rng.integers(index.first_leaf, index.num_nodes, n)
    sid = np.array([index.leaf_sid(int(x)) for x in leaves], np.int64)
    extra = rng.integers(0, index.vocab_size, (n, max(depth - index.sid_length, 0)))
    sid = np.concatenate([sid, extra], axis=1)[:, :depth]
    noisy = rng.integers(-3, index.vocab_size + 3, sid.shape)
    sid[::3] = noisy[::3]
    return sid + offsets[:depth], sid


@pytest.mark.parametrize("seed", range(3))
def test_node_recovery_equals_walking_index_child(world, seed):
    index, _ = world
    m = gtmkit.Matcher(index)
    rng = np.random.default_rng(seed)
    L, V = index.sid_length, index.vocab_size
    offsets = np.array([7 + d * V for d in range(L + 1)])
    for depth in range(L + 2):
        tokens, sid = _random_prefixes(index, rng, 40, depth, offsets)
        prompt = rng.integers(0, 5, (40, 2))
        got = m.prefix_nodes(np.concatenate([prompt, tokens], axis=1), offsets[:max(depth, 1)], start=2)
        want = []
        for row in sid:
            node = 0
            for tok in row:
                node = index.child(node, int(tok)) if 0 <= tok < V and node >= 0 else -1
            want.append(node)
        assert np.array_equal(got, want), depth


def _allowed_reference(index, req, node, depth, layout):
    """Plain Python: the model columns a row may take."""
    L = index.sid_length
    if node < 0 or depth > L:
        return set()
    if depth == L:
        return {layout.eos_token_id} if layout.eos_token_id is not None else set()
    off = int(layout.offsets_for(depth + 1)[-1])
    toks, kids = index.children(node)
    return {off + int(t) for t, c in zip(toks, kids) if index.node_passes(int(c), req)}


@pytest.mark.parametrize("name", ["shared", "per_position"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_masker_equals_plain_python(world, name, dtype):
    index, reqs = world
    lay = layouts(index, eos=True)[name].check(index)
    m = gtmkit.Matcher(index)
    beams = 6
    masker = SidMasker(m, reqs, beams, lay)
    rng = np.random.default_rng(1)
    offs = lay.offsets_for(index.sid_length)
    for depth in range(index.sid_length + 2):
        R = len(reqs) * beams
        tokens, _ = _random_prefixes(index, rng, R, depth, np.concatenate([offs, offs[-1:]]))
        ids = np.concatenate([np.zeros((R, 1), np.int64), tokens], axis=1)
        scores = rng.normal(size=(R, lay.vocab_size)).astype(dtype)
        before = scores.copy()
        masker(ids, scores, 1)
        nodes = [index.find(lay.to_sid(row, None)) if depth <= index.sid_length else -1 for row in tokens]
        for r in range(R):
            ok = _allowed_reference(index, reqs[r // beams], nodes[r], depth, lay)
            keep = np.isfinite(scores[r])
            assert set(np.flatnonzero(keep).tolist()) == ok, (depth, r)
            assert np.array_equal(scores[r, keep], before[r, keep])
            assert np.all(np.isneginf(scores[r, ~keep]))


def test_masker_refuses_wrong_row_counts(world):
    index, reqs = world
    lay = layouts(index, eos=False)["shared"]
    proc = GTMLogitsProcessor(gtmkit.Matcher(index), reqs, 3, lay)
    with pytest.raises(GtmkitError, match="expected 4 requests x 3 beams"):
        proc(torch.zeros((5, 1), dtype=torch.long), torch.zeros((5, lay.vocab_size)))


# --- generate() --------------------------------------------------------------------------------------------
def _inputs(model, B, seed, device):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(SPECIALS, int(model.config.vocab_size), (B, 6), generator=g).to(device)


def _generate(model, x, proc, M, max_new):
    kw = dict(num_beams=M, num_return_sequences=M, max_new_tokens=max_new, length_penalty=0.0, do_sample=False,
              early_stopping=False, return_dict_in_generate=True, output_scores=True)
    if proc is not None:
        kw["logits_processor"] = [proc]
    return model.generate(x, **kw)


def _sid_part(model, x, out, B, M, L):
    start = 1 if model.config.is_encoder_decoder else x.shape[1]
    seqs = out.sequences[:, start:start + L].reshape(B, M, -1).cpu().numpy()
    return seqs, out.sequences_scores.reshape(B, M).float().cpu().numpy()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ["t5", "gpt2"])
@pytest.mark.parametrize("name, eos", [("shared", False), ("per_position", True)])
def test_processor_returns_catalog_sids_that_pass_gtm(world, device, arch, name, eos):
    _device_or_skip(device)
    index, reqs = world
    lay = layouts(index, eos)[name]
    L, M, B = index.sid_length, 8, len(reqs)
    model = MODELS[arch](lay.vocab_size).to(device)
    x = _inputs(model, B, 0, device)
    m = gtmkit.Matcher(index, device=device)
    eligible_share = {}
    for constrained in (False, True):
        proc = GTMLogitsProcessor(m, reqs, M, lay) if constrained else None
        out = _generate(model, x, proc, M, L + (1 if eos else 0))
        seqs, scores = _sid_part(model, x, out, B, M, L)
        hits = total = 0
        for b in range(B):
            for j in range(M):
                sid = lay.check(index).to_sid(seqs[b, j], None) if seqs.shape[2] == L else None
                node = index.find(sid) if sid is not None and (sid >= 0).all() else -1
                if constrained and scores[b, j] > -1e8:  # a live sequence
                    assert node >= index.first_leaf, (b, j, seqs[b, j])
                    prefix = 0
                    for tok in sid:
                        prefix = index.child(prefix, int(tok))
                        assert index.node_passes(prefix, reqs[b])
                    if eos:
                        assert int(out.sequences[b * M + j, -1]) == 1
                total += 1
                hits += node >= index.first_leaf and bool(index.ad_eligible(index.sid_ads(node), reqs[b]).any())
        eligible_share[constrained] = hits / total
    assert eligible_share[True] > eligible_share[False], eligible_share


@pytest.mark.parametrize("device", DEVICES)
def test_fewer_valid_sids_than_beams(tiny, device):
    _device_or_skip(device)
    index, reqs = tiny
    lay = layouts(index, eos=False)["shared"]
    M, L = 8, index.sid_length
    model = MODELS["t5"](lay.vocab_size).to(device)
    x = _inputs(model, 1, 1, device)
    out = _generate(model, x, GTMLogitsProcessor(gtmkit.Matcher(index, device=device), reqs, M, lay), M, L)
    seqs, scores = _sid_part(model, x, out, 1, M, L)
    assert not np.isnan(scores).any()
    live = scores[0] > -1e8
    assert 1 <= live.sum() <= index.num_sids < M
    found = {index.find(lay.check(index).to_sid(s, None)) for s in seqs[0][live]}
    assert -1 not in found and len(found) == live.sum()


def _beam_search(model, x, index, reqs, sizes, lay, device):
    m = gtmkit.Matcher(index, device=device)
    fn = ModuleLogits(OneStep(model), start_state(model, x), lay.check(index))
    res = gtmkit.beam_search(m, reqs, fn, beam_sizes=sizes)
    return res, m


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ["t5", "llama"])
@pytest.mark.parametrize("name", ["shared", "per_position"])
def test_processor_equals_gtmkit_beam_search(world, device, arch, name):
    _device_or_skip(device)
    index, reqs = world
    lay = layouts(index, eos=False)[name]
    L, M, B = index.sid_length, 8, len(reqs)
    model = MODELS[arch](lay.vocab_size, seed=2).to(device)
    x = _inputs(model, B, 3, device)
    out = _generate(model, x, GTMLogitsProcessor(gtmkit.Matcher(index, device=device), reqs, M, lay), M, L)
    seqs, scores = _sid_part(model, x, out, B, M, L)
    res, _ = _beam_search(model, x, index, reqs, (M,) * L, lay, device)
    live = scores > -1e8
    assert live.any()
    assert np.array_equal(_host(res.scores) > -np.inf, live)
    assert np.allclose(_host(res.scores)[live], scores[live], atol=1e-4)
    bound = lay.check(index)
    assert np.array_equal(bound.to_sid(seqs, None)[live], _host(res.sids)[live])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ["t5", "gpt2"])
def test_custom_generate_equals_gtmkit_beam_search(world, device, arch):
    _device_or_skip(device)
    index, reqs = world
    lay = layouts(index, eos=False)["per_position"]
    sizes = (1, 8, 16, 16)[:index.sid_length]
    model = MODELS[arch](lay.vocab_size, seed=4).to(device)
    x = _inputs(model, len(reqs), 5, device)
    m = gtmkit.Matcher(index, device=device)
    got = model.generate(x, custom_generate=gtmkit_beam_search, requests=reqs, matcher=m, beam_sizes=sizes,
                         layout=lay)
    want, _ = _beam_search(model, x, index, reqs, sizes, lay, device)
    assert isinstance(got, gtmkit.Result)
    assert np.array_equal(_host(got.sids), _host(want.sids))
    s, w = _host(got.scores), _host(want.scores)
    assert np.array_equal(np.isneginf(s), np.isneginf(w))
    assert np.allclose(s[np.isfinite(w)], w[np.isfinite(w)], atol=1e-4)
    for (a, ra), (b, rb) in zip(got.ads, want.ads):
        assert np.array_equal(_host(a), _host(b)) and np.array_equal(_host(ra), _host(rb))
    assert sum(len(a) for a, _ in got.ads) > 0


def test_custom_generate_refuses_missing_arguments(world):
    index, reqs = world
    lay = layouts(index, eos=False)["shared"]
    model = MODELS["t5"](lay.vocab_size)
    with pytest.raises(GtmkitError, match="needs matcher="):
        model.generate(_inputs(model, len(reqs), 0, "cpu"), custom_generate=gtmkit_beam_search, requests=reqs,
                       layout=lay)
