"""Where numba caches gtmkit's compiled kernels: a per-user folder, never inside the installed package
(files written there outlive `pip uninstall` and shadow a later install). Imported before anything
imports numba's compiler: a kernel's cache folder is fixed when its module is imported."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ._version import __version__


def cache_dir() -> Path:
    """NUMBA_CACHE_DIR when set, else $XDG_CACHE_HOME (or ~/.cache)/gtmkit/numba-<version>-py<major><minor>."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gtmkit" / f"numba-{__version__}-py{sys.version_info[0]}{sys.version_info[1]}"


def compiled_marker(command: str) -> Path:
    """The file whose presence says a command has run (and so compiled its kernels) with this cache."""
    return cache_dir() / f"compiled-{command}"


def use_user_cache() -> None:
    if not os.environ.get("NUMBA_CACHE_DIR"):
        os.environ["NUMBA_CACHE_DIR"] = str(cache_dir())
    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba imported before gtmkit: make it read the folder now
        config.reload_config()


use_user_cache()
