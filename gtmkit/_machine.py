"""What this machine has: its physical memory."""

from __future__ import annotations

import os


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine, or None where the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None
