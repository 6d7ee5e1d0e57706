"""What builds read: Parquet inputs (dataset.py), the catalog and its schema (catalog.py, schema.py), key
columns for the succinct trie (keys.py) and checked local files (files.py)."""
