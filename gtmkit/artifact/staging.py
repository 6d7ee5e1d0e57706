"""The writer's side of the versioned layout: a private staging directory inside the artifact path,
published by renaming it to a fresh version and switching the pointer (docs/format.md). A write made inside
``with Switch(root, base)`` is a compare-and-switch: it publishes only if the path still serves `base`."""

from __future__ import annotations

import contextvars
import os
import pathlib

from ..errors import ArtifactError
from . import layout
from .locks import Lock
from .output import check_output
from .writes import NO_SPACE, WriteError


ANY = object()  # a Switch base that accepts whatever version the path serves
_SWITCHES = contextvars.ContextVar("gtmkit_switches", default=())  # the open Switch blocks of this thread


def label(name) -> str:
    return name if name is not None else "none"


class VersionChanged(ArtifactError):
    """A compare-and-switch found the path serving another version than the one its write started from."""

    def __init__(self, root, base, current, message: str = None):
        self.root, self.base, self.current = root, base, current
        super().__init__(message or f"{root}: the version this write started from ({label(base)}) was replaced by "
                         f"{label(current)} meanwhile; nothing was written")


class Switch:
    """Writes of one artifact path made inside ``with Switch(root, base):`` in this thread are compare-and-switch:
    each publishes only if the path still serves `base` (a version name; None: no version, a new path or the flat
    layout; ANY: whatever it serves) at its pointer switch, checked under the lock that serialises the switches,
    and raises VersionChanged otherwise, having written nothing. .started: the version served when the block
    began; .replaced, .published: the versions the last publish inside it replaced and wrote."""

    def __init__(self, root, base=ANY):
        from . import remote
        self.remote = remote.is_url(root)  # an object-store URL: its pointer object is compared (remote.publish)
        self.root = remote.normalize(root) if self.remote else pathlib.Path(os.path.abspath(root))
        self.base = base
        self.started = self.replaced = self.published = None
        self._token = None

    def __enter__(self) -> "Switch":
        from . import remote
        try:
            self.started = remote.served(self.root) if self.remote else layout.served(self.root)
        except ArtifactError:
            self.started = None  # a damaged pointer: the write itself says so, or replaces it
        self._token = _SWITCHES.set(_SWITCHES.get() + (self,))
        return self

    def __exit__(self, *exc) -> None:
        _SWITCHES.reset(self._token)

    def check(self, now) -> None:
        if self.base is not ANY and now != self.base:
            raise VersionChanged(self.root, self.base, now)


def _switches(root) -> list:
    from . import remote
    if remote.is_url(root):
        url = remote.normalize(root)
        return [s for s in _SWITCHES.get() if s.remote and s.root == url]
    real = os.path.realpath(root)
    return [s for s in _SWITCHES.get() if not s.remote and os.path.realpath(s.root) == real]


def _served(root: pathlib.Path, switches: list):
    """The version root serves, for a compare: a damaged pointer is an error only where a base is expected."""
    try:
        return layout.served(root)
    except ArtifactError:
        if any(s.base is not ANY for s in switches):
            raise
        return None


class Staging:
    """``.dir`` receives the members; publish() makes them the served version, abort() removes them.

    The staging directory is flock'ed by its writer for its whole life, so the next write of the same
    path can tell the leftovers of a killed writer (lock free) from a build in progress (lock held)."""

    def __init__(self, root, overwrite: bool = False):
        self.root = check_output(root, overwrite)
        self.overwrite = overwrite
        self.published, self._active = False, False
        self._created = not os.path.lexists(self.root)
        self.replaced = None  # the version the pointer switch replaced, once published
        switches = _switches(self.root)
        try:
            with layout.write_lock(self.root):
                if switches:  # fail before anything is written where the base is gone already
                    now = _served(self.root, switches)
                    for sw in switches:
                        sw.check(now)
                layout.collect_garbage(self.root)
                self.dir = self.root / layout.new_name(".staging-")
                self.dir.mkdir()
                self._lock = Lock(self.dir).exclusive()
                self._active = True
        except OSError as exc:
            self._forget_root()
            if exc.errno in NO_SPACE:  # the full-disk line every write gives, with the bytes free
                raise WriteError.of(exc, self.root).at(self.root) from None
            raise ArtifactError(f"{self.root}: cannot write an artifact here ({exc.strerror or exc})") from None
        except ArtifactError:
            self._forget_root()
            raise

    def publish(self) -> pathlib.Path:
        """Rename the (fsync'ed) staging directory to a new version, point CURRENT at it, delete unused
        versions. Inside a Switch block: only if the path still serves the block's base (else VersionChanged)."""
        switches = _switches(self.root)
        with layout.write_lock(self.root):
            if not self.overwrite and layout.inspect(self.root)[0] == "artifact":
                raise ArtifactError(f"{self.root}: already exists (pass overwrite=True / --force to replace it)")
            now = _served(self.root, switches)
            for sw in switches:  # compare under the lock every switch of this path takes: none can come between
                sw.check(now)
            version = self.root / layout.new_name("v-")
            os.rename(self.dir, version)
            self.dir = version  # from here on an abort removes the unpublished version instead
            layout.write_pointer(self.root, version.name)
            self.published, self._active, self.replaced = True, False, now
            for sw in switches:
                sw.replaced, sw.published = now, version.name
            self._lock.close()
            layout.collect_garbage(self.root)
        return version

    def abort(self) -> None:
        """Remove the staging directory unless published (idempotent); a path this writer created
        and nothing else filled is removed as well."""
        if not self._active:
            return
        self._active = False
        try:
            if self._served():  # stopped after the pointer switched: the version is whole and served
                self.published = True
                return
            layout.remove_dir(self.dir)
        finally:
            self._lock.close()
        self._forget_root()

    def _served(self) -> bool:
        if not layout.VERSION.fullmatch(self.dir.name):
            return False
        try:
            return layout.current(self.root) == self.dir
        except ArtifactError:
            return False

    def _forget_root(self) -> None:
        if not self._created:
            return
        try:
            if not self.root.is_dir():
                return
            with layout.write_lock(self.root):
                if [e.name for e in os.scandir(self.root)] == [layout.WRITE_LOCK]:
                    os.unlink(self.root / layout.WRITE_LOCK)
                    os.rmdir(self.root)
        except OSError:
            pass  # another writer filled it meanwhile, or it cannot be listed: leave it
