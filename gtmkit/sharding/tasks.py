"""A task's output folder: written under a fresh name, then renamed into place, so a task that runs again
after its worker died starts clean and replaces what the first run left."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from ..artifact.writes import make_dir, writing


def task_dir(final: Path) -> Path:
    """A fresh directory for a task's files, made final by publish(): a task that runs again after its
    worker died (perhaps midway through writing) starts clean and replaces what the first run left."""
    tmp = final.with_name(f"{final.name}.{uuid.uuid4().hex[:12]}")
    make_dir(tmp)
    return tmp


def publish(tmp: Path, final: Path) -> None:
    with writing(final):
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
