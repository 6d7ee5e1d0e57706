"""Constrained beam search over a SuccinctTrie, the public entry points: each picks the CPU search
(trie/search_cpu.py) or the GPU one (trie/search_cuda.py), which share semantics and results exactly
(semantics in trie/search_cpu.py's docstring)."""

from __future__ import annotations

import math

from ..errors import GtmkitError
from .search_cpu import TrieBeamStepper, trie_beam_search_cpu
from .search_cuda import CL, check_cluster

DEVICES = ("cpu", "cuda", "auto")


def _on_gpu(device, what: str) -> bool:
    """Whether `device` picks the GPU ("auto": when CuPy sees one); "cuda" without one is refused."""
    if device not in DEVICES:
        raise GtmkitError(f"{what}: device must be 'cpu', 'cuda' or 'auto', got {device!r}")
    if device == "cpu":
        return False
    from .._gpu import cuda_available
    if cuda_available():
        return True
    if device == "cuda":
        raise GtmkitError(f"{what}: device 'cuda' needs CuPy and a visible GPU")
    return False


def trie_beam_search(trie, tokens, logp, beam_width: int, theta_tok: float = -math.inf,
                     theta_sent: float = -math.inf, alpha: float = 0.0, device: str = "cpu",
                     cluster: int = CL) -> tuple:
    """NAR constrained beam search: all T steps in one call.

    tokens  int [b, T, K]    per query and step, the top-K proposed tokens, shared by all beams
                             (any order; ids outside [0, 2^31-1], e.g. -1 padding, match nothing)
    logp    float [b, T, K]  their log-probs
    -> (key_ids int64 [b, beam_width], -1 padded; scores float32 [b, beam_width], -inf padded), best
    first; restore a key's tokens with trie.key(id). device: "cpu", "cuda" or "auto" (the GPU when CuPy
    sees one). On the GPU the results are NumPy arrays for NumPy proposals, CuPy arrays for CuPy ones.
    cluster: on the GPU, the thread blocks (SMs) that search one query, 1 to 8 (default 8; GPUs before sm_90
    take 1); the same results with any; checked on the CPU too."""
    check_cluster(cluster, "trie_beam_search")
    if _on_gpu(device, "trie_beam_search"):
        from .search_cuda import trie_beam_search_cuda
        return trie_beam_search_cuda(trie, tokens, logp, beam_width, theta_tok, theta_sent, alpha, cluster=cluster)
    return trie_beam_search_cpu(trie, tokens, logp, beam_width, theta_tok, theta_sent, alpha)


def trie_beam_stepper(trie, batch: int, beam_width: int, theta_tok: float = -math.inf, theta_sent: float = -math.inf,
                      alpha: float = 0.0, max_steps: int = None, device: str = "cpu", cluster: int = CL):
    """AR constrained beam search, one step per call, proposals per beam from the caller's model.

        stepper = trie_beam_stepper(trie, batch=b, beam_width=BW)
        for t in range(T):
            live = stepper.live            # beams to score: live.nodes / live.count (step 0: the root)
            tokens, logp = model_topk(...)  # [b, R, K], row i = proposals of live beam i (R >= count)
            live = stepper.step(tokens, logp)  # reorder model state by live.parents
        key_ids, scores = stepper.result()

    Same semantics and outputs as trie_beam_search; rows past a query's live count are ignored. With
    max_steps given, the last step skips building a live list nobody will extend. device "cpu" gives a
    TrieBeamStepper (NumPy arrays), "cuda" (or "auto" with a visible GPU) a search_cuda.TrieBeamStepperCuda
    (the same calls, CuPy arrays). cluster: as trie_beam_search's."""
    check_cluster(cluster, "trie_beam_stepper")
    if _on_gpu(device, "trie_beam_stepper"):
        from .search_cuda import TrieBeamStepperCuda
        return TrieBeamStepperCuda(trie, batch, beam_width, theta_tok, theta_sent, alpha, max_steps, cluster=cluster)
    return TrieBeamStepper(trie, batch, beam_width, theta_tok, theta_sent, alpha, max_steps)
