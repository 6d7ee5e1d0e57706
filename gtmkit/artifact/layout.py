"""Versioned artifact layout (docs/format.md, "Directory layout and reloads").

An artifact path is a directory of immutable versions ``v-<ns>-<hex>/`` (each a manifest.json and its
members) and a pointer file ``CURRENT`` naming the one served, replaced atomically. A reader holds a
shared flock on its version's manifest.json from load until close; writers delete a version only
while holding it exclusively. The old flat layout (manifest.json directly in the path) still reads."""

from __future__ import annotations

import json
import os
import pathlib
import re
import secrets
import shutil
import time
from contextlib import contextmanager

from ..errors import ArtifactError
from .locks import Lock
from .writes import writing

MANIFEST = "manifest.json"
POINTER = "CURRENT"
WRITE_LOCK = ".gtmkit-lock"
VERSION = re.compile(r"v-[0-9]{1,20}-[0-9a-f]{8}")
STAGING = re.compile(r"\.staging-[0-9]{1,20}-[0-9a-f]{8}")
POINTER_TMP = re.compile(r"\.CURRENT\.tmp-[0-9a-f]{8}")
WORK_DIRS = ("shards", "subtrees")  # a sharded build's and a shard rebuild's working folders in their staging
MEMBER = re.compile(r"[A-Za-z0-9_]+\.(npy|parquet)")
OPEN_TRIES = 1000


def fsync_dir(path) -> None:
    try:  # directories cannot be opened for fsync on Windows; the rename is still atomic there
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_name(prefix: str) -> str:
    """A fresh version or staging name; the time part sorts names by creation."""
    return f"{prefix}{time.time_ns()}-{secrets.token_hex(4)}"


def flat_members(root: pathlib.Path) -> set:
    """Names a flat-layout artifact at root owns (its manifest and the members it lists); empty if the
    manifest.json there is missing or not one gtmkit wrote."""
    try:
        m = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(m, dict) or "gtmkit_version" not in m or not isinstance(m.get("files"), dict):
        return set()
    files = (e.get("file") if isinstance(e, dict) else None for e in m["files"].values())
    return {MANIFEST} | {f for f in files if isinstance(f, str) and MEMBER.fullmatch(f)}


def inspect(root: pathlib.Path) -> tuple:
    """("artifact" | "empty", foreign entry names) of an existing directory. "empty" also covers a
    directory holding only leftovers of a write that never finished."""
    flat, artifact, foreign = flat_members(root), False, []
    try:
        entries = list(os.scandir(root))
    except OSError as exc:
        raise ArtifactError(f"{root}: cannot list directory ({exc.strerror or exc})") from None
    for e in entries:
        n, is_file, is_dir = e.name, e.is_file(follow_symlinks=False), e.is_dir(follow_symlinks=False)
        if (n == POINTER or n in flat) and is_file:
            artifact = True
        elif not ((n == WRITE_LOCK or POINTER_TMP.fullmatch(n)) and is_file
                  or (VERSION.fullmatch(n) or STAGING.fullmatch(n)) and is_dir):
            foreign.append(n)
    return ("artifact" if artifact else "empty"), foreign


def current(root: pathlib.Path) -> pathlib.Path:
    """Directory of the version root serves: root/<name in CURRENT>, or root itself without a pointer."""
    ptr = root / POINTER
    try:
        fd = os.open(ptr, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except (FileNotFoundError, NotADirectoryError):
        return root
    except OSError as exc:
        raise ArtifactError(f"{ptr}: cannot read the version pointer ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "rb") as f:
            name = f.read(64).decode("ascii", "replace").strip()
    except OSError as exc:
        raise ArtifactError(f"{ptr}: cannot read the version pointer ({exc.strerror or exc})") from None
    vdir = root / name
    if not VERSION.fullmatch(name) or vdir.is_symlink():
        raise ArtifactError(f"{ptr}: does not name a version directory of this artifact")
    return vdir


def served(root) -> str | None:
    """The name of the version root serves; None where no pointer names one (no artifact yet, or the flat
    layout): what a compare-and-switch compares."""
    root = pathlib.Path(root)
    d = current(root)
    return None if d == root else d.name


def acquire(root) -> tuple:
    """(version directory, Lock or None): the version root serves, locked shared so no writer deletes
    it. The pointer is re-read when the version vanished between reading it and locking it. Lock is
    None where there is nothing to lock (no artifact there): the caller's checks report why."""
    root, missing = pathlib.Path(root), None
    for _ in range(OPEN_TRIES):
        vdir = current(root)
        try:
            lock = Lock(vdir / MANIFEST)
        except (FileNotFoundError, NotADirectoryError):
            if vdir == root and not os.path.lexists(root / POINTER):
                return root, None
            if vdir == missing:  # the pointer still names it: it is gone for good, not replaced
                raise ArtifactError(f"{vdir}: version named by {POINTER} is missing") from None
            missing = vdir
            continue  # deleted since the pointer was read: a newer version is in place
        except OSError:
            return vdir, None
        lock.shared()
        if not lock.unlinked():
            return vdir, lock
        lock.close()  # deleted while we waited for the lock
    raise ArtifactError(f"{root}: replaced {OPEN_TRIES} times while opening it; try again")


@contextmanager
def write_lock(root: pathlib.Path):
    """Serialise writers of one artifact path (pointer switches and cleanups, not whole builds)."""
    while True:
        root.mkdir(parents=True, exist_ok=True)
        lock = Lock(root / WRITE_LOCK, write=True).exclusive()
        if not lock.unlinked():
            break
        lock.close()  # removed by a writer that gave up a fresh path; take the new one
    try:
        yield lock
    finally:
        lock.close()


def write_pointer(root: pathlib.Path, name: str) -> None:
    tmp = root / f".{POINTER}.tmp-{secrets.token_hex(4)}"
    try:
        with writing(tmp, len(name) + 1), open(tmp, "w", encoding="ascii") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, root / POINTER)
    except BaseException:
        try:  # a full disk leaves no half-written pointer behind
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(root)


def _unlink_members(d: pathlib.Path, names=None) -> None:
    """Delete the manifest first (so no reader can lock the version any more), then member files."""
    try:
        os.unlink(d / MANIFEST)
    except FileNotFoundError:
        pass
    except OSError:
        return  # Windows: a reader has it open
    try:
        entries = list(os.scandir(d))
    except OSError:
        return
    for e in entries:
        if MEMBER.fullmatch(e.name) and e.is_file(follow_symlinks=False) and (names is None or e.name in names):
            try:
                os.unlink(e.path)
            except OSError:
                pass


def remove_dir(d: pathlib.Path) -> None:
    """Delete a version or staging directory of gtmkit's: its member files, the working folders a sharded build or
    a rebuild keeps in its staging directory, then the directory."""
    _unlink_members(d)
    for name in WORK_DIRS:
        w = d / name
        if w.is_dir() and not w.is_symlink():
            shutil.rmtree(w, ignore_errors=True)
    try:
        os.rmdir(d)
    except OSError:
        pass  # something not gtmkit's is inside: leave it


def _remove_version(vdir: pathlib.Path) -> None:
    try:
        lock = Lock(vdir / MANIFEST)
    except FileNotFoundError:
        lock = None  # a cleanup died midway: without a manifest no reader can hold it
    except OSError:
        return
    if lock is not None and not lock.try_exclusive():
        lock.close()  # a loaded index still reads it; a later write tries again
        return
    try:
        remove_dir(vdir)
    finally:
        if lock is not None:
            lock.close()


def _remove_staging(sdir: pathlib.Path) -> None:
    try:
        lock = Lock(sdir)
    except OSError:
        return
    try:
        if lock.try_exclusive():  # its writer is gone (a killed process's locks are dropped)
            remove_dir(sdir)
    finally:
        lock.close()


def _remove_flat(root: pathlib.Path) -> None:
    names = flat_members(root)
    if not names:
        return
    try:
        lock = Lock(root / MANIFEST)
    except OSError:
        return
    try:
        if lock.try_exclusive():
            _unlink_members(root, names)
    finally:
        lock.close()


def collect_garbage(root: pathlib.Path) -> None:
    """Remove what nobody uses: versions the pointer does not name that no reader holds, staging
    directories whose writer is gone, pointer temp files, and flat-layout files once a pointer exists.
    Call with write_lock(root) held."""
    try:
        served = current(root)
    except ArtifactError:
        served = None  # a damaged pointer: keep every version
    pointed = served is not None and served != root
    for e in list(os.scandir(root)):
        path = pathlib.Path(e.path)
        if STAGING.fullmatch(e.name) and e.is_dir(follow_symlinks=False):
            _remove_staging(path)
        elif pointed and VERSION.fullmatch(e.name) and e.is_dir(follow_symlinks=False) and path != served:
            _remove_version(path)
        elif POINTER_TMP.fullmatch(e.name) and e.is_file(follow_symlinks=False):
            try:
                os.unlink(path)
            except OSError:
                pass
    if pointed:
        _remove_flat(root)
