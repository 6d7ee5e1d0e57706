"""gtmkit.integrations under hostile input: every wrong argument to SidTokenLayout, GTMLogitsProcessor,
gtmkit_beam_search (through model.generate(custom_generate=...)), ModuleLogits and reorder_state either gets the
documented answer or one GtmkitError with a one-line message naming it; never another exception type, never a
NaN, never a partly written score row, and never an eligible ad's SID masked."""

from __future__ import annotations

import collections
import dataclasses
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the hf extra: pip install 'gtmkit[hf]'")
pytest.importorskip("transformers", reason="needs the hf extra: pip install 'gtmkit[hf]'")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gtmkit  # noqa: E402
from gtmkit.errors import GtmkitError  # noqa: E402
from gtmkit.integrations.torch import ModuleLogits, reorder_state  # noqa: E402
from gtmkit.integrations.transformers import GTMLogitsProcessor, SidTokenLayout, gtmkit_beam_search  # noqa: E402

from support.hf_models import MODELS, SPECIALS, synthetic_world  # noqa: E402

M = 3  # beams a request in the processor's calls


def refused(match, fn, *args, **kwargs) -> str:
    """fn(*args, **kwargs) raises a GtmkitError whose one-line message matches; returns the message."""
    with pytest.raises(GtmkitError, match=match) as e:
        fn(*args, **kwargs)
    msg = str(e.value)
    assert msg and "\n" not in msg, msg
    return msg


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return synthetic_world(tmp_path_factory.mktemp("hostile"), 400, seed=11, n_users=2)


def shared(index, eos=None):
    return SidTokenLayout(SPECIALS, SPECIALS + index.vocab_size, eos_token_id=eos)


def per_position(index, eos=None):
    V, L = index.vocab_size, index.sid_length
    return SidTokenLayout([SPECIALS + d * V for d in range(L)], SPECIALS + L * V, eos_token_id=eos)


@pytest.fixture(scope="module")
def models(world):
    """One tiny T5 and one tiny GPT-2 over the per-position layout's vocabulary, built once."""
    lay = per_position(world[0])
    return {arch: MODELS[arch](lay.vocab_size, seed=3) for arch in ("t5", "gpt2")}


# --- SidTokenLayout ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, match", [
    (dict(offset=3, vocab_size=10.0), "vocab_size must be an integer"),
    (dict(offset=3, vocab_size="10"), "vocab_size must be an integer"),
    (dict(offset=3, vocab_size=None), "vocab_size must be an integer"),
    (dict(offset=3, vocab_size=True), "vocab_size must be an integer"),
    (dict(offset=3, vocab_size=torch.tensor(10)), "vocab_size must be an integer"),
    (dict(offset=True, vocab_size=10), "offset must be an int or a sequence"),
    (dict(offset=np.bool_(True), vocab_size=10), "offset must be an int or a sequence"),
    (dict(offset=[True, 5], vocab_size=10), "offset must be an int or a sequence"),
    (dict(offset=[3.5, 6], vocab_size=10), "offset must be an int or a sequence"),
    (dict(offset=np.array([3.0, 6.0]), vocab_size=10), "offset must be an int or a sequence"),
    (dict(offset="36", vocab_size=10), "offset must be an int or a sequence"),
    (dict(offset=[[3], [6]], vocab_size=10), "offset must be an int or a sequence"),
    (dict(offset=None, vocab_size=10), "offset must be an int or a sequence"),
    (dict(offset=[], vocab_size=10), "offset must hold non-negative ints"),
    (dict(offset=10, vocab_size=10), "offset 10 lies outside the model's vocabulary of 10"),
    (dict(offset=[3, 2**70], vocab_size=10), "lies outside the model's vocabulary"),
    (dict(offset=3, vocab_size=10, eos_token_id=True), "eos_token_id must be an integer"),
    (dict(offset=3, vocab_size=10, sid_vocab=4.0), "sid_vocab must be an integer"),
])
def test_layout_arguments_refused(kw, match):
    refused(match, SidTokenLayout, **kw)


@pytest.mark.parametrize("offset, shared_range", [
    (np.int64(3), True), (np.int32(3), True), (np.array([3, 13, 23]), False),
    ([np.int32(3), np.int64(13), 23], False), (torch.tensor([3, 13, 23]), False), ((3, 13, 23), False),
])
def test_layout_takes_numpy_and_torch_integer_offsets(offset, shared_range):
    lay = SidTokenLayout(offset, 33)
    assert lay.shared is shared_range
    assert lay.offsets == ((3,) if shared_range else (3, 13, 23))
    assert all(type(o) is int for o in lay.offsets)


@pytest.mark.parametrize("index", ["index", None, 3, object()])
def test_layout_check_refuses_what_is_not_an_index(index):
    refused("index must be a gtmkit Index", SidTokenLayout(3, 40).check, index)


def _forms(rows):
    """The same integer rows as a list, numpy int64 / int32 / uint16 and torch int64 / int32."""
    a = np.asarray(rows, np.int64)
    return {"list": rows, "int64": a, "int32": a.astype(np.int32), "uint16": a.astype(np.uint16),
            "torch64": torch.from_numpy(a), "torch32": torch.from_numpy(a.astype(np.int32))}


@pytest.mark.parametrize("form", ["list", "int64", "int32", "uint16", "torch64", "torch32"])
def test_conversions_agree_across_lists_numpy_and_torch(form):
    lay = SidTokenLayout([3, 13, 23], 33)
    model = [[3, 13, 23], [12, 22, 32], [2, 40, 13], [0, 0, 0]]
    sid = _forms(model)[form]
    got = lay.to_sid(sid)
    assert isinstance(got, torch.Tensor) == form.startswith("torch")
    got = np.asarray(got)
    assert got.dtype == np.int64
    assert got.tolist() == [[0, 0, 0], [9, 9, 9], [-1, -1, -1], [-1, -1, -1]]
    back = np.asarray(lay.to_model(_forms([[0, 0, 0], [9, 9, 9]])[form]))
    assert back.dtype == np.int64 and back.tolist() == [[3, 13, 23], [12, 22, 32]]
    assert np.asarray(lay.to_sid(_forms([3, 12, 13, 2])[form], 0)).tolist() == [0, 9, -1, -1]


def test_empty_inputs_give_empty_int64_answers():
    lay = SidTokenLayout([3, 13, 23], 33)
    for x in ([], np.zeros((0, 3), np.int64), torch.zeros((0, 3), dtype=torch.long)):
        for f in (lay.to_sid, lay.to_model):
            got = f(x)
            assert tuple(got.shape) == tuple(np.shape(x)) and str(got.dtype).endswith("int64")


def test_small_integer_dtypes_do_not_wrap():
    """uint8 0 - offset 3 must not wrap to 253 (inside a 297-token range), int8 120 + 10 must not wrap either."""
    lay = SidTokenLayout(3, 300)
    assert lay.to_sid(np.array([0, 3], np.uint8), 0).tolist() == [-1, 0]
    assert lay.to_sid(torch.tensor([0, 3], dtype=torch.uint8), 0).tolist() == [-1, 0]
    assert lay.to_sid(np.array([[0, 5]], np.uint8)).tolist() == [[-1, 2]]
    assert SidTokenLayout(10, 300).to_model(np.array([120], np.int8), 0).tolist() == [130]
    assert SidTokenLayout(10, 300).to_model(torch.tensor([120], dtype=torch.int8), 0).tolist() == [130]
    got = lay.to_sid(np.array([[3, 2**64 - 1]], np.uint64))
    assert got.dtype == np.int64 and got.tolist() == [[0, -1]]


def test_to_model_marks_sid_tokens_outside_the_range():
    """A dead beam's -1 and tokens >= V are no model tokens: -1, not a special token or the next range."""
    lay = SidTokenLayout([3, 13, 23], 33)
    assert lay.to_model([[-1, 0, 10], [9, -1, 2**62]]).tolist() == [[-1, 13, -1], [12, -1, -1]]
    assert SidTokenLayout(3, 13).to_model([-1, 0, 9, 10], 2).tolist() == [-1, 3, 12, -1]


@pytest.mark.parametrize("fn, args, match", [
    ("to_sid", (5,), "model_tokens: a single token needs depth="),
    ("to_model", (np.int64(5),), "sid_tokens: a single token needs depth="),
    ("to_sid", (np.array(5),), "model_tokens: a single token needs depth="),
    ("to_model", ([1], -1), "depth must be >= 0"),
    ("to_sid", ([1], -5), "depth must be >= 0"),
    ("to_model", ([1], 1.5), "depth must be an integer"),
    ("to_model", ([1], True), "depth must be an integer"),
    ("to_sid", ([1], "1"), "depth must be an integer"),
    ("to_sid", ([1], 3), "depth 3 is outside the layout's 3 SID positions"),
    ("to_sid", ([[3, 13, 23, 24]],), "model_tokens hold 4 SID positions"),
    ("to_sid", ([[3.0, 13.5, 23]],), "model_tokens must be integers"),
    ("to_sid", (np.array([[3.0, 13, 23]]),), "model_tokens must be integers"),
    ("to_model", (torch.tensor([[3.0, 13, 23]]),), "sid_tokens must be integers"),
    ("to_sid", (np.array([[True, False, True]]),), "model_tokens must be integers"),
    ("to_sid", (torch.tensor([[True, False, True]]),), "model_tokens must be integers"),
    ("to_sid", ("abc",), "model_tokens must be integers"),
    ("to_sid", (None,), "model_tokens must be integers"),
    ("to_sid", ([[3, 13], [3]],), "model_tokens: not an array of integers"),
    ("to_sid", ([[2**70, 13, 23]],), "model_tokens must be integers"),
    ("to_model", (np.array([[1, 2, None]], dtype=object),), "sid_tokens must be integers"),
])
def test_conversion_inputs_refused(fn, args, match):
    refused(match, getattr(SidTokenLayout([3, 13, 23], 33), fn), *args)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), L=st.integers(1, 5), V=st.integers(1, 40), specials=st.integers(0, 4),
       rows=st.integers(0, 6), per_pos=st.booleans(), use_torch=st.booleans())
def test_layout_round_trip_property(data, L, V, specials, rows, per_pos, use_torch):
    offs = [specials + d * V for d in range(L)] if per_pos else specials
    vocab = specials + (L if per_pos else 1) * V + data.draw(st.integers(0, 3))
    lay = SidTokenLayout(offs, vocab, sid_vocab=V)
    sid = np.array(data.draw(st.lists(st.lists(st.integers(0, V - 1), min_size=L, max_size=L), min_size=rows,
                                      max_size=rows)), np.int64).reshape(rows, L)
    x = torch.from_numpy(sid) if use_torch else sid
    assert np.array_equal(np.asarray(lay.to_sid(lay.to_model(x, None), None)), sid)
    for d in range(L):
        assert np.array_equal(np.asarray(lay.to_sid(lay.to_model(x[:, d], d), d)), sid[:, d])
    # any model token (and some outside the vocabulary): -1 exactly where it is outside its position's range
    tok = np.array(data.draw(st.lists(st.lists(st.integers(-3, vocab + 3), min_size=L, max_size=L),
                                      min_size=rows, max_size=rows)), np.int64).reshape(rows, L)
    base = np.array(lay.offsets_for(L))
    inside = (tok >= base) & (tok < base + V)
    got = np.asarray(lay.to_sid(torch.from_numpy(tok) if use_torch else tok, None))
    assert np.array_equal(got, np.where(inside, tok - base, -1))
    bad = np.array(data.draw(st.lists(st.integers(-5, 2 * V + 5), min_size=rows, max_size=rows)), np.int64)
    assert np.array_equal(lay.to_model(bad, L - 1), np.where((bad >= 0) & (bad < V), bad + base[-1], -1))


# --- GTMLogitsProcessor ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def matcher(world):
    return gtmkit.Matcher(world[0])


def _processor_kw(world, m, **kw):
    index, reqs = world
    base = dict(matcher=m, requests=reqs, num_beams=M, layout=shared(index), prompt_len=1)
    base.update(kw)
    return base


@pytest.mark.parametrize("kw, match", [
    (dict(num_beams=0), "num_beams must be a positive integer"),
    (dict(num_beams=-2), "num_beams must be a positive integer"),
    (dict(num_beams=True), "num_beams must be a positive integer"),
    (dict(num_beams=2.0), "num_beams must be a positive integer"),
    (dict(num_beams="2"), "num_beams must be a positive integer"),
    (dict(num_beams=None), "num_beams must be a positive integer"),
    (dict(layout="shared"), "layout must be a SidTokenLayout, got str"),
    (dict(layout=None), "layout must be a SidTokenLayout, got NoneType"),
    (dict(layout=3), "layout must be a SidTokenLayout, got int"),
    (dict(matcher=None), "matcher must be a gtmkit.Matcher, got NoneType"),
    (dict(matcher="cpu"), "matcher must be a gtmkit.Matcher, got str"),
    (dict(prompt_len=-1), "prompt_len must be >= 0"),
    (dict(prompt_len=1.0), "prompt_len must be an integer"),
    (dict(prompt_len=True), "prompt_len must be an integer"),
    (dict(requests=None), "requests must be encoded Requests"),
    (dict(requests="ab"), "expected an encoded Request"),
    (dict(requests=5), "requests must be encoded Requests"),
    (dict(requests=[None]), "expected an encoded Request"),
    (dict(requests=[{"age": 3}]), "expected an encoded Request"),
    (dict(requests=[]), "no requests"),
    (dict(gtm=1), "gtm must be True or False"),
])
def test_processor_arguments_refused(world, matcher, kw, match):
    refused(match, GTMLogitsProcessor, **_processor_kw(world, matcher, **kw))


def test_processor_refuses_an_index_as_matcher_and_a_layout_of_other_sids(world, matcher):
    index, _ = world
    refused("matcher must be a gtmkit.Matcher, got Index", GTMLogitsProcessor,
            **_processor_kw(world, matcher, matcher=index))
    V = index.vocab_size
    refused("offset holds 2 ranges", GTMLogitsProcessor,
            **_processor_kw(world, matcher, layout=SidTokenLayout([3, 3 + V], 3 + 2 * V)))
    refused("do not fit", GTMLogitsProcessor, **_processor_kw(world, matcher, layout=SidTokenLayout(3, 3 + V - 1)))


def _rows(world, depth, rng):
    """input_ids [B*M, 1 + depth]: a start token, then prefixes of SIDs eligible for each row's request (model
    tokens of the shared layout), every third row a random prefix; -> (input_ids int64, SID prefixes, the
    eligible SIDs whole)."""
    index, reqs = world
    B = len(reqs)
    sids = []
    for b in range(B):
        leaves = [n for n in range(index.first_leaf, index.num_nodes)
                  if index.ad_eligible(index.sid_ads(n), reqs[b]).any()]
        assert leaves, "a request with no eligible ad proves nothing"
        for j in rng.integers(0, len(leaves), M):
            sids.append(list(index.leaf_sid(int(leaves[j]))) + [0])
    full = np.array(sids, np.int64)
    sid = full[:, :depth].copy()
    sid[::3] = rng.integers(-2, index.vocab_size + 2, sid[::3].shape)
    ids = np.concatenate([np.zeros((B * M, 1), np.int64), sid + SPECIALS], axis=1)
    return ids, sid, full


def _allowed(world, sid_prefix, b, lay):
    """Plain Python: the model columns a row holding this SID prefix may take."""
    index, reqs = world
    L = index.sid_length
    node = 0
    for tok in sid_prefix:
        node = index.child(node, int(tok)) if 0 <= tok < index.vocab_size and node >= 0 else -1
    if node < 0 or len(sid_prefix) > L:
        return set()
    if len(sid_prefix) == L:
        return {lay.eos_token_id} if lay.eos_token_id is not None else set()
    toks, kids = index.children(node)
    return {SPECIALS + int(t) for t, c in zip(toks, kids) if index.node_passes(int(c), reqs[b])}


FORMS = {
    "torch": lambda ids, s: (torch.from_numpy(ids), torch.from_numpy(s)),
    "numpy": lambda ids, s: (ids, s),
    "int32 ids": lambda ids, s: (torch.from_numpy(ids.astype(np.int32)), torch.from_numpy(s)),
    "non-contiguous ids": lambda ids, s: (torch.from_numpy(np.asfortranarray(ids)), torch.from_numpy(s)),
    "transposed scores": lambda ids, s: (torch.from_numpy(ids), torch.from_numpy(np.ascontiguousarray(s.T)).t()),
    "strided scores": lambda ids, s: (torch.from_numpy(ids), torch.from_numpy(np.repeat(s, 2, axis=1))[:, ::2]),
    "bfloat16": lambda ids, s: (torch.from_numpy(ids), torch.from_numpy(s).to(torch.bfloat16)),
    "float16 numpy": lambda ids, s: (ids, s.astype(np.float16)),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_processor_masks_every_input_form_exactly(world, matcher, form):
    """Odd but valid tensors (numpy, int32, non-contiguous, strided, half precision) give the plain-Python mask:
    every eligible child kept with its score, everything else -inf, no NaN; an eligible SID is never cut."""
    index, reqs = world
    lay = shared(index, eos=1)
    proc = GTMLogitsProcessor(matcher, reqs, M, lay)  # prompt_len found at the first call
    rng = np.random.default_rng(len(form))
    for depth in range(index.sid_length + 2):
        ids, sid, full = _rows(world, depth, rng)
        scores = rng.normal(size=(len(ids), lay.vocab_size)).astype(np.float32)
        tid, ts = FORMS[form](ids, scores.copy())
        before = np.asarray(ts.float() if isinstance(ts, torch.Tensor) else ts, np.float32).copy()
        out = proc(tid, ts)
        assert out is ts
        got = np.asarray(out.float() if isinstance(out, torch.Tensor) else out, np.float32)
        assert not np.isnan(got).any()
        for r in range(len(ids)):
            keep = set(np.flatnonzero(np.isfinite(got[r])).tolist())
            assert keep == _allowed(world, sid[r], r // M, lay), (form, depth, r)
            assert np.all(np.isneginf(got[r][~np.isfinite(got[r])]))
            assert np.array_equal(got[r][np.isfinite(got[r])], before[r][np.isfinite(got[r])])
            if r % 3 and depth < index.sid_length:  # an eligible ad's SID: its next token stays open
                assert SPECIALS + int(full[r, depth]) in keep, (form, depth, r)
            elif r % 3 and depth == index.sid_length:
                assert keep == {1}, (form, r)


def _call_cases(C, R):
    ids = torch.zeros((R, 1), dtype=torch.long)
    sc = torch.zeros((R, C))

    class DeviceArray:  # what CuPy hands over: a CUDA pointer, not host memory
        shape, dtype = (R, C), np.dtype(np.float32)
        __cuda_array_interface__ = {"shape": (R, C), "typestr": "<f4", "data": (0, False), "version": 3}

    return [
        ("columns", ids, torch.zeros((R, C + 1)), 1, "scores have 516 columns, the layout's model vocabulary 515"),
        ("score rows", ids, torch.zeros((R + 1, C)), 1, "expected 2 requests x 3 beams = 6"),
        ("id rows", torch.zeros((R - 1, 1), dtype=torch.long), sc, 1, "expected 2 requests x 3 beams = 6"),
        ("int64 scores", ids, torch.zeros((R, C), dtype=torch.int64), 1, "scores must be float32, float16, bfloat16"),
        ("int32 scores", ids, np.zeros((R, C), np.int32), 1, "scores must be float32, float16, bfloat16"),
        ("bool scores", ids, torch.zeros((R, C), dtype=torch.bool), 1, "scores must be float32"),
        ("complex scores", ids, torch.zeros((R, C), dtype=torch.complex64), 1, "scores must be float32"),
        ("1-d scores", ids, torch.zeros(R), 1, r"scores must be \[rows, vocab\], got shape \[6\]"),
        ("0-d scores", ids, torch.tensor(0.0), 1, r"scores must be \[rows, vocab\], got shape \[\]"),
        ("3-d scores", ids, torch.zeros((R, C, 1)), 1, r"scores must be \[rows, vocab\]"),
        ("list scores", ids, [[0.0] * C] * R, 1, "scores must be a torch tensor or an array, got list"),
        ("no scores", ids, None, 1, "scores must be a torch tensor or an array, got NoneType"),
        ("1-d ids", torch.zeros(R, dtype=torch.long), sc, 1, r"input_ids must be \[rows, length\], got shape \[6\]"),
        ("3-d ids", torch.zeros((R, 1, 1), dtype=torch.long), sc, 1, r"input_ids must be \[rows, length\]"),
        ("list ids", [[0]] * R, sc, 1, "input_ids must be a torch tensor or an array, got list"),
        ("no ids", None, sc, 1, "input_ids must be a torch tensor or an array, got NoneType"),
        ("float ids", ids.float(), sc, 1, "input_ids must be integers"),
        ("prompt past the end", ids, sc, 5, "prompt_len 5 is longer than the sequences"),
        ("meta scores", ids, torch.zeros((R, C), device="meta"), 1,
         "scores are on meta; a device='cpu' Matcher works on cpu tensors"),
        ("meta ids", torch.zeros((R, 1), dtype=torch.long, device="meta"), sc, 1,
         "input_ids are on meta; a device='cpu' Matcher"),
        ("device array", ids, DeviceArray(), 1, "scores are a DeviceArray; a device='cpu' Matcher masks numpy"),
    ]


@pytest.mark.parametrize("case", range(21))
def test_processor_call_refuses_wrong_tensors(world, matcher, case):
    index, reqs = world
    lay = shared(index)
    name, ids, scores, prompt_len, match = _call_cases(lay.vocab_size, len(reqs) * M)[case]
    before = scores.clone() if isinstance(scores, torch.Tensor) and scores.device.type == "cpu" else None
    refused(match, GTMLogitsProcessor(matcher, reqs, M, lay, prompt_len=prompt_len), ids, scores)
    if before is not None:  # refused before anything was written
        assert torch.equal(scores, before), name


def test_device_matcher_refuses_host_tensors(world, models, monkeypatch):
    """A device='cuda' Matcher (CuPy stand-in: no GPU needed for the checks) refuses CPU tensors with a message,
    not torch's 'not compiled with CUDA', and never masks a copy of numpy scores while returning them unmasked."""
    from support.fake_cupy import installed

    index, reqs = world
    lay = shared(index)
    R, C = len(reqs) * M, lay.vocab_size
    with installed(monkeypatch):
        gpu = gtmkit.Matcher(index, device="cuda")
        proc = GTMLogitsProcessor(gpu, reqs, M, lay, prompt_len=1)
        ids = torch.zeros((R, 1), dtype=torch.long)
        refused("input_ids are on cpu; a device='cuda' Matcher works on cuda tensors", proc, ids, torch.zeros((R, C)))
        refused("scores are on cpu; a device='cuda' Matcher", proc, ids.numpy(), torch.zeros((R, C)))
        scores = np.zeros((R, C), np.float32)
        refused("scores are a ndarray; a device='cuda' Matcher masks CUDA tensors and CuPy arrays in place", proc,
                ids.numpy(), scores)
        assert not scores.any()
        model = models["t5"]
        x = torch.randint(SPECIALS, int(model.config.vocab_size), (len(reqs), 4))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            refused("inputs on cpu and a device='cuda' Matcher", model.generate, x,
                    custom_generate=gtmkit_beam_search, requests=reqs, matcher=gpu, beam_sizes=(1, 4, 4, 4),
                    layout=per_position(index))


# --- custom_generate=gtmkit_beam_search --------------------------------------------------------------------
def _generate(world, model, x=None, **kw):
    index, reqs = world
    base = dict(custom_generate=gtmkit_beam_search, requests=reqs, matcher=gtmkit.Matcher(index),
                beam_sizes=(1, 4, 4, 4)[:index.sid_length], layout=per_position(index))
    base.update(kw)
    base = {k: v for k, v in base.items() if v is not ...}
    if x is None:
        x = torch.randint(SPECIALS, int(model.config.vocab_size), (len(reqs), 5),
                          generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(x, **base)


def _other_vocab(index, extra):
    V, L = index.vocab_size, index.sid_length
    return SidTokenLayout([SPECIALS + d * V for d in range(L)], SPECIALS + L * V + extra)


@pytest.mark.parametrize("kw, match", [
    (dict(beam_sizes=...), "beam_sizes must hold 4 positive integer sizes, got None"),
    (dict(matcher=...), "needs matcher=, requests= and layout="),
    (dict(requests=...), "needs matcher=, requests= and layout="),
    (dict(layout=...), "needs matcher=, requests= and layout="),
    (dict(beam_sizes=(1, 4)), "beam_sizes must hold 4 positive integer sizes"),
    (dict(beam_sizes=(1, 4, 4, 4, 4)), "beam_sizes must hold 4 positive integer sizes"),
    (dict(beam_sizes=(1, 0, 4, 4)), "beam_sizes must hold 4 positive integer sizes"),
    (dict(beam_sizes=(1, -4, 4, 4)), "beam_sizes must hold 4 positive integer sizes"),
    (dict(beam_sizes=(1, 4.0, 4, 4)), "beam_sizes must hold 4 positive integer sizes"),
    (dict(beam_sizes=(True, 4, 4, 4)), "beam_sizes must hold 4 positive integer sizes"),
    (dict(beam_sizes=4), "beam_sizes must hold 4 positive integer sizes"),
    (dict(beam_sizes="1444"), "beam_sizes must hold 4 positive integer sizes"),
    (dict(layout="per_position"), "layout must be a SidTokenLayout, got str"),
    (dict(matcher="cpu"), "matcher must be a gtmkit.Matcher, got str"),
    (dict(gtm=1), "gtm must be True or False"),
    (dict(postfilter=None), "postfilter must be True or False"),
    (dict(requests="ab"), "expected an encoded Request"),
])
def test_custom_generate_arguments_refused(world, models, kw, match):
    refused(match, _generate, world, models["t5"], **kw)


@pytest.mark.parametrize("arch", ["t5", "gpt2"])
def test_custom_generate_refuses_other_counts_and_vocabularies(world, models, arch):
    index, reqs = world
    model = models[arch]
    refused(f"{len(reqs)} inputs and 1 requests", _generate, world, model, requests=reqs[:1])
    refused(f"{len(reqs)} inputs and {len(reqs) + 1} requests", _generate, world, model, requests=reqs + reqs[:1])
    refused("the model scores 2051 tokens, the layout's vocabulary has 2056", _generate, world, model,
            layout=_other_vocab(index, 5))
    refused("the model scores 2051 tokens, the layout's vocabulary has 515", _generate, world, model,
            layout=shared(index))
    refused("matcher must be a gtmkit.Matcher, got Index", _generate, world, model, matcher=index)


@pytest.mark.parametrize("arch", ["t5", "gpt2"])
def test_custom_generate_takes_numpy_sizes_and_ignores_the_start_beam(world, models, arch):
    index, reqs = world
    model = models[arch]
    want = _generate(world, model)
    assert not np.isnan(want.scores).any() and np.isfinite(want.scores).any()
    for sizes in (np.array([1, 4, 4, 4]), (4, 4, 4, 4), [np.int32(1), np.int64(4), 4, 4]):
        got = _generate(world, model, beam_sizes=sizes)
        assert np.array_equal(got.sids, want.sids) and np.allclose(got.scores, want.scores, atol=1e-5)
    assert np.array_equal(want.leaf_nodes >= 0, np.isfinite(want.scores))
    for b in range(len(reqs)):
        for j in np.flatnonzero(want.leaf_nodes[b] >= 0):
            assert index.find(want.sids[b, j]) == want.leaf_nodes[b, j] >= index.first_leaf
        ads, _ = want.ads[b]
        assert index.ad_eligible(ads, reqs[b]).all()


# --- ModuleLogits ------------------------------------------------------------------------------------------
class Decoder(torch.nn.Module):
    """A toy GRU decoder; `out` reshapes what it returns to make it wrong."""

    def __init__(self, vocab, out=None, dim=8):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.cell = torch.nn.Embedding(vocab, dim), torch.nn.GRUCell(dim, dim)
        self.head, self.out = torch.nn.Linear(dim, vocab), out

    def forward(self, tokens, h):
        h = h if tokens is None else self.cell(self.emb(tokens), h)
        logits = self.head(h)
        return (logits, h) if self.out is None else self.out(logits, h)


def _search(world, module, layout="shared", state=None, **kw):
    index, reqs = world
    lay = shared(index) if layout == "shared" else layout
    fn = ModuleLogits(module, torch.zeros(len(reqs), 8) if state is None else state, lay, **kw)
    return gtmkit.beam_search(gtmkit.Matcher(index), reqs, fn, beam_sizes=(1, 4, 4, 4)[:index.sid_length])


@pytest.mark.parametrize("out, match", [
    (lambda o, h: (o[0], h), r"module must return real logits \[rows, vocab\] as a torch tensor, got Tensor \[515\]"),
    (lambda o, h: (o[:, None], h), r"module must return real logits \[rows, vocab\]"),
    (lambda o, h: (o.detach().numpy(), h), "as a torch tensor, got ndarray"),
    (lambda o, h: (o.tolist(), h), "as a torch tensor, got list"),
    (lambda o, h: (o.to(torch.complex64), h), "module must return real logits"),
    (lambda o, h: o, "module must return \\(logits, state\\), got Tensor"),
    (lambda o, h: (o, h, h), "module must return \\(logits, state\\), got tuple of 3"),
    (lambda o, h: None, "module must return \\(logits, state\\), got NoneType"),
    (lambda o, h: (o[:, :-5], h), "module scores 510 tokens, the layout's model vocabulary has 515"),
    (lambda o, h: (o[:1], h), r"expected logprobs \[2, 512\]"),
])
def test_module_logits_refuses_a_module_of_the_wrong_shape(world, out, match):
    refused(match, _search, world, Decoder(shared(world[0]).vocab_size, out))


@pytest.mark.parametrize("module, kw, match", [
    (5, {}, "module must be callable, got int"),
    (None, {}, "module must be callable, got NoneType"),
    ("decoder", {}, "module must be callable, got str"),
    (Decoder(515), dict(layout="shared layout"), "layout must be a SidTokenLayout or None, got str"),
    (Decoder(515), dict(device="bogus"), "device must be a torch device or its name, got 'bogus'"),
    (Decoder(515), dict(device=5.0), "device must be a torch device or its name, got 5.0"),
    (Decoder(515), dict(device="meta"), "device must hold data"),
])
def test_module_logits_refuses_bad_arguments(world, module, kw, match):
    refused(match, _search, world, module, **kw)


def test_module_logits_nan_and_inf_logits_give_no_nan_scores(world):
    for f in (lambda o, h: (o * float("nan"), h), lambda o, h: (o * float("inf"), h),
              lambda o, h: (o * 0 - float("inf"), h)):
        res = _search(world, Decoder(shared(world[0]).vocab_size, f))
        assert not np.isnan(res.scores).any()


def test_module_logits_direct_calls(world):
    """logits_fn called by hand: wrong steps and rows refused, lists taken, the caller's arrays left alone."""
    index, reqs = world
    B = len(reqs)
    fn = ModuleLogits(Decoder(shared(index).vocab_size), torch.zeros(B, 8), shared(index))
    assert tuple(fn(0, None, None).shape) == (B, index.vocab_size)
    refused("step must be >= 0", fn, -1, np.zeros(B, np.int32), np.arange(B, dtype=np.int32))
    refused("step must be an integer", fn, 1.5, np.zeros(B, np.int32), np.arange(B, dtype=np.int32))
    refused("parent_rows must be a 1-d array of integers, got NoneType", fn, 1, np.zeros(B, np.int32), None)
    refused("parent_rows must be a 1-d array of integers, got torch.float64", fn, 1, np.zeros(B, np.int32),
            np.array([0.0, 1.0]))
    refused("prev_tokens must be a 1-d array of integers", fn, 1, np.zeros((B, 1), np.int32), np.arange(B))
    refused("prev_tokens has 3 rows, parent_rows 2", fn, 1, np.zeros(3, np.int32), np.arange(B))
    refused("parent_rows: a row the state does not have", fn, 1, np.zeros(B, np.int32), np.array([0, 99]))
    parents, prev = np.array([-1, 1], np.int64), np.array([-1, 5], np.int64)
    a = fn(1, prev, parents)
    assert parents.tolist() == [-1, 1] and prev.tolist() == [-1, 5]  # clamped on a copy
    fn2 = ModuleLogits(Decoder(shared(index).vocab_size), torch.zeros(B, 8), shared(index))
    fn2(0, None, None)
    assert torch.equal(fn2(1, [-1, 5], [-1, 1]), a)


# --- reorder_state -----------------------------------------------------------------------------------------
class Pair(collections.namedtuple("Pair", "rows count")):
    pass


@dataclasses.dataclass
class Cache:
    keys: torch.Tensor
    step: int = 0


def test_reorder_state_on_nested_states():
    a = torch.arange(6.0).reshape(3, 2)
    want = a[[2, 2, 0, 1]]
    idx = torch.tensor([2, 2, 0, 1])
    state = {"h": a, "n": 3, "name": "gru", "none": None, "zero_d": torch.tensor(7.0),
             "list": [a, (a, 1.5)], "pair": Pair(a, 4), "cache": Cache(a, 2), "np": a.numpy().copy(),
             "od": collections.OrderedDict(h=a), "dd": collections.defaultdict(list, h=a)}
    for form in (idx, idx.int(), idx.numpy(), idx.tolist()):
        out = reorder_state(state, form)
        assert type(out) is dict and torch.equal(out["h"], want)
        assert out["n"] == 3 and out["name"] == "gru" and out["none"] is None
        assert torch.equal(out["zero_d"], torch.tensor(7.0))
        assert type(out["list"]) is list and type(out["list"][1]) is tuple and out["list"][1][1] == 1.5
        assert torch.equal(out["list"][0], want) and torch.equal(out["list"][1][0], want)
        assert type(out["pair"]) is Pair and torch.equal(out["pair"].rows, want) and out["pair"].count == 4
        assert type(out["cache"]) is Cache and torch.equal(out["cache"].keys, want) and out["cache"].step == 2
        assert np.array_equal(out["np"], want.numpy())
        assert type(out["od"]) is collections.OrderedDict and torch.equal(out["od"]["h"], want)
        assert type(out["dd"]) is collections.defaultdict and out["dd"]["missing"] == []
    assert torch.equal(state["h"], a) and state["np"].shape == (3, 2)  # the input state is not changed
    assert reorder_state(5, idx) == 5 and reorder_state(None, idx) is None
    assert torch.equal(reorder_state(torch.tensor(3), idx), torch.tensor(3))
    from transformers.modeling_outputs import BaseModelOutput
    enc = reorder_state(BaseModelOutput(last_hidden_state=a), idx)
    assert type(enc) is BaseModelOutput and torch.equal(enc.last_hidden_state, want)


@pytest.mark.parametrize("idx, match", [
    (torch.tensor([1.0, 0.0]), "idx must be a 1-d array of integers, got torch.float32"),
    (np.array([[1, 0]]), r"idx must be a 1-d array of integers, got torch.int64 of shape \[1, 2\]"),
    (torch.tensor([True, False]), "idx must be a 1-d array of integers, got torch.bool"),
    (None, "idx must be a 1-d array of integers, got NoneType"),
    ("01", "idx must be a 1-d array of integers"),
    (torch.tensor([5]), "idx: a row the state does not have"),
    ([-1, 0], "idx: a row the state does not have"),
])
def test_reorder_state_refuses_bad_rows(idx, match):
    refused(match, reorder_state, {"h": torch.zeros(2, 3), "n": 1}, idx)


def test_reorder_state_refuses_a_state_that_holds_itself():
    loop = [torch.zeros(2)]
    loop.append(loop)
    refused("state nests too deep", reorder_state, loop, torch.tensor([0]))
