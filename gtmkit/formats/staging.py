"""The writer's side of the versioned layout: a private staging directory inside the artifact path,
published by renaming it to a fresh version and switching the pointer (docs/format.md)."""

from __future__ import annotations

import os
import pathlib

from ..errors import ArtifactError
from . import layout
from .locks import Lock
from .output import check_output


class Staging:
    """``.dir`` receives the members; publish() makes them the served version, abort() removes them.

    The staging directory is flock'ed by its writer for its whole life, so the next write of the same
    path can tell the leftovers of a killed writer (lock free) from a build in progress (lock held)."""

    def __init__(self, root, overwrite: bool = False):
        self.root = check_output(root, overwrite)
        self.overwrite = overwrite
        self.published, self._active = False, False
        self._created = not os.path.lexists(self.root)
        try:
            with layout.write_lock(self.root):
                layout.collect_garbage(self.root)
                self.dir = self.root / layout.new_name(".staging-")
                self.dir.mkdir()
                self._lock = Lock(self.dir).exclusive()
                self._active = True
        except OSError as exc:
            self._forget_root()
            raise ArtifactError(f"{self.root}: cannot write an artifact here ({exc.strerror or exc})") from None

    def publish(self) -> pathlib.Path:
        """Rename the (fsync'ed) staging directory to a new version, point CURRENT at it, delete unused
        versions."""
        with layout.write_lock(self.root):
            if not self.overwrite and layout.inspect(self.root)[0] == "artifact":
                raise ArtifactError(f"{self.root}: already exists (pass overwrite=True / --force to replace it)")
            version = self.root / layout.new_name("v-")
            os.rename(self.dir, version)
            self.dir = version  # from here on an abort removes the unpublished version instead
            layout.write_pointer(self.root, version.name)
            self.published, self._active = True, False
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
