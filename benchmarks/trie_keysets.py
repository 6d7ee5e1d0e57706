"""Key sets of the trie size benchmark (benchmarks/trie.py --sizes): Zipf keys with wide tokens, SID-like keys and
words of many languages (wordfreq) tokenized by CLIP's BPE vocabulary (shipped in the openai-clip package)."""
import numpy as np
def zipf_wide(n=300_000, seed=5, max_len=12):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, max_len + 1, n)
    toks = (np.exp(rng.random(lens.sum()) * np.log(2_000_001)).astype(np.int64) - 1)
    offs = np.zeros(n + 1, np.int64); np.cumsum(lens, out=offs[1:])
    # a fifth of keys get one wide token (>= 65536)
    wide = rng.random(n) < 0.2
    pos = offs[:-1] + (rng.random(n) * lens).astype(np.int64)
    toks[pos[wide]] = 65536 + rng.integers(0, 1 << 20, wide.sum())
    keys = [tuple(toks[a:b]) for a, b in zip(offs[:-1], offs[1:])]
    # keys that are prefixes of others
    extra = [k[:max(1, len(k) // 2)] for k in keys[: n // 10]]
    return keys + extra
def sids(n=300_000, seed=6, levels=3, cb=256):
    """Fixed-length SIDs: 3 codes of a 256-entry codebook (the first Zipf) and a trailing 0."""
    rng = np.random.default_rng(seed)
    c = rng.integers(0, cb, (n, levels)) ; c[:,0] = (np.exp(rng.random(n)*np.log(cb+1))-1).astype(int)
    keys = sorted(set(map(tuple, c.tolist())))
    return [x + (0,) for x in keys]
def zipf_steep(n=300_000, seed=7, max_len=12, s=1.3):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, max_len + 1, n)
    toks = np.minimum(rng.zipf(s, lens.sum()) - 1, 65535).astype(np.int64)
    offs = np.zeros(n + 1, np.int64); np.cumsum(lens, out=offs[1:])
    wide = rng.random(n) < 0.2
    pos = offs[:-1] + (rng.random(n) * lens).astype(np.int64)
    toks[pos[wide]] = 65536 + (rng.zipf(s, wide.sum()) - 1) % (1 << 21)
    keys = [tuple(toks[a:b]) for a, b in zip(offs[:-1], offs[1:])]
    extra = [k[:max(1, len(k) // 2)] for k in keys[: n // 10]]
    return keys + extra
_TOK = None
def text(n_words=8000):
    """Distinct BPE token sequences of the top n_words words of every wordfreq language; None if not installed."""
    import importlib.util, os
    try:
        import wordfreq
    except ImportError:
        return None
    d = os.path.join(importlib.util.find_spec('wordfreq').submodule_search_locations[0], '..', 'clip')
    global _TOK
    spec = importlib.util.spec_from_file_location('st', os.path.join(d, 'simple_tokenizer.py'))
    if not os.path.exists(spec.origin):
        return None
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); tok = m.SimpleTokenizer()
    keys = set()
    for lang in sorted(wordfreq.available_languages()):
        for w in wordfreq.top_n_list(lang, n_words):
            ids = tok.encode(w)
            if ids: keys.add(tuple(ids))
    return sorted(keys)
