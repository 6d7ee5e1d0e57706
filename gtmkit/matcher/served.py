"""`Matcher`: the CD+GTM matcher a serving process holds, over an index that it can replace while it serves
(docs/design.md §9). Each operation runs on the IndexMatcher current when it starts; `swap` makes a new one beside
the old and switches between calls."""

from __future__ import annotations

import threading

from ..errors import GtmkitError
from .cuda.params import FUSED_CLUSTER, FUSED_THREADS
from .matcher import IndexMatcher

_OWN = ("_current", "_settings", "_swap_lock")


class Matcher:
    """CD+GTM matcher over an Index: IndexMatcher's operations (step, mask, prefix_nodes, postfilter,
    pause_ads, ...; see there and docs/matcher.md) on the index it serves now, plus `swap`.

    A call runs whole on the index current when it starts, and its result names it (`version`). A sequence of
    calls that must see one index (a search: its node ids belong to one trie) takes `current()` once and calls
    that; beam_search, GraphedBeamSearch and the decoder integrations do so. An old index's memory (on the GPU
    too) is freed when the last call or object that took it lets it go."""

    def __init__(self, index, device: str = "cpu", cuda_step: str = "auto", fused_cluster: int = FUSED_CLUSTER,
                 fused_threads: int = FUSED_THREADS):
        current = IndexMatcher(index, device, cuda_step, fused_cluster, fused_threads)
        object.__setattr__(self, "_current", current)
        object.__setattr__(self, "_settings", dict(device=current.device, cuda_step=cuda_step,
                                                   fused_cluster=fused_cluster, fused_threads=fused_threads))
        object.__setattr__(self, "_swap_lock", threading.Lock())

    def current(self) -> IndexMatcher:
        """The IndexMatcher serving now: hold it for calls that must all run on one index."""
        return self._current

    def swap(self, index) -> str:
        """Serve `index` from the next call on: its matcher is made (and uploaded to the GPU) while the old one
        keeps serving, then replaces it in one assignment, which every caller thread sees at its next call; calls
        already running finish on the old one. Paused ads are the old index's: pause them again on the new one
        if its catalog still holds them. Returns the new version."""
        if not hasattr(index, "artifact") or not hasattr(index, "node_offsets"):
            raise GtmkitError(f"Matcher.swap: index must be a loaded gtmkit Index, got {type(index).__name__}")
        with self._swap_lock:  # two swaps at once: one after the other, the last one wins
            new = IndexMatcher(index, **self._settings)
            object.__setattr__(self, "_current", new)
        return new.version

    def __getattr__(self, name):
        return getattr(self._current, name)

    def __setattr__(self, name, value):
        if name in _OWN:
            raise AttributeError(f"Matcher.{name} is set by swap")
        setattr(self._current, name, value)

    def __repr__(self) -> str:
        return f"Matcher(device={self._current.device!r}, version={self._current.version!r})"
