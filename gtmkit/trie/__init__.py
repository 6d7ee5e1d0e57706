"""The succinct trie for integer-token keys (docs/design.md §6): build (build.py, shards.py), navigation
(nav.py), the SuccinctTrie artifact (trie.py), constrained beam search on the CPU (search_cpu.py) and the
GPU (search_cuda.py, gpu_tables.py, kernels/), and the resident GPU server (server_cuda.py). Its format and
checks live beside the GTM index's in gtmkit/artifact/; it shares no code with the GTM index or matcher."""
