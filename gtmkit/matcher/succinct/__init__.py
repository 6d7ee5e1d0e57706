"""Constrained beam search over a SuccinctTrie: the public entry points (search.py), the CPU search
(search_cpu.py), the GPU search (search_cuda.py, kernels/trie_search.cu), the resident GPU server
(server_cuda.py) and the lookup tables the GPU search builds (gpu_tables.py)."""
