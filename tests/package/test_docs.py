"""The documentation is complete and runs as written: every `gtmkit` command and every name of gtmkit.__all__
appears in README.md or docs/*.md, and every ```python block there runs in a fresh temporary directory
(a block preceded by `<!-- no-run -->` is only compiled: it needs a GPU or a long run)."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest

import gtmkit
from gtmkit.cli import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NO_RUN = "<!-- no-run -->"
TIMEOUT = 240  # seconds a block may take: generous, since a cold numba cache compiles the kernels first
FENCE = re.compile(r"^(\s*)```([\w+-]*)\s*$")


def docs_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in DOCS)


def commands(group: click.Group, prefix: str = "gtmkit"):
    """`gtmkit <cmd>` for every command and subcommand of the click group."""
    for name, cmd in sorted(group.commands.items()):
        yield f"{prefix} {name}"
        if isinstance(cmd, click.Group):
            yield from commands(cmd, f"{prefix} {name}")


def python_blocks(path: Path) -> list:
    """(line, source, runs) of every ```python block of a Markdown file; runs is False when the block is
    preceded by a <!-- no-run --> comment."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(2)
        i += 1
        body = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if lang == "python":
            before = next((x.strip() for x in reversed(lines[:start]) if x.strip()), "")
            out.append((start + 1, textwrap.dedent("\n".join(body)) + "\n", before != NO_RUN))
    return out


BLOCKS = [(p, line, src, runs) for p in DOCS for line, src, runs in python_blocks(p)]


def test_every_command_is_documented():
    text = docs_text()
    missing = [c for c in ["gtmkit --help", *commands(cli)] if not re.search(re.escape(c) + r"(?![\w-])", text)]
    assert not missing, f"commands not in README.md or docs/*.md: {missing}"


def test_every_public_name_is_documented():
    text = docs_text()
    missing = [n for n in gtmkit.__all__ if not re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text)]
    assert not missing, f"gtmkit.__all__ names not in README.md or docs/*.md: {missing}"


def test_blocks_are_found():
    assert sum(p.name == "README.md" for p, *_ in BLOCKS) >= 2

def test_readme_starts_with_the_two_commands():
    """README.md's first code block: install and run the demo, then install and run the tests."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.search(r"```(\w*)\n(.*?)```", text, re.S)
    assert first and first.group(1) in ("bash", "sh", "console")
    lines = [x for x in first.group(2).splitlines() if x.strip()]
    assert len(lines) == 2
    assert lines[0].startswith("pip install .") and lines[0].endswith("gtmkit demo")
    assert lines[1].startswith('pip install -e ".[test') and "pytest" in lines[1]


@pytest.mark.parametrize("path, line, source, runs", BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}:{line}" for p, line, _, _ in BLOCKS])
def test_python_block_runs(path, line, source, runs, tmp_path):
    compile(source, f"{path.name}:{line}", "exec")
    if not runs:
        return
    for module, extra in (("torch", "hf"), ("transformers", "hf"), ("matplotlib", "plot"), ("distributed", "dist")):
        if re.search(rf"^\s*(import [\w., ]*\b{module}\b|from {module}\b)", source, re.M):
            pytest.importorskip(module, reason=f"needs the {extra} extra: pip install 'gtmkit[{extra}]'")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x))
    try:
        r = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{path.name}:{line}: the block ran past {TIMEOUT} s")
    assert r.returncode == 0, f"{path.name}:{line} failed:\n{r.stderr[-3000:]}"


def test_linked_files_exist():
    """Every repository path a document links to or names in backquotes (results files, scripts) exists."""
    text = docs_text()
    paths = set(re.findall(r"\]\(((?:benchmarks|docs|examples|gtmkit|tests)/[^)#\s]+)\)", text))
    paths |= set(re.findall(r"`((?:benchmarks|docs|examples)/[\w/.-]+\.(?:md|py|json|sh))`", text))
    missing = sorted(p for p in paths if "<" not in p and not (ROOT / p).exists())
    assert not missing, f"paths named in README.md or docs/*.md that do not exist: {missing}"


def test_no_tracked_file_speaks_of_development_runs():
    """The repository speaks of the product: no tracked file (logs and results included) names a development
    run by the word spelled below."""
    word = "sess" + "ion"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    bad = [f for f in files.stdout.split() if (ROOT / f).is_file()
           and word in (ROOT / f).read_bytes().decode("utf-8", "replace").lower()]
    assert bad == []
