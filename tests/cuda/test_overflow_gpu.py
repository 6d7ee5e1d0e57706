"""beam_score + logprob overflowing float32 on the device: both GPU step paths equal the CPU step on scores near
float32 max (float32, float16 and bfloat16 log-probs), rank a sum that overflows to +inf first, and keep such beams in
an eager and a graphed beam search; host ids that are not integers are refused before any upload. The emulated form
of these cases is test_overflow_emu.py."""

from __future__ import annotations

import numpy as np
import pytest

from gtmkit._gpu import cuda_available
from gtmkit.matcher.matcher import Matcher
from gtmkit.matcher.options import CudaOptions

pytestmark = pytest.mark.gpu
if not cuda_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

import cupy as cp  # noqa: E402

import gtmkit  # noqa: E402

from support import overflow_cases as cases  # noqa: E402
from support.catalogs import random_user  # noqa: E402
from support.indexes import _build  # noqa: E402
from support.step_cases import same_search  # noqa: E402


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    idx, _, _ = _build(tmp_path_factory.mktemp("overflow_gpu"), 81, "static", {"k": [2, 3, 2]}, n_ads=250, L=3, V=9)
    rng = np.random.default_rng(3)
    return idx, [idx.encode_request(random_user(rng)) for _ in range(3)]


@pytest.fixture(params=["fused", "multi"])
def step_path(request):
    if request.param == "fused" and int(cp.cuda.Device().compute_capability[:-1]) < 9:
        pytest.skip("the fused step needs a Hopper-class GPU")
    return request.param


def test_overflow_steps_equal_cpu(small_index, step_path):
    idx, reqs = small_index
    cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", options=CudaOptions(step=step_path))
    cases.check_overflow_steps(idx, cpu, gpu, reqs, np.random.default_rng(4), 60, (np.float32, np.float16))


def test_overflow_bfloat16_logprobs_equal_cpu(small_index, step_path):
    """torch bfloat16 log-probs near float32 max (bfloat16 holds them): the step widens them and sums in float32."""
    torch = pytest.importorskip("torch", reason="needs the hf extra: pip install 'gtmkit[hf]'")
    idx, reqs = small_index
    cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", options=CudaOptions(step=step_path))
    rng = np.random.default_rng(6)
    for i in range(12):
        nodes, rr, lp, bs = cases.overflow_case(idx, rng, len(reqs), 6, i % idx.sid_length)
        t = torch.tensor(lp, device="cuda").to(torch.bfloat16)
        widened = t.float().cpu().numpy()
        want = cpu.step(nodes, widened, bs, rr, reqs, 7, gtm=bool(i % 2))
        got = gpu.step(torch.tensor(nodes, device="cuda"), t, torch.tensor(bs, device="cuda"),
                       torch.tensor(rr, device="cuda"), reqs, 7, gtm=bool(i % 2))
        for name, x, y in zip(want._fields, want, got):
            assert np.array_equal(x, cp.asnumpy(y)), (i, name)


def test_overflow_beam_search_equals_cpu(small_index, step_path):
    idx, reqs = small_index
    cases.check_overflow_beam_search(idx, Matcher(idx, "cpu"), Matcher(idx, "cuda", options=CudaOptions(step=step_path)), reqs,
                                     (1, 4, 6))


def test_overflow_graphed_search_equals_eager(small_index, step_path):
    """A graphed search over recorded overflowing log-probs (fused token history and PDL where the GPU has them)
    replays the eager search's SIDs, scores and ads."""
    from gtmkit.matcher.cuda.graph import GraphedBeamSearch
    idx, reqs = small_index
    m = Matcher(idx, "cuda", options=CudaOptions(step=step_path))
    sizes = (1, 4, 6)
    logits = []
    fn = cases.overflow_logits(idx, cp)
    eager = gtmkit.beam_search(m, reqs, lambda t, prev, par: logits.append(fn(t, prev, par)) or logits[-1], sizes)
    assert (cp.asnumpy(eager.scores)[:, 0] == np.inf).any()
    g = GraphedBeamSearch(m, reqs, lambda t, prev, par: logits[t], sizes)
    for _ in range(3):
        same_search(g.replay(), eager)


def test_host_ids_refused_before_upload(small_index, step_path):
    idx, reqs = small_index
    cases.check_host_ids_refused(idx, Matcher(idx, "cuda", options=CudaOptions(step=step_path)), reqs)
