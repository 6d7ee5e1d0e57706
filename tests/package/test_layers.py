"""The package's layers (setup.cfg, [importlinter]): no module imports from a layer above its own."""

import contextlib
import io
from pathlib import Path

import pytest

importlinter_cli = pytest.importorskip("importlinter.cli")

ROOT = Path(__file__).resolve().parents[2]


def test_layers_contract_is_kept(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = importlinter_cli.lint_imports(config_filename=str(ROOT / "setup.cfg"), no_cache=True)
    assert code == 0, out.getvalue()
