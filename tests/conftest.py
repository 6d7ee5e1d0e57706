import sys
from pathlib import Path

# Test helpers (catalogs.py) live beside the tests.
sys.path.insert(0, str(Path(__file__).parent))
