"""gtmkit: constrained decoding + Generative Target Matching (GTM) indexes for generative ad retrieval.

Offline `build_index` turns a Parquet ad catalog into an artifact; `load_index` opens it."""

from ._version import __version__
from .errors import ArtifactError, CatalogError, GtmkitError, RequestError, SchemaError
from .index import Index, load_index
from .indexer.build import build_index
from .targeting import Request

__all__ = ["__version__", "build_index", "load_index", "Index", "Request", "GtmkitError", "CatalogError",
           "SchemaError", "ArtifactError", "RequestError"]
