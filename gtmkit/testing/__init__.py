"""The plain-Python references that the kernels are tested against (gtm.py: the CD+GTM step and exact
eligibility; trie.py: the succinct-trie search) and the fuzz suite (fuzz*.py)."""
