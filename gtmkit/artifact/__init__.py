"""The on-disk artifacts: the versioned container (container.py, layout.py, locks.py, staging.py, writes.py,
npy.py, output.py), both formats side by side (index_format.py and index_checks.py for the GTM index,
trie_format.py and trie_checks.py for the succinct trie) and read_header (header.py)."""

from .header import Header, read_header  # noqa: E402,F401  (the public peek at either artifact)
