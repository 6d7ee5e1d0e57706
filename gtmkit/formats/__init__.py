"""Catalog schema, catalog reader and on-disk artifact format."""
