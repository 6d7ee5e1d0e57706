"""Offline build: trie, targeting rows, subtree unions, k-way partitions, dedup tables, SID->ad map, ad index."""
