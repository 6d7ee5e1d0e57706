"""`Matcher`: the CD+GTM matcher a serving process holds, over an index that it can replace while it serves
(docs/design.md §9). Each operation runs on the IndexMatcher current when it starts; `swap` makes a new one beside
the old and switches between calls."""

from __future__ import annotations

import threading

from ..errors import GtmkitError
from .index_matcher import IndexMatcher, Step  # noqa: F401  (Step re-exported from its old place)
from .options import CudaOptions, resolve

_OWN = ("_current", "_settings", "_swap_lock")


class Matcher:
    """CD+GTM matcher over an Index: IndexMatcher's operations (step, mask, prefix_nodes, postfilter,
    pause_ads, ...; see there and docs/matcher.md) on the index it serves now, plus `swap`.

    A call runs whole on the index current when it starts, and its result names it (`version`). A sequence of
    calls that must see one index (a search: its node ids belong to one trie) takes `current()` once and calls
    that; beam_search, GraphedBeamSearch and the decoder integrations do so. An old index's memory (on the GPU
    too) is freed when the last call or object that took it lets it go."""

    def __init__(self, index, device: str = "cpu", options: CudaOptions = None, cpu_selection: str = "auto",
                 **deprecated):
        current = IndexMatcher(index, device, resolve(options, deprecated, "Matcher"), cpu_selection)
        object.__setattr__(self, "_current", current)
        object.__setattr__(self, "_settings", dict(device=current.device, options=current.options,
                                                   cpu_selection=cpu_selection))
        object.__setattr__(self, "_swap_lock", threading.Lock())

    def current(self) -> IndexMatcher:
        """The IndexMatcher serving now: hold it for calls that must all run on one index."""
        return self._current

    def swap(self, index) -> str:
        """Serve `index` from the next call on: its matcher is made (and uploaded to the GPU) while the old one
        keeps serving, then replaces it in one assignment, which every caller thread sees at its next call; calls
        already running finish on the old one. The new index serves the ads its artifact keeps paused; pauses made
        on the old one are not carried: pause them again if the new catalog still holds them. Returns the new
        version."""
        if not hasattr(index, "artifact") or not hasattr(index, "node_offsets"):
            raise GtmkitError(f"Matcher.swap: index must be a loaded gtmkit Index, got {type(index).__name__}")
        with self._swap_lock:  # two swaps at once: one after the other, the last one wins
            new = IndexMatcher(index, **self._settings)
            object.__setattr__(self, "_current", new)
        return new.version

    def encode_request(self, user: dict):
        """The user's request encoded against the index served now. A request encoded before a later swap or update
        is encoded again by the call that uses it (docs/design.md §9): holding requests across swaps is safe."""
        return self._current.encode_request(user)

    def update_ads(self, changes, progress=None):
        """Apply changed ads (docs/design.md §9): rows in the catalog's schema, as a Parquet path or a pyarrow
        Table, each an edit of the ad with its id or a new ad. An updated index is derived from the current one
        (copy-on-write: unchanged arrays shared) and served from the next call as by `swap`, with the paused ads
        still paused; its version is the current one's plus "+n". Ads whose SID is not in the trie are left out
        and listed in the report (a rebuild adds them). UpdateError when the new ads would pass the index's slack
        (nothing changes then). -> UpdateReport."""
        from ..indexer.update import read_changes, update_index
        import pyarrow as pa
        if isinstance(changes, pa.RecordBatch):  # taken as the one-batch Table it is
            changes = pa.Table.from_batches([changes])
        with self._swap_lock:  # pauses wait, so none is lost between the copy of the paused ads and the switch
            cur = self._current
            index, report = update_index(cur.index, read_changes(cur.index, changes, progress))
            if index is not cur.index:
                index.paused_ad_ids = cur.paused_ads()  # what this matcher has paused, paused from the first call
                object.__setattr__(self, "_current", IndexMatcher(index, **self._settings))
        return report

    def pause_ads(self, ad_ids) -> int:
        with self._swap_lock:
            return self._current.pause_ads(ad_ids)

    def resume_ads(self, ad_ids) -> int:
        with self._swap_lock:
            return self._current.resume_ads(ad_ids)

    pause_ads.__doc__, resume_ads.__doc__ = IndexMatcher.pause_ads.__doc__, IndexMatcher.resume_ads.__doc__

    def __getattr__(self, name):
        return getattr(self._current, name)

    def __setattr__(self, name, value):
        if name in _OWN:
            raise AttributeError(f"Matcher.{name} is set by swap")
        setattr(self._current, name, value)

    def __repr__(self) -> str:
        return f"Matcher(device={self._current.device!r}, version={self._current.version!r})"
