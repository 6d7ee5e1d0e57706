"""Every repository file a docstring or comment names exists: a moved or deleted file leaves no reference behind.

A name is looked up the way a reader would: `gtmkit/matcher/cuda/backend.py` from the repository root,
`cuda/backend.py` as the end of some file's path, a bare `gtm_fused.cu` as some file's name. Names in quotes
(`#include "x.cuh"`) and globs (`*_emu.py`) are examples, not references."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(r"(?<![\w./<>*\"-])((?:[\w-]+/)*[\w-]+\.(?:py|cu|cuh|md|sh))(?![\w/])")
SCANNED = [p for d in ("gtmkit", "tests", "benchmarks", "examples") for p in sorted((ROOT / d).rglob("*"))
           if p.suffix in (".py", ".cu", ".cuh") and "__pycache__" not in p.parts]


def python_notes(text: str) -> list:
    """(line, text) of the comments and docstrings of a Python source."""
    notes = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                notes.append((body[0].lineno, body[0].value.value))
    return notes


def cuda_notes(text: str) -> list:
    notes = [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in re.finditer(r"//[^\n]*", text)]
    notes += [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in re.finditer(r"/\*.*?\*/", text, re.S)]
    return notes


FILES = {p.relative_to(ROOT).as_posix() for d in ("gtmkit", "tests", "benchmarks", "examples", "docs", ".ci")
         for p in (ROOT / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
FILES |= {p.name for p in ROOT.iterdir() if p.is_file()}
NAMES = {f.rsplit("/", 1)[-1] for f in FILES}
EXTERNAL = {"genre/trie.py"}  # files of other projects a comment cites


def resolves(name: str) -> bool:
    if name in EXTERNAL:
        return True
    if "/" not in name:
        return name in NAMES
    return name in FILES or any(f.endswith("/" + name) for f in FILES)


def dangling(path: Path) -> list:
    text = path.read_text(encoding="utf-8")
    notes = python_notes(text) if path.suffix == ".py" else cuda_notes(text)
    return [f"{path.relative_to(ROOT)}:{line}: {name}" for line, note in notes for name in PATH.findall(note)
            if not resolves(name)]


def test_scans_the_repository():
    assert len(SCANNED) > 100
    # the check itself: a made-up name does not resolve, a real one does
    assert not resolves("matcher/no_such_module.py") and not resolves("matcher/pdl.py")
    assert resolves("cuda/backend.py") and resolves("gtm_fused.cu") and resolves("gtmkit/matcher/cuda/pdl.py")


@pytest.mark.parametrize("folder", ["gtmkit", "tests", "benchmarks", "examples"])
def test_named_files_exist(folder):
    missing = [m for p in SCANNED if p.relative_to(ROOT).parts[0] == folder for m in dangling(p)]
    assert not missing, "\n".join(missing)
