"""Child of benchmarks/trie.py --sizes: build seconds of the succinct trie on saved key sets, in the gtmkit found on
PYTHONPATH (this tree or a baseline checkout), so two versions are timed alternately on the same keys.

Usage: python trie_build_time.py KEYS_DIR name[,name...] -> one JSON line {name: [seconds, bytes]}."""
import json
import sys
import time

import numpy as np

from gtmkit import SuccinctTrie
from gtmkit.synth.keys import synth_keys

SuccinctTrie.build(synth_keys(1000, seed=3))  # numba's compile or cache load, not timed
out = {}
for name in sys.argv[2].split(","):
    z = np.load(f"{sys.argv[1]}/{name}.npz")
    tokens, offsets = z["tokens"], z["offsets"]
    t = time.perf_counter()
    trie = SuccinctTrie.build((tokens, offsets))
    out[name] = [time.perf_counter() - t, int(trie.nbytes)]
print(json.dumps(out))
