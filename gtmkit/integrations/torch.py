"""Plain PyTorch decoders: `ModuleLogits`, a `logits_fn` for `gtmkit.beam_search` from a module that carries a
cache between steps (docs/design.md §8). Needs torch (the extra `hf` brings it)."""

from __future__ import annotations

import numpy as np

from ..errors import GtmkitError

try:
    import torch
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"gtmkit.integrations.torch needs torch: pip install 'gtmkit[hf]' ({e})") from None

from .layout import SidTokenLayout

__all__ = ["ModuleLogits", "reorder_state"]


def reorder_state(state, idx):
    """The state's rows idx (int64 tensor [R']): tensors along dim 0, objects with reorder_cache(idx) (e.g.
    transformers' caches) in place, tuples, lists and dicts item by item; anything else as it is."""
    if isinstance(state, torch.Tensor):
        return state.index_select(0, idx) if state.dim() else state
    if hasattr(state, "reorder_cache"):
        state.reorder_cache(idx)
        return state
    if isinstance(state, dict):
        return {k: reorder_state(v, idx) for k, v in state.items()}
    if isinstance(state, (tuple, list)) and not hasattr(state, "_fields"):
        return type(state)(reorder_state(v, idx) for v in state)
    if isinstance(state, tuple):  # a NamedTuple
        return type(state)(*(reorder_state(v, idx) for v in state))
    return state


class ModuleLogits:
    """logits_fn(step, prev_tokens, parent_rows) for `gtmkit.beam_search` over a PyTorch module.

    module(tokens, state) -> (logits [R, model vocab], state): tokens int64 [R] are the previous step's model
    tokens, None at step 0 (the state alone starts each request's row); state is whatever the module keeps
    between steps (its cache), one row a beam row along dim 0, starting with one row a request. Before every
    step after the first the state is reordered by the parent rows (`reorder_state`: index_select on dim 0,
    which also grows the rows; a dead row, parent -1, takes row 0 and its output is ignored). Returns the
    log-softmax over the model's whole vocabulary, cut to the step's SID range (layout; None: the model's
    vocabulary is the SID vocabulary). Tensors stay on the module's device: CUDA log-probs go to a GPU
    Matcher through DLPack."""

    def __init__(self, module, state, layout: SidTokenLayout = None, device=None):
        if not callable(module):
            raise GtmkitError(f"module must be callable, got {type(module).__name__}")
        self.module, self.state, self.layout = module, state, layout
        if device is None:
            p = next(iter(module.parameters()), None) if hasattr(module, "parameters") else None
            device = p.device if p is not None else torch.device("cpu")
        self.device = torch.device(device)

    def _torch(self, x):
        if isinstance(x, torch.Tensor):
            return x.to(self.device)
        if isinstance(x, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
        return torch.from_dlpack(x).to(self.device)  # CuPy: no copy

    def __call__(self, step: int, prev_tokens, parent_rows):
        with torch.no_grad():
            if step == 0:
                tokens = None
            else:
                idx = self._torch(parent_rows).long().clamp_(min=0)
                self.state = reorder_state(self.state, idx)
                tok = self._torch(prev_tokens).long().clamp_(min=0)
                tokens = tok + int(self.layout.offsets_for(step)[-1]) if self.layout is not None else tok
            logits, self.state = self.module(tokens, self.state)
            logp = torch.log_softmax(logits.float(), dim=-1)
            if self.layout is None:
                return logp
            V = self.layout.sid_vocab
            off = int(self.layout.offsets_for(step + 1)[-1])
            return logp[:, off:off + V].contiguous()
