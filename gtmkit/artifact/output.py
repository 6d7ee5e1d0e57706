"""Checks an artifact's output path passes before anything is built or written (one line each).

A path may receive an artifact when it does not exist yet (its nearest existing ancestor is a
writable directory on a real filesystem), is an empty directory, or already holds a gtmkit artifact
(replaced only with overwrite). Anything else there - a file, a symlink, a folder with other files -
is refused, so gtmkit never deletes what it did not write."""

from __future__ import annotations

import os
import pathlib

from ..inputs.stores import is_url
from ..errors import ArtifactError
from . import layout

# Kernel and virtual filesystems: writes there are not files (or fail in surprising ways).
PSEUDO_FILESYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
    "configfs", "pstore", "bpf", "efivarfs", "mqueue", "binfmt_misc", "fusectl", "autofs", "hugetlbfs",
    "rpc_pipefs", "nsfs", "selinuxfs"})


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in mount points as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def filesystem_type(path) -> str | None:
    """Type of the filesystem holding an existing path (longest mount point prefix), None if unknown."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:  # not Linux: no cheap way to tell, the writability check still applies
        return None
    best, kind = "", None
    for line in lines:
        fields = line.split(" ")
        if " - " not in line or len(fields) < 5:
            continue
        mount = _unescape(fields[4])
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, line.split(" - ", 1)[1].split(" ")[0]
    return kind


def _nearest_existing(path: pathlib.Path) -> pathlib.Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def check_output(out, overwrite: bool = False) -> pathlib.Path:
    """Raise ArtifactError (one line) unless an artifact may be written at ``out``; returns it absolute.
    Side-effect free: nothing is created or removed. An object-store URL is checked in the store (remote.py) and
    returned as a str."""
    from . import remote
    if remote.is_url(out):
        return remote.check_remote_output(out, overwrite)
    out = pathlib.Path(os.path.abspath(out))
    try:
        return _check(out, overwrite)
    except OSError as exc:  # e.g. a folder on the way that may not be searched
        raise ArtifactError(f"{out}: cannot check the output path ({exc.strerror or exc})") from None


def _check(out: pathlib.Path, overwrite: bool) -> pathlib.Path:
    if out.is_symlink():
        raise ArtifactError(f"{out}: is a symbolic link; give the directory it points to, not the link")
    anc = _nearest_existing(out)
    if anc == out and not out.is_dir():
        raise ArtifactError(f"{out}: is a file, not a gtmkit artifact directory; refusing to replace it")
    if not anc.is_dir():
        raise ArtifactError(f"{out}: lies under {anc}, which is a file, not a directory")
    kind = filesystem_type(anc)
    if kind in PSEUDO_FILESYSTEMS:
        raise ArtifactError(f"{out}: on a {kind} pseudo filesystem ({anc}); choose a directory on a disk")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise ArtifactError(f"{anc}: not writable, cannot write an artifact at {out}")
    if anc != out:
        return out
    state, foreign = layout.inspect(out)
    if foreign:
        shown = ", ".join(sorted(foreign)[:3]) + (", ..." if len(foreign) > 3 else "")
        raise ArtifactError(f"{out}: holds {len(foreign)} entries that are not a gtmkit artifact's ({shown}); "
                            "refusing to write there")
    if state == "artifact" and not overwrite:
        raise ArtifactError(f"{out}: already exists (pass overwrite=True / --force to replace it)")
    return out
