"""Advisory file locks (flock) that keep a version of an artifact alive while a reader uses it.

flock locks belong to one open file description, so two opens in one process conflict like two
processes do, and the kernel drops them when the holder dies. Where fcntl is missing (Windows) locks
are no-ops: open files cannot be deleted there, so a version in use survives a cleanup anyway."""

from __future__ import annotations

import os

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


class Lock:
    """An open file or directory descriptor holding (or about to hold) a flock; close() releases it."""

    def __init__(self, path, write: bool = False):
        self.fd = -1
        if fcntl is None and os.path.isdir(path):
            return  # directories cannot be opened on Windows, and there is nothing to lock with
        flags = (os.O_RDWR | os.O_CREAT) if write else os.O_RDONLY
        self.fd = os.open(path, flags, 0o644)

    def shared(self) -> "Lock":
        if fcntl is not None:
            fcntl.flock(self.fd, fcntl.LOCK_SH)
        return self

    def exclusive(self) -> "Lock":
        if fcntl is not None:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def try_exclusive(self) -> bool:
        """Take the lock exclusively without waiting; False if anyone else holds it."""
        if fcntl is None:
            return True
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def unlinked(self) -> bool:
        """True once the locked file or directory has been removed from its folder."""
        return self.fd >= 0 and os.fstat(self.fd).st_nlink == 0

    def close(self, _close=os.close) -> None:  # bound here: at interpreter exit the module's os may be gone
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            _close(fd)

    def __del__(self) -> None:  # an index dropped without close() lets its version go
        self.close()

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
