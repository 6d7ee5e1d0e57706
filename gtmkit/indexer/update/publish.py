"""An update of an artifact path that other writers may change meanwhile (`gtmkit update`, docs/design.md §9): the
changes and the pause lists are applied to the version the path serves, and the result is published only over
that version (a compare-and-switch); when another writer published first, they are applied again to the version it
published, so no writer's changes are lost."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import numpy as np

from ...artifact.staging import VersionChanged, label
from ...progress import Progress
from .apply import UpdateReport

TRIES = 10  # applications before giving up: each failed one means another writer published meanwhile


@dataclass
class PathUpdate:
    """What update_path did: the update's report, the ads the written version serves paused, whether a version was
    written, how many times the changes were applied, and the version the written one was derived from."""

    report: UpdateReport
    paused: np.ndarray
    written: bool
    tries: int
    base: str | None


def update_path(path, changes=None, pause=None, resume=None, rebuild: bool = False, client=None,
                workers: int = None, progress: Progress = None, tries: int = None,
                no_worker_timeout: float = None, cache=None, staging=None) -> PathUpdate:
    """Apply changed ads (a Parquet path or Table in the catalog's schema, or None) and pause / resume lists (ad
    ids) to the index at `path` and write the result as its new version, published only if the path still serves
    the version it was derived from; otherwise applied again to the version served then, up to `tries` times
    (default TRIES).
    The paused ads are the base version's plus `pause`, less `resume`. rebuild: ads on SIDs the trie lacks are
    added by a shard rebuild (client / workers: where its tasks run; no_worker_timeout: how long they wait for a
    live worker, staging: where they keep their pieces, as rebuild_shards takes them). VersionChanged (one line naming both
    versions, nothing written) when every try lost the race; UpdateError / RequestError as the update raises
    them, against the version served at that try. An object-store URL is read through the local folder `cache`
    (load_index) and the new version published to the store over the version read (remote.publish)."""
    from ...index import load_index
    from .changes import read_changes
    from .write import base_version, write_changes
    tries = TRIES if tries is None else max(1, int(tries))
    lists = pause is not None or resume is not None
    pause = np.zeros(0, np.int64) if pause is None else np.asarray(pause, np.int64)
    resume = np.zeros(0, np.int64) if resume is None else np.asarray(resume, np.int64)
    first = last = None
    for attempt in range(1, tries + 1):
        index = load_index(path, cache=cache)
        new = None
        try:
            paused = np.asarray(index.paused_ad_ids, np.int64)
            if lists:
                paused = np.setdiff1d(np.union1d(paused, pause), resume)
            ch = read_changes(index, changes, progress) if changes is not None else None
            if rebuild and ch is not None and (ch.leaves < 0).any():
                from .rebuild import check_ids, rebuild_changes
                check_ids(index, ch, np.concatenate([pause, resume]))  # before anything is written
                new, rep = rebuild_changes(index, ch, client, workers, progress, paused, no_worker_timeout,
                                           staging)
                written = True
            else:
                _, rep, written = write_changes(index, ch, paused, progress, np.concatenate([pause, resume]))
            return PathUpdate(rep, paused, written, attempt, base_version(index))
        except VersionChanged as exc:
            first, last = first or exc, exc
        finally:
            index.close()  # its version may go once another writer replaced it
            if new is not None:
                new.close()
        time.sleep(random.uniform(0, 0.02 * attempt))  # writers that collided start their next try apart
    raise VersionChanged(path, first.base, last.current,
                         f"{path}: other writers replaced the version this update read {tries} times in a row (it "
                         f"started from {label(first.base)}; {label(last.current)} is current); nothing was "
                         f"written: run it again")
