"""What builds read: Parquet inputs (dataset.py), the catalog and its schema (catalog.py, schema.py), key
columns for the succinct trie (keys.py), checked local files (files.py) and where an input lives, a local path or a
URL of a store (stores.py)."""
