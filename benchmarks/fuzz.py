"""Run the fuzz suite (gtmkit.testing.fuzz) for as long as asked and record counts by kind and outcome,
the distinct failure signatures and every failure's reproducer.

    python benchmarks/fuzz.py --seconds 300 --seed 1 --jobs 2 --out benchmarks/results

Writes <out>/fuzz_<host>.json (the summary, the date and the machine) and .md (host: cpuN, --host)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _common import HOST_HELP, machine, result_paths  # noqa: E402

from gtmkit.testing.fuzz import KINDS, format_text, fuzz  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--host", help=HOST_HELP)
    a = ap.parse_args()
    load0 = os.getloadavg()[0]  # cases run in the forkserver's children: not ours for os.times
    s = fuzz(a.seconds, a.seed, [k for k in a.kinds.split(",") if k], timeout=a.timeout, jobs=a.jobs)
    s["date"] = datetime.date.today().isoformat()
    s["machine"] = machine(loadavg_1m=[round(load0, 2), round(os.getloadavg()[0], 2)], jobs=a.jobs,
                           case_timeout_s=a.timeout)
    js, md = result_paths(a.out, "fuzz", a.host)
    js.write_text(json.dumps(s, indent=1) + "\n")
    text = format_text(s)
    md.write_text(
        f"# Fuzz suite, CPU ({s['date']})\n\n`python benchmarks/fuzz.py --seconds {a.seconds:g} --seed {a.seed} --jobs {a.jobs}`"
        f" on {s['machine']['cpu']} ({s['machine']['cores']} cores, 1-min load average {s['machine']['loadavg_1m']}).\n\n"
        f"Outcomes by kind; failures grouped by signature (numbers, paths and quoted values blanked), then "
        f"each failure's reproducer with what the case fed in.\n\n```\n{text}\n```\n")
    print(text)


if __name__ == "__main__":
    main()
