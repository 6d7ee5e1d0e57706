"""Progress reporting contract: long work calls ``progress(done, total, phase)``; the library never prints."""

from __future__ import annotations

from typing import Callable, Optional

Progress = Optional[Callable[[int, int, str], None]]


def report(progress: Progress, done: int, total: int, phase: str) -> None:
    if progress is not None:
        progress(done, total, phase)
