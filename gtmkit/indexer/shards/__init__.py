"""Sharded GTM build (docs/design.md §3): the catalog's files split by first SID token, one task a shard of
tokens builds that part of the trie, its matchers and its ads, and an assembler joins the parts into the same
artifact the single-process build writes. Tasks run in this process or on a Dask cluster."""
