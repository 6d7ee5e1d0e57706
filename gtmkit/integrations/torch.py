"""Plain PyTorch decoders: `ModuleLogits`, a `logits_fn` for `gtmkit.beam_search` from a module that carries a
cache between steps (docs/design.md §8). Needs torch (the extra `hf` brings it)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from ..errors import GtmkitError

try:
    import torch
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"gtmkit.integrations.torch needs torch: pip install 'gtmkit[hf]' ({e})") from None

from .._args import int_arg
from .layout import SidTokenLayout

__all__ = ["ModuleLogits", "reorder_state"]


def reorder_state(state, idx):
    """The state's rows idx (integers [R']: a tensor, array or list): tensors and numpy arrays along dim 0,
    objects with reorder_cache(idx) (e.g. transformers' caches) in place, tuples, lists, dicts and dataclasses
    item by item (their types kept); anything else (scalars, 0-d tensors, strings) as it is."""
    return _reorder_rows(state, _rows_index(idx, "idx"), "idx")


def _reorder_rows(state, idx, name: str):
    try:
        return _reorder(state, idx)
    except IndexError as e:
        raise GtmkitError(f"{name}: a row the state does not have ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise GtmkitError("state nests too deep to reorder (does it hold itself?)") from None


def _rows_index(idx, name: str, device=None):
    """idx (a tensor, numpy or CuPy array, or list) as a 1-d int64 tensor on `device`; anything else refused."""
    if not isinstance(idx, torch.Tensor):
        try:  # CuPy through DLPack: no copy to the host
            cuda = hasattr(idx, "__cuda_array_interface__")
            idx = torch.from_dlpack(idx) if cuda else torch.as_tensor(np.asarray(idx))
        except (TypeError, ValueError, RuntimeError):
            raise GtmkitError(f"{name} must be a 1-d array of integers, got {type(idx).__name__}") from None
    if idx.dim() != 1 or idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise GtmkitError(f"{name} must be a 1-d array of integers, got {idx.dtype} of shape {list(idx.shape)}")
    return idx.long() if device is None else idx.to(device).long()


def _reorder(state, idx):
    if isinstance(state, torch.Tensor):
        return state.index_select(0, idx.to(state.device)) if state.dim() else state
    if isinstance(state, np.ndarray):
        return state[idx.cpu().numpy()] if state.ndim else state
    if hasattr(state, "reorder_cache"):
        state.reorder_cache(idx)
        return state
    if isinstance(state, dict):
        out = copy.copy(state)  # the dict's own type (OrderedDict, defaultdict, ModelOutput), its keys rewritten
        for k, v in state.items():
            out[k] = _reorder(v, idx)
        return out
    if isinstance(state, (tuple, list)) and not hasattr(state, "_fields"):
        return type(state)(_reorder(v, idx) for v in state)
    if isinstance(state, tuple):  # a NamedTuple
        return type(state)(*(_reorder(v, idx) for v in state))
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return dataclasses.replace(state, **{f.name: _reorder(getattr(state, f.name), idx)
                                             for f in dataclasses.fields(state) if f.init})
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
        if layout is not None and not isinstance(layout, SidTokenLayout):
            raise GtmkitError(f"layout must be a SidTokenLayout or None, got {type(layout).__name__}")
        self.module, self.state, self.layout = module, state, layout
        if device is None:
            p = next(iter(module.parameters()), None) if hasattr(module, "parameters") else None
            device = p.device if p is not None else torch.device("cpu")
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError, ValueError):
            raise GtmkitError(f"device must be a torch device or its name, got {device!r}") from None
        if self.device.type == "meta":
            raise GtmkitError("device must hold data: 'meta' tensors have none")

    def __call__(self, step: int, prev_tokens, parent_rows):
        step = int_arg(step, "step", lo=0)
        with torch.no_grad():
            if step == 0:
                tokens = None
            else:
                # out of place: the tensors may share the caller's numpy memory
                idx = _rows_index(parent_rows, "parent_rows", self.device).clamp(min=0)
                tok = _rows_index(prev_tokens, "prev_tokens", self.device).clamp(min=0)
                if tok.shape != idx.shape:
                    raise GtmkitError(f"prev_tokens has {tok.shape[0]} rows, parent_rows {idx.shape[0]}")
                self.state = _reorder_rows(self.state, idx, "parent_rows")
                tokens = tok + int(self.layout.offsets_for(step)[-1]) if self.layout is not None else tok
            out = self.module(tokens, self.state)
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise GtmkitError(f"module must return (logits, state), got {type(out).__name__}"
                                  + (f" of {len(out)}" if isinstance(out, (tuple, list)) else ""))
            logits, self.state = out
            if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.is_complex():
                raise GtmkitError("module must return real logits [rows, vocab] as a torch tensor, got "
                                  f"{type(logits).__name__} {list(getattr(logits, 'shape', []))}")
            if self.layout is not None and logits.shape[1] != self.layout.vocab_size:
                raise GtmkitError(f"module scores {logits.shape[1]} tokens, the layout's model vocabulary has "
                                  f"{self.layout.vocab_size}")
            logp = torch.log_softmax(logits.float(), dim=-1)
            if self.layout is None:
                return logp
            V = self.layout.sid_vocab
            off = int(self.layout.offsets_for(step + 1)[-1])
            return logp[:, off:off + V].contiguous()
