import hashlib
import os
import sys
import tempfile
from pathlib import Path

# Test helpers live in tests/support (imported as support.<module>).
sys.path.insert(0, str(Path(__file__).parent))

# numba's on-disk cache is keyed per source file, so a cached function that calls into a changed module
# (cpu.step.step_kernel into cpu/select.py) keeps running the old code. Tests therefore use a cache
# directory keyed by the hash of every gtmkit source: reused while nothing changes, fresh when anything
# does. Set before numba is imported (it reads NUMBA_CACHE_DIR once).
if "NUMBA_CACHE_DIR" not in os.environ:
    _src = Path(__file__).resolve().parent.parent / "gtmkit"
    _h = hashlib.sha1()
    for _f in sorted(_src.rglob("*.py")):
        _h.update(_f.read_bytes())
    os.environ["NUMBA_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / f"gtmkit-numba-{_h.hexdigest()[:16]}")


def pytest_collection_modifyitems(config, items):
    """Tests in files named *_emu.py run CUDA kernels through the CPU emulation: marked `emu`, so that the
    fast loop (`pytest -m "not emu and not slow"`) leaves them out."""
    import pytest

    for item in items:
        if item.path.name.endswith("_emu.py"):
            item.add_marker(pytest.mark.emu)
