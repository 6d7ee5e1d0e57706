"""Probe (issue 3): does the CPU GTM test at depth 3 pay for two cache misses per node (part_bitmask and
part_bloom are separate arrays)? Times cpu.gtm._gtm_batch on the children of a recorded depth-3 step's rows
of request 0, the index's layout against the two interleaved into one int32 [P, 1+nb] array (same nodes,
same verdicts, caches evicted between runs), then sorted nodes and warm caches.

    python benchmarks/probe_gtm_layout.py      # needs the 10M-SID index of benchmarks/step_cpu.py in
                                               # /tmp/gtmkit-stepcpu/idx (its --workdir)
"""
import time

import gtmkit
import numpy as np
from gtmkit.synth import synth_users
from gtmkit.synth.logits import SyntheticDecoder
from gtmkit.matcher.cpu.gtm import _gtm_batch, request_words

idx = gtmkit.load_index("/tmp/gtmkit-stepcpu/idx", verify=False)
m = gtmkit.Matcher(idx)
users = synth_users(idx.manifest["schema"], 16, seed=11)
q = m.batch([idx.encode_request(u) for u in users])
rec = []
dec = SyntheticDecoder(users, 512, "peaked", 7)
orig = m.step
m.step = lambda *a, **k: (rec.append((a, k)), orig(*a, **k))[1]
gtmkit.beam_search(m, q, dec, (1, 512, 1024, 1024))
t = m.arrays
node_ids, lp, bs, rr = rec[2][0][:4]  # depth-3 step inputs
rows = np.nonzero((rr == 0) & (node_ids >= 0))[0]
nodes = np.concatenate([np.arange(t.node_offsets[n], t.node_offsets[n + 1]) for n in node_ids[rows] if n < len(t.node_offsets) - 1]).astype(np.int64)
print("depth-3 children of request 0:", len(nodes), "partitions per node at depth 4:", t.level_width)
pbm, pbl = t.part_bitmask, t.part_bloom
comb = np.empty((pbm.shape[0], 1 + pbl.shape[1]), np.int32)
comb[:, 0] = pbm
comb[:, 1:] = pbl
cbm, cbl = comb[:, 0], comb[:, 1:]  # the same _gtm_batch reads the interleaved array through strided views


n = len(nodes)
B = 64
s0, s1, todo = np.empty(B, np.int64), np.empty(B, np.int64), np.empty(B, np.bool_)
ok1, ok2 = np.empty(n, np.bool_), np.empty(n, np.bool_)
Q = q
words = request_words(Q.bitmask, Q.sig_off, Q.sigs, 0)


def run1():
    for i in range(0, n, B):
        c = min(B, n - i)
        _gtm_batch(t.jagged, t.level_offsets, t.level_base, t.level_width, t.part_offsets, pbm, pbl, t.bitmask_table,
                   t.bloom_table, t.bloom_base, Q.bitmask, Q.sig_off, Q.sigs, 0, nodes[i:i + c], c, ok1[i:i + c], s0, s1, todo, words)


def run2():
    for i in range(0, n, B):
        c = min(B, n - i)
        _gtm_batch(t.jagged, t.level_offsets, t.level_base, t.level_width, t.part_offsets, cbm, cbl, t.bitmask_table,
                   t.bloom_table, t.bloom_base, Q.bitmask, Q.sig_off, Q.sigs, 0, nodes[i:i + c], c, ok2[i:i + c], s0, s1, todo, words)


run1(); run2()
assert np.array_equal(ok1, ok2), "verdicts differ"
print("pass share", ok1.mean())
for r in range(3):
    for name, f in (("separate", run1), ("interleaved", run2)):
        # evict caches between runs: touch 400 MB
        junk = np.ones(50_000_000, np.int64); junk.sum(); del junk
        t0 = time.perf_counter(); f(); dt = time.perf_counter() - t0
        print(f"round {r} {name:12s} {1e3 * dt:7.2f} ms  {1e9 * dt / n:6.1f} ns/node")

# where the time goes: partitions per node, and the same nodes sorted (sequential partition rows)
srt = np.sort(nodes)
def run_sorted():
    for i in range(0, n, B):
        c = min(B, n - i)
        _gtm_batch(t.jagged, t.level_offsets, t.level_base, t.level_width, t.part_offsets, pbm, pbl, t.bitmask_table,
                   t.bloom_table, t.bloom_base, Q.bitmask, Q.sig_off, Q.sigs, 0, srt[i:i + c], c, ok1[i:i + c], s0, s1, todo, words)
valid = 0
for z in nodes[:5000]:
    d = 3
    w = t.level_width[d]; s = t.level_base[d] + (z - t.level_offsets[d]) * w
    valid += (pbm[s:s + w] >= 0).sum()
print("valid partitions per node (first 5000):", valid / 5000, "bloom attrs", pbl.shape[1], "bitmask attrs", Q.bitmask.shape[1])
print("sig rows of request 0 per bloom attribute:", np.diff(Q.sig_off[0]))
for r in range(2):
    junk = np.ones(50_000_000, np.int64); junk.sum(); del junk
    t0 = time.perf_counter(); run_sorted(); dt = time.perf_counter() - t0
    print(f"sorted nodes {1e3 * dt:7.2f} ms  {1e9 * dt / n:6.1f} ns/node")
    t0 = time.perf_counter(); run1(); dt = time.perf_counter() - t0
    print(f"warm caches, separate {1e3 * dt:7.2f} ms  {1e9 * dt / n:6.1f} ns/node")

# the split: the same batches with the Bloom test left out (nb = 0), with the bitmask test left out (no
# attributes), and with both left out (partition ranges and the loop alone); verdicts differ, times only
pbl0 = np.ascontiguousarray(pbl[:, :0])
qbm0 = np.ascontiguousarray(Q.bitmask[:, :0, :])


def run_parts(pb, qb, out):
    wq = request_words(qb, Q.sig_off, Q.sigs, 0)  # the words of this (possibly attribute-less) request
    for i in range(0, n, B):
        c = min(B, n - i)
        _gtm_batch(t.jagged, t.level_offsets, t.level_base, t.level_width, t.part_offsets, pbm, pb, t.bitmask_table,
                   t.bloom_table, t.bloom_base, qb, Q.sig_off, Q.sigs, 0, nodes[i:i + c], c, out[i:i + c], s0, s1, todo, wq)


tmp = np.empty(n, np.bool_)
for name, pb, qb in (("no Bloom test", pbl0, Q.bitmask), ("no bitmask test", pbl, qbm0), ("neither", pbl0, qbm0),
                     ("both (as built)", pbl, Q.bitmask)):
    run_parts(pb, qb, tmp)
    ts = []
    for r in range(3):
        junk = np.ones(50_000_000, np.int64); junk.sum(); del junk
        t0 = time.perf_counter(); run_parts(pb, qb, tmp); ts.append(time.perf_counter() - t0)
    print(f"{name:16s} {1e9 * np.median(ts) / n:6.1f} ns/node (median of 3, caches evicted)")
