"""The decoder integrations' remaining holes: gtmkit_beam_search names the index version on its Result as
beam_search does; a GTMLogitsProcessor whose prompt_len leaves no room for a SID (prompt_len=0 on a T5, whose
decoder input starts with the start token) is refused with one line instead of masking every token; a search too
large for host memory is refused with the size it would need."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the hf extra: pip install 'gtmkit[hf]'")
pytest.importorskip("transformers", reason="needs the hf extra: pip install 'gtmkit[hf]'")

import gtmkit  # noqa: E402
from gtmkit.errors import GtmkitError  # noqa: E402
from gtmkit.integrations.transformers import GTMLogitsProcessor, SidTokenLayout, gtmkit_beam_search  # noqa: E402
from gtmkit import _args as margs  # noqa: E402

from support.hf_models import MODELS, SPECIALS, synthetic_world  # noqa: E402

M = 3


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return synthetic_world(tmp_path_factory.mktemp("residue"), 400, seed=12, n_users=2)


def per_position(index):
    V, L = index.vocab_size, index.sid_length
    return SidTokenLayout([SPECIALS + d * V for d in range(L)], SPECIALS + L * V)


@pytest.fixture(scope="module")
def models(world):
    lay = per_position(world[0])
    return {arch: MODELS[arch](lay.vocab_size, seed=4) for arch in ("t5", "gpt2")}


def _inputs(model, B, n=5):
    return torch.randint(SPECIALS, int(model.config.vocab_size), (B, n), generator=torch.Generator().manual_seed(1))


def _live_sids_in_index(index, lay, out, start, L):
    """Every live sequence (score above transformers' -1e9 placeholder) is a SID of the index; at least one is."""
    sids = np.asarray(lay.check(index).to_sid(out.sequences[:, start:start + L].numpy(), None))
    live = out.sequences_scores.numpy() > -1e8
    assert live.any()
    assert all(index.find(s) >= index.first_leaf for s in sids[live])


def _refused(match, fn, *args, **kwargs) -> str:
    with pytest.raises(GtmkitError, match=match) as e:
        fn(*args, **kwargs)
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("arch", ["t5", "gpt2"])
def test_gtmkit_beam_search_result_names_its_version(world, models, arch):
    index, reqs = world
    m = gtmkit.Matcher(index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = models[arch].generate(_inputs(models[arch], len(reqs)), custom_generate=gtmkit_beam_search,
                                    requests=reqs, matcher=m, beam_sizes=(1, 4, 4, 4)[:index.sid_length],
                                    layout=per_position(index))
    assert res.version == m.version == index.version and res.version


def _generate_with(model, index, reqs, proc, max_new):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(_inputs(model, len(reqs)), num_beams=M, num_return_sequences=M, do_sample=False,
                              max_new_tokens=max_new, min_new_tokens=max_new, logits_processor=[proc],
                              length_penalty=0.0, output_scores=True, return_dict_in_generate=True)


def test_prompt_len_without_room_for_a_sid_is_refused(world, models):
    """prompt_len=0 on a T5 (its decoder starts from the start token) would read the start token as a SID token and
    mask every token: refused with one line naming the length generate() starts from; prompt_len=1 and None decode
    SIDs of the index."""
    index, reqs = world
    lay, L = per_position(index), index.sid_length
    m = gtmkit.Matcher(index)
    t5 = models["t5"]
    msg = _refused("prompt_len=0 leaves no room for a SID", _generate_with, t5, index, reqs,
                   GTMLogitsProcessor(m, reqs, M, lay, prompt_len=0), L)
    assert "prompt_len=1" in msg
    for prompt_len in (1, None):
        proc = GTMLogitsProcessor(m, reqs, M, lay, prompt_len=prompt_len)
        _live_sids_in_index(index, lay, _generate_with(t5, index, reqs, proc, L), 1, L)
    # a decoder-only model: a prompt_len shorter than the prompt is refused the same way; the prompt's length is not
    gpt2, n = models["gpt2"], 5
    _refused(f"prompt_len=2 leaves no room for a SID: generation starts from {n} tokens", _generate_with, gpt2,
             index, reqs, GTMLogitsProcessor(m, reqs, M, lay, prompt_len=2), L)
    _live_sids_in_index(index, lay, _generate_with(gpt2, index, reqs, GTMLogitsProcessor(m, reqs, M, lay,
                                                                                          prompt_len=n), L), n, L)
    # one processor over two generations: each starts from the prompt again
    proc = GTMLogitsProcessor(m, reqs, M, lay, prompt_len=1)
    for _ in range(2):
        _live_sids_in_index(index, lay, _generate_with(t5, index, reqs, proc, L), 1, L)


def test_gtmkit_beam_search_too_large_for_memory_is_refused(world, models, monkeypatch):
    index, reqs = world
    monkeypatch.setattr(margs, "available_bytes", lambda: 1 << 30)
    t5 = models["t5"]
    sizes = (1, 10_000_000, 10_000_000, 10_000_000)[:index.sid_length]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        msg = _refused("beam_sizes .* would need .* GiB, 1.0 GiB available", t5.generate, _inputs(t5, len(reqs)),
                       custom_generate=gtmkit_beam_search, requests=reqs, matcher=gtmkit.Matcher(index),
                       beam_sizes=sizes, layout=per_position(index))
    assert "10000000" in msg
