"""A/B of the CPU step between two revisions: `Matcher.step` of revision A against revision B (default: the
working tree) on the inputs benchmarks/step_cpu.py records (its 10M-SID index in --workdir, built when
missing), each side in its own process with an empty numba cache, the sides alternating for --runs runs.
Separate processes keep the two package copies from sharing caches and threads; alternating spreads a
shared machine's changing load over both sides, so compare the medians, not one run.

    python benchmarks/tools/ab_cpu.py --a HEAD --runs 4            # A = HEAD, B = the working tree
    python benchmarks/tools/ab_cpu.py --a main --b my-branch

Each run times every depth in interleaved rounds (median of --reps) and checks that B's outputs equal A's
(exit status 1 if not). Prints one line a run and side, then the medians over runs. A revision's own
benchmarks/step_cpu.py records the inputs and builds the index when it has one."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def child(a) -> None:
    """One side: time Matcher.step per depth on the recorded inputs; outputs to a.save (npz)."""
    sys.path.insert(0, a.root)
    own = Path(a.root) / "benchmarks"
    sys.path.insert(1, str(own if (own / "step_cpu.py").is_file() else ROOT / "benchmarks"))
    import gtmkit
    from gtmkit.synth import synth_users
    from step_cpu import ensure_index, record_inputs
    work = Path(a.workdir)
    idx = ensure_index(work, a.ads)
    users = synth_users(idx.manifest["schema"], 16, seed=11)
    m = gtmkit.Matcher(idx, "cpu")
    q = m.batch([idx.encode_request(u) for u in users])
    rec = work / f"ab_inputs_{a.ads}.npz"
    if not rec.exists():  # recorded once (by whichever side runs first), then shared
        steps, _ = record_inputs(m, q, users, (1, 512, 1024, 1024), 7)
        np.savez(rec, **{f"{k}{i}": v for i, s in enumerate(steps) for k, v in s.items()})
    z = np.load(rec)
    n = len([f for f in z.files if f.startswith("k")])
    args = [(z[f"node_ids{i}"], z[f"logprobs{i}"], z[f"beam_scores{i}"], z[f"row_request{i}"], q, int(z[f"k{i}"]))
            for i in range(n)]
    for v in m.arrays:  # page the memory-mapped index in, so that neither side pays for the other's page faults
        if isinstance(v, np.ndarray) and v.size:
            np.asarray(v).reshape(-1)[::512].sum()
    outs = {}
    for i, x in enumerate(args):  # warm-up (compiles) and the outputs
        r = m.step(*x)
        for f in ("parent_rows", "tokens", "nodes", "scores"):
            outs[f"{f}{i}"] = np.asarray(getattr(r, f))
    np.savez(a.save, **outs)
    ts = [[] for _ in args]
    for _ in range(a.reps):  # rounds over the depths: each step's caches see the others, as in step_cpu.py
        for i, x in enumerate(args):
            t0 = time.perf_counter()
            m.step(*x)
            ts[i].append(time.perf_counter() - t0)
    print(json.dumps([1e3 * float(np.median(t)) for t in ts]))


def checkout(rev: str, tree: Path) -> str:
    """A detached worktree of rev under tree (removed by main's finally)."""
    path = tree / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(path), rev], check=True)
    return str(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="HEAD", help="revision A")
    ap.add_argument("--b", default="", help="revision B (default: the working tree)")
    ap.add_argument("--runs", type=int, default=4, help="even: each side goes first as often")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--workdir", default="/tmp/gtmkit-stepcpu", help="step_cpu.py's catalog + index cache")
    ap.add_argument("--ads", type=int, default=15_000_000)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--save", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return 0
    tree = Path(tempfile.mkdtemp(prefix="step-ab-"))
    made = []
    try:
        sides = {}
        for side, rev in (("A", a.a), ("B", a.b)):
            sides[side] = checkout(rev, tree / side) if rev else str(ROOT)
            if rev:
                made.append(sides[side])
        names = {"A": a.a or "tree", "B": a.b or "tree"}
        res = {"A": [], "B": []}
        for r in range(a.runs):
            for s in ("AB" if r % 2 == 0 else "BA"):
                env = dict(os.environ, NUMBA_CACHE_DIR=tempfile.mkdtemp(prefix="step-ab-numba-"))
                out = subprocess.run([sys.executable, __file__, "--child", "--root", sides[s], "--save",
                                      str(tree / f"{s}.npz"), "--reps", str(a.reps), "--workdir", a.workdir,
                                      "--ads", str(a.ads)], env=env, capture_output=True, text=True)
                if out.returncode:
                    print(out.stderr[-3000:])
                    return 2
                ms = json.loads(out.stdout.strip().splitlines()[-1])
                res[s].append(ms)
                print(f"run {r} {s}: " + "  ".join(f"depth {d + 1} {v:.3f} ms" for d, v in enumerate(ms)), flush=True)
        za, zb = np.load(tree / "A.npz"), np.load(tree / "B.npz")
        same = all(np.array_equal(za[f], zb[f]) for f in za.files)
        ma, mb = np.median(res["A"], axis=0), np.median(res["B"], axis=0)
        for d, (x, y) in enumerate(zip(ma, mb)):
            print(f"depth {d + 1}: A ({names['A']}) {x:.3f} ms  B ({names['B']}) {y:.3f} ms  A/B {x / y:.3f}")
        print("B's outputs equal A's:", "yes" if same else "NO")
        return 0 if same else 1
    finally:
        for path in made:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", path])


if __name__ == "__main__":
    sys.exit(main())
