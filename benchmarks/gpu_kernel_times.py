"""Per-kernel device time of one CD+GTM step at each depth (CUDA events around every launch).

    python benchmarks/gpu_kernel_times.py ADS      # builds a synth index of ADS ads first
"""
import sys, json, cupy as cp
import gtmkit
from gtmkit.synth import synth_users, write_catalog
from gtmkit.synth.logits_cuda import GpuSyntheticDecoder
cat, _ = write_catalog("/tmp/kt.parquet", int(sys.argv[1]), seed=1)
idx = gtmkit.build_index(cat, "/tmp/kt_idx", partition="static", k=[1, 4, 4, 2], overwrite=True)
m = gtmkit.Matcher(idx, "cuda")
users = synth_users(idx.manifest["schema"], 16, seed=11)
q = m.batch([idx.encode_request(u) for u in users])
be = m.cuda
steps = []
orig = be.step
def spy(*a, **k):
    steps.append(a); return orig(*a, **k)
be.step = spy
gtmkit.beam_search(m, q, GpuSyntheticDecoder(users, idx.vocab_size, seed=7), (1, 512, 1024, 1024), postfilter=False)
be.step = orig
names = [n for n in dir(be) if n.startswith("k_")]
times = {}
class Timed:
    def __init__(self, name, fn): self.name, self.fn = name, fn
    def __call__(self, *a):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(); self.fn(*a); e1.record(); e1.synchronize()
        times.setdefault(self.name, []).append(cp.cuda.get_elapsed_time(e0, e1) * 1000)
for n in names:
    setattr(be, n, Timed(n, getattr(be, n)))
for t, a in enumerate(steps):
    for _ in range(3):
        times.clear(); orig(*a)
    row = {n: round(sum(v), 1) for n, v in times.items()}
    print("step", t + 1, "us per kernel (summed over launches):", json.dumps(row))
