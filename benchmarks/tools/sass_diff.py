"""Machine code of the shipped CUDA kernels at two revisions, compared kernel by kernel (no GPU needed).

Each kernel source is compiled as the library compiles it on the device (the -D defines of its production
configurations below, --std=c++14, the kernels folder on the include path) with
`nvcc -cubin -arch=ARCH`, dumped with `cuobjdump -sass`, and compared per function after dropping the
addresses and the encodings' comments. For each function the report says `identical` (same instructions,
same encodings), `same instructions` (only the scheduling/control bits differ), `differs` (with the counts
of instructions removed and added, and the register / stack / spill figures of both), or that the function
exists at one revision only. --out DIR keeps the unified diffs. Needs nvcc, and cuobjdump with nvdisasm on
PATH (CUDA's binary utilities; from PyPI: nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, whose executables
sit in site-packages/nvidia/cu13/bin).

    python benchmarks/tools/sass_diff.py HEAD~1            # HEAD~1 against the working tree
    python benchmarks/tools/sass_diff.py v1 v2 --out /tmp/sass
    python benchmarks/tools/sass_diff.py HEAD --arch sm_80  # the pre-Hopper builds (CL=1 trie search)
    python benchmarks/tools/sass_diff.py HEAD --after-define PROFILE=1  # a switch's code, on one side only
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = "gtmkit/matcher/cuda/kernels"  # the shared headers (cluster.cuh is included by the trie search too)
# (name, source, defines, archs): what the backends compile (cuda/backend.py, trie/search_cuda.py,
# cuda/graph.py, synth/logits_cuda.py); the trie search runs CL=1 before sm_90
BUILDS = [
    ("gtm_step", "gtmkit/matcher/cuda/kernels/gtm_step.cu", (), ("sm_80", "sm_90")),
    ("gtm_fused", "gtmkit/matcher/cuda/kernels/gtm_fused.cu", (), ("sm_90",)),
    ("postfilter", "gtmkit/matcher/cuda/kernels/postfilter.cu", (), ("sm_80", "sm_90")),
    ("beam", "gtmkit/matcher/cuda/kernels/beam.cu", (), ("sm_80", "sm_90")),
    ("trie_search", "gtmkit/trie/kernels/trie_search.cu", (), ("sm_90",)),
    ("trie_search CL=1", "gtmkit/trie/kernels/trie_search.cu", ("CL=1",), ("sm_80", "sm_90")),
    ("decoder", "gtmkit/synth/kernels/decoder.cu", (), ("sm_80", "sm_90")),
]
_ADDR = re.compile(r"/\*[0-9a-f]{4,}\*/")
_ENC = re.compile(r"/\*\s*(0x[0-9a-f]{16})\s*\*/")


def checkout(rev: str, into: Path) -> Path:
    """The gtmkit/ folder of revision `rev` (None: the working tree) under `into`."""
    if rev is None:
        return ROOT
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "gtmkit"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def compile_sass(tree: Path, src: str, defines: tuple, arch: str, work: Path) -> tuple:
    """-> ({function: [(instruction, encodings)]}, {function: resource line}) or (None, reason)."""
    path = tree / src
    if not path.is_file():
        return None, "absent"
    cubin = work / "k.cubin"
    r = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "--std=c++14", f"-I{tree / INCLUDE}",
                        *(f"-D{d}" for d in defines), str(path), "-o", str(cubin)], capture_output=True, text=True)
    if r.returncode != 0:
        return None, "does not compile: " + r.stderr.strip().splitlines()[-1][:200]
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    res = subprocess.run(["cuobjdump", "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    return split_functions(sass), resources(res)


def split_functions(sass: str) -> dict:
    funcs, name, body = {}, None, None
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name, body = m.group(1), []
            funcs[name] = body
            continue
        if body is None:
            continue
        enc = _ENC.findall(line)
        text = _ENC.sub("", _ADDR.sub("", line)).strip()
        if text and not text.startswith(("..", ".section", ".headerflags")):
            body.append([text, enc])
        elif enc and body:  # the second half of the previous instruction's encoding
            body[-1][1] = body[-1][1] + enc
    return funcs


def resources(text: str) -> dict:
    out, name = {}, None
    for line in text.splitlines():
        m = re.search(r"Function (\S+):", line)
        if m:
            name = m.group(1)
        elif name and "REG:" in line:
            out[name] = " ".join(line.split())
    return out


def compare(a: list, b: list) -> tuple:
    ta, tb = [x[0] for x in a], [x[0] for x in b]
    if ta == tb:
        return ("identical" if a == b else "same instructions, other control bits"), []
    diff = list(difflib.unified_diff(ta, tb, "before", "after", lineterm="", n=2))
    removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    return f"differs: {len(ta)} -> {len(tb)} instructions (-{removed} +{added})", diff


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", help="git revision")
    ap.add_argument("after", nargs="?", default=None, help="git revision (default: the working tree)")
    ap.add_argument("--arch", action="append", help="only these architectures (default: each build's own)")
    ap.add_argument("--before-define", action="append", default=[], metavar="NAME=V",
                    help="a -D define added to every build of the first revision")
    ap.add_argument("--after-define", action="append", default=[], metavar="NAME=V",
                    help="a -D define added to every build of the second")
    ap.add_argument("--out", type=Path, help="folder for the unified diffs of the functions that differ")
    a = ap.parse_args(argv)
    missing = [t for t in ("nvcc", "cuobjdump", "nvdisasm") if shutil.which(t) is None]
    if missing:
        print(f"sass_diff: {', '.join(missing)} not on PATH", file=sys.stderr)
        return 2
    changed = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trees = [checkout(a.before, tmp / "before"), checkout(a.after, tmp / "after") if a.after else ROOT]
        for name, src, defines, archs in BUILDS:
            for arch in a.arch or archs:
                sides = [compile_sass(t, src, defines + tuple(extra), arch, tmp)
                         for t, extra in zip(trees, (a.before_define, a.after_define))]
                print(f"== {name} ({src}{''.join(' -D' + d for d in defines)}, {arch})")
                if any(s[0] is None for s in sides):
                    print("   before: " + (sides[0][1] if sides[0][0] is None else "compiles") +
                          "; after: " + (sides[1][1] if sides[1][0] is None else "compiles"))
                    changed += sides[0][0] is not None or sides[1][0] is not None
                    continue
                (fa, ra), (fb, rb) = sides
                for fn in sorted(set(fa) | set(fb)):
                    if fn not in fb or fn not in fa:
                        print(f"   {fn}: {'before' if fn in fa else 'after'} only")
                        changed += 1
                        continue
                    verdict, diff = compare(fa[fn], fb[fn])
                    print(f"   {fn}: {verdict}")
                    if not verdict.startswith("identical"):
                        changed += 1
                    if ra.get(fn) != rb.get(fn):
                        print(f"      before {ra.get(fn)}\n      after  {rb.get(fn)}")
                    if a.out and diff:
                        a.out.mkdir(parents=True, exist_ok=True)
                        stem = f"{name.replace(' ', '_').replace('=', '')}.{arch}.{fn}"
                        (a.out / f"{stem}.diff").write_text("\n".join(diff) + "\n")
    print(f"{changed} function(s) not identical")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
