"""The package's import contracts (setup.cfg, [importlinter]): layers, the two wings apart."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter.cli")

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept():
    # a child process: import-linter reconfigures the logging module, which would silence gtmkit's logger for
    # the tests that run after it in this one
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(ROOT / 'setup.cfg')!r}, no_cache=True))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 kept, 0 broken" in r.stdout, r.stdout
