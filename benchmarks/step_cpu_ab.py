"""A/B of the CPU step: `Matcher.step` of git revision REV against the working tree, on the inputs
benchmarks/step_cpu.py records (its 10M-SID index in --workdir), each side in its own process with an empty
numba cache, the sides alternating for --runs runs. Same-process A/B of two package copies ran both sides
~2x slower on this VM, and one side a run measures the VM's drift as much as the change (step_cpu.md).

    python benchmarks/step_cpu_ab.py --rev HEAD --runs 4      # B = the working tree

Each run times every depth in interleaved rounds (median of --reps) and checks that B's outputs equal A's
(exit status 1 if not). Prints one line a run and side, then the medians over runs."""
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


def child(a) -> None:
    """One side: time Matcher.step per depth on the recorded inputs; outputs to a.save (npz)."""
    sys.path.insert(0, a.root)
    sys.path.insert(1, str(HERE))
    import gtmkit
    from gtmkit.synth import synth_users
    from step_cpu import ensure_index, record_inputs
    work = Path(a.workdir)
    idx = ensure_index(work, a.ads)
    users = synth_users(idx.manifest["schema"], 16, seed=11)
    m = gtmkit.Matcher(idx, "cpu")
    q = m.batch([idx.encode_request(u) for u in users])
    rec = work / "ab_inputs.npz"
    if not rec.exists():  # recorded once (by whichever side runs first), then shared
        steps, _ = record_inputs(m, q, users, (1, 512, 1024, 1024), 7)
        np.savez(rec, **{f"{k}{i}": v for i, s in enumerate(steps) for k, v in s.items()})
    z = np.load(rec)
    n = len([f for f in z.files if f.startswith("k")])
    args = [(z[f"node_ids{i}"], z[f"logprobs{i}"], z[f"beam_scores{i}"], z[f"row_request{i}"], q, int(z[f"k{i}"]))
            for i in range(n)]
    for v in m.arrays:  # page the memory-mapped index in: this VM reclaims idle page cache (kdamond), which
        if isinstance(v, np.ndarray) and v.size:  # otherwise costs whichever side runs after a pause
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--runs", type=int, default=4, help="even: each side goes first as often")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--workdir", default="/tmp/gtmkit-stepcpu")
    ap.add_argument("--ads", type=int, default=15_000_000)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--save", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return 0
    tree = Path(tempfile.mkdtemp(prefix="step-ab-"))
    subprocess.run(["git", "-C", str(HERE.parent), "worktree", "add", "-q", "--detach", str(tree / "a"), a.rev],
                   check=True)
    try:
        sides = {"A": str(tree / "a"), "B": str(HERE.parent)}
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
            print(f"depth {d + 1}: A ({a.rev}) {x:.3f} ms  B (tree) {y:.3f} ms  A/B {x / y:.3f}")
        print("B's outputs equal A's:", "yes" if same else "NO")
        return 0 if same else 1
    finally:
        subprocess.run(["git", "-C", str(HERE.parent), "worktree", "remove", "--force", str(tree / "a")])


if __name__ == "__main__":
    sys.exit(main())
