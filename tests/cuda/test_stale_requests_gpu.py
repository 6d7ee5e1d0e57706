"""Requests follow the index on the GPU matcher: the stale-request state machine of tests/gtm/test_stale_requests.py
on Matcher(device="cuda"), and a batch uploaded before a swap stacked and uploaded again; answers equal the CPU's."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from gtmkit._gpu import cuda_available
from gtmkit.matcher.matcher import Matcher

pytestmark = pytest.mark.gpu
if not cuda_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

from support.stale_cases import StaleRequests, check_batch_across_swap  # noqa: E402


class StaleRequestsGpu(StaleRequests):
    device = "cuda"


StaleRequestsGpu.TestCase.settings = settings(max_examples=8, stateful_step_count=5, deadline=None,
                                              suppress_health_check=list(HealthCheck))
test_stale_requests_on_the_gpu = StaleRequestsGpu.TestCase


def test_a_device_batch_uploaded_before_a_swap(tmp_path):
    check_batch_across_swap(tmp_path, lambda idx: Matcher(idx, "cuda"))
