"""Index.node_passes at the edges of the node range: -1 (an absent node) passes nothing in every layout,
other ids outside the trie are refused in one line, and the request is checked even for -1."""

from __future__ import annotations

import numpy as np
import pytest

from gtmkit.errors import GtmkitError, RequestError

from support.catalogs import random_user
from support.indexes import MODES, _build


@pytest.mark.parametrize("mode,kw", MODES)
def test_absent_node_passes_nothing(tmp_path, mode, kw):
    idx, _, _ = _build(tmp_path, 7, mode, kw)
    req = idx.encode_request(random_user(np.random.default_rng(1)))
    assert idx.node_passes(-1, req) is False
    assert idx.node_passes(np.int64(-1), req) is False
    assert idx.node_passes(idx.find((10**6,)), req) is False  # find's "no such prefix" feeds straight in
    for bad in (-2, idx.num_nodes, 2**63):
        with pytest.raises(GtmkitError, match="outside") as e:
            idx.node_passes(bad, req)
        assert len(str(e.value).splitlines()) == 1
    with pytest.raises(RequestError):
        idx.node_passes(-1, "not a request")
