"""The LOUDS succinct trie for integer-token keys: inputs (checked keys), build, bits (rank/select),
nav (navigation), trie (SuccinctTrie: save, load, lookups)."""
