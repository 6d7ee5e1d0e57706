"""Where a step's candidate scores lie (CPU, no GPU needed): per step, how far the final threshold (the k-th
passer's score) is below the request's best beam score and below its worst live beam, and the share of CD
candidates within M nats of the best beam. The question it answers: how many candidates could an expand that
keeps only those above a threshold estimate skip, and how tight must the estimate be? And how many rows hold no
candidate of the fused step's first GTM window (what a listing by rows could skip)?

    python benchmarks/step_score_margins.py INDEX     (same users, decoder and beams as step_gpu.py's search)"""
import sys

import numpy as np
import gtmkit
from gtmkit.synth.logits import SyntheticDecoder
from gtmkit.synth import synth_users
from gtmkit.matcher.arrays import trie_arrays

idx = gtmkit.load_index(sys.argv[1], verify=False)
B, sizes = 16, (1, 512, 1024, 1024)
users = synth_users(idx.manifest["schema"], B, seed=11)
reqs = [idx.encode_request(u) for u in users]
m = gtmkit.Matcher(idx, "cpu")
dec = SyntheticDecoder(users, idx.vocab_size, seed=7)
t_arr = trie_arrays(idx)
no, ct = np.asarray(t_arr.node_offsets), np.asarray(t_arr.child_tokens)
node_ids = np.zeros(B, np.int64); scores = np.zeros(B, np.float32)
prev = np.full(B, -1, np.int32); parents = np.arange(B, dtype=np.int32)
for t in range(idx.sid_length):
    lp = np.asarray(dec(t, prev, parents))
    k = sizes[t + 1] if t + 1 < len(sizes) else sizes[-1]
    rows = sizes[t]
    rr = np.repeat(np.arange(B), rows)
    st = m.step(node_ids, lp, scores, rr, reqs, k)
    thr = st.scores[:, k - 1]
    out = []
    for b in range(B):
        r0, r1 = b * rows, (b + 1) * rows
        n = node_ids[r0:r1]
        live = n >= 0
        top = scores[r0:r1][live].max()
        low = scores[r0:r1][live].min()
        cs = []
        for r in np.nonzero(live)[0] + r0:
            j0, j1 = no[node_ids[r]], no[node_ids[r] + 1]
            cs.append(scores[r] + lp[r, ct[j0:j1]])
        # rows without a candidate in the fused step's first GTM window (the 4k best candidates)
        edge = np.sort(np.concatenate(cs))[::-1][min(4 * k, sum(map(len, cs))) - 1]
        below = float(np.mean([len(c) == 0 or c.max() < edge for c in cs]))
        cs = np.concatenate(cs)
        fr = {M: float((cs >= top - M).mean()) for M in (4, 8, 12, 16, 24)}
        # a list kept by the expand of candidates above (worst live beam - M): does it hold the first window, how big?
        fw = {M: float((cs >= low - M).mean()) for M in (0, 2, 4, 6, 8)}
        out.append((len(cs), top - thr[b], fr, top - low, below, low - edge, fw))
    gaps = np.array([o[1] for o in out])
    spread = np.array([o[3] for o in out])
    print(f"step {t + 1}: top - worst live beam: median {np.median(spread):.2f} max {spread.max():.2f}; "
          f"threshold - worst beam: min {np.min(spread - gaps):.2f} median {np.median(spread - gaps):.2f}")
    print(f"step {t + 1}: cand/req median {np.median([o[0] for o in out]):.0f}; top - threshold: median {np.median(gaps):.2f} "
          f"max {gaps.max():.2f} nats; share of candidates within M of top (median over requests): " +
          ", ".join(f"M={M}: {np.median([o[2][M] for o in out]):.3f}" for M in (4, 8, 12, 16, 24)))
    ew = np.array([o[5] for o in out])
    print(f"step {t + 1}: worst live beam - first-window edge: min {ew.min():.2f} median {np.median(ew):.2f} "
          f"max {ew.max():.2f}; share of candidates above worst beam - M (median / max over requests): " +
          ", ".join(f"M={M}: {np.median([o[6][M] for o in out]):.3f} / {max(o[6][M] for o in out):.3f}" for M in (0, 2, 4, 6, 8)))
    below = np.array([o[4] for o in out])
    print(f"step {t + 1}: rows without a candidate in the first 4k-candidate window: median {np.median(below):.3f} "
          f"min {below.min():.3f} max {below.max():.3f}")
    node_ids, scores = st.nodes.reshape(-1).astype(np.int64), st.scores.reshape(-1)
    prev, parents = st.tokens.reshape(-1), st.parent_rows.reshape(-1)
