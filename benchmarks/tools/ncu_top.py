"""The SASS lines of an ncu report with the most warp-stall samples (ncu --page source --csv output on stdin).

    ncu -i r.ncu-rep --page source --csv --print-source sass | python benchmarks/tools/ncu_top.py 40
"""
import csv
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
rows = list(csv.reader(l for l in sys.stdin if l.strip() and not l.startswith("==")))
# the header is the first row with a stall-sampling column (a kernel-name row may come first)
at = next((j for j, r in enumerate(rows) if any(h.startswith("Warp Stall Sampling (All") for h in r)), None)
if at is None:
    print("no stall-sampling column; first rows:", rows[:3])
    sys.exit(0)
head, rows = rows[at], rows[at:]
col = next(i for i, h in enumerate(head) if h.startswith("Warp Stall Sampling (All"))
src = next((i for i, h in enumerate(head) if h.strip().lower() in ("source", "sass")), 1)
addr = next((i for i, h in enumerate(head) if "address" in h.lower()), 0)


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


body = [r for r in rows[1:] if len(r) > col]
total = sum(num(r[col]) for r in body) or 1
print("columns:", ", ".join(head))
print(f"{len(body)} SASS lines, {total:.0f} stall samples; top {n}:")
for r in sorted(body, key=lambda r: -num(r[col]))[:n]:
    print(f"{100 * num(r[col]) / total:5.1f}%  {r[addr]:>8}  {r[src][:110]}")
# the same samples in address order, as a coarse per-region profile (20 buckets)
k = max(len(body) // 20, 1)
print("by region (address order):", " ".join(f"{100 * sum(num(r[col]) for r in body[i:i + k]) / total:.0f}"
                                           for i in range(0, len(body), k)))
