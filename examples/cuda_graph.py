"""Capture the whole fixed-schedule beam search (steps, CD+GTM, top-k, reordering, decoder, post-filter)
as one CUDA graph and replay it; compare with the eager search.

    python examples/cuda_graph.py             # needs a CUDA GPU and cupy
"""
import sys
import tempfile
import time
from pathlib import Path

try:
    import cupy as cp
except ImportError:
    sys.exit("examples/cuda_graph.py needs CuPy and a CUDA GPU: pip install 'gtmkit[gpu]'")

import gtmkit
from gtmkit.matcher.cuda.graph import GraphedBeamSearch
from gtmkit.synth.logits_cuda import GpuSyntheticDecoder
from gtmkit.synth import synth_users, write_catalog

work = Path(tempfile.mkdtemp())
catalog, _ = write_catalog(work / "catalog.parquet", 300_000, seed=0)
index = gtmkit.build_index(catalog, work / "index", partition="static", k=[1, 4, 4, 2])
matcher = gtmkit.Matcher(index, device="cuda")
users = synth_users(index.manifest["schema"], 16, seed=0)
requests = matcher.batch([index.encode_request(u) for u in users])   # uploaded once
sizes = (1, 512, 1024, 1024)

# The decoder must be capturable: no host sync, no allocation after its first call.
# Its warm-up search also sizes each step's first GTM window from the pass rates it sees (gtm_windows="auto").
searcher = GraphedBeamSearch(matcher, requests, GpuSyntheticDecoder(users, index.vocab_size), sizes)
print("first GTM window a step:", searcher.windows)
result = searcher.replay()                                            # device arrays, rewritten per replay
eager = gtmkit.beam_search(matcher, requests, GpuSyntheticDecoder(users, index.vocab_size), sizes)
assert cp.array_equal(result.sids, eager.sids) and cp.array_equal(result.scores, eager.scores)

t = time.perf_counter()
for _ in range(100):
    searcher.launch()
searcher.stream.synchronize()
print(f"graph replay: {(time.perf_counter() - t) * 10:.3f} ms per 4-step search of {len(users)} requests")
counts = result.ad_counts.get()
print("eligible ads per request:", counts.tolist())
