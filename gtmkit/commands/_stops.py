"""What a command stopped by Ctrl-C or SIGTERM leaves: the command line's one line says whether the new version was
published, naming it if so."""

from __future__ import annotations

import contextlib
import os
import signal

_watched = []  # (path as given, Switch) of the artifacts the running command writes, in order


def reset() -> None:
    _watched.clear()


@contextlib.contextmanager
def watched(out_dir):
    """A Switch of out_dir (any base: it changes nothing of the write), kept for the stop line."""
    from ..artifact.staging import Switch
    with Switch(out_dir) as sw:
        _watched.append((str(out_dir), sw))
        yield sw


def stop_line(signum) -> str:
    """'gtmkit: stopped by Ctrl-C ...', and what the path written serves now."""
    what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    if not _watched:
        return f"gtmkit: stopped by {what}"
    path, sw = _watched[-1]
    published = sw.published or _switched(sw)
    if published:
        return f"gtmkit: stopped by {what} after the new version was published: {path} serves {published}"
    if sw.started is not None:
        return f"gtmkit: stopped by {what}; nothing was published: {path} serves {sw.started} as before"
    if getattr(sw, "remote", False):
        return f"gtmkit: stopped by {what}; nothing was published at {path} (no pointer object was written)"
    left = "nothing is left there" if not os.path.lexists(sw.root) else "it holds what it held before"
    return f"gtmkit: stopped by {what}; nothing was published at {path} ({left})"


def _switched(sw):
    """The version the path serves if its pointer moved since the command started: a stop that came between the
    pointer's switch and the writer's note of it."""
    from ..errors import GtmkitError
    from ..artifact import layout, remote
    try:
        now = remote.served(sw.root) if getattr(sw, "remote", False) else layout.served(sw.root)
    except (GtmkitError, OSError):
        return None
    return now if now is not None and now != sw.started else None
