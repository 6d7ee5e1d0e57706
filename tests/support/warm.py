"""Compiles the CPU kernels most tests use into the suite's numba cache, in a process of its own that
tests/conftest.py starts when that cache is new: it runs on the second core while the first tests run, so that
the tests load machine code instead of each compiling it in turn."""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path


def main() -> None:
    warnings.simplefilter("ignore")
    import gtmkit
    from gtmkit.commands._warmup import warm
    from gtmkit.synth.keys import synth_keys
    from gtmkit.synth.proposals import synth_proposals
    from gtmkit.trie.search import trie_beam_search
    from gtmkit.trie.trie import SuccinctTrie

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support.catalogs import random_catalog, schema_dict, write

    warm()  # evaluation and match, as the demo runs them
    with tempfile.TemporaryDirectory() as tmp:
        cat = write(Path(tmp), random_catalog(seed=1, n_ads=300), schema_dict())
        gtmkit.build_index(cat, Path(tmp) / "idx").close()
    trie = SuccinctTrie.build(synth_keys(2000, seed=1))
    tokens, logp = synth_proposals(trie, 2, 4, 8)
    trie_beam_search(trie, tokens, logp, 8)


if __name__ == "__main__":
    try:
        main()
    except Exception:  # a warm-up that fails changes nothing: the tests compile what they need
        pass
