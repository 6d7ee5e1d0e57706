import hashlib
import os
import sys
import tempfile
from pathlib import Path

# Test helpers (catalogs.py) live beside the tests.
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
