"""gtmkit: constrained decoding + Generative Target Matching (GTM) indexes for generative ad retrieval.

Offline `build_index` turns a Parquet ad catalog into an artifact; `load_index` opens it."""

import logging

from . import _cache  # noqa: F401  (numba's cache folder, before any kernel module)
from . import threads as _threads  # noqa: F401  (picks the numba threading layer first)
from . import _moved
from ._compile_notice import CompileNotice
from ._version import __version__
from .errors import ArtifactError, CatalogError, GtmkitError, RequestError, SchemaError
from .artifact.header import Header, read_header
from .index import Index, load_index
from .indexer.build import build_index
from .indexer.update.rebuild import rebuild_shards
from .trie.trie import SuccinctTrie
from .trie.search import TrieBeamStepper, trie_beam_search, trie_beam_stepper
from .trie.server_cuda import TrieSearchServer
from .matcher.beam import Result, beam_search
from .matcher.index_matcher import IndexMatcher, Step
from .matcher.matcher import Matcher
from .matcher.options import CudaOptions
from .targeting.semantics import Request

_moved.install()  # old module paths, for one release

# the library logs and never prints: without a handler of the application's, its warnings go nowhere
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = ["__version__", "CompileNotice", "build_index", "rebuild_shards", "load_index", "read_header", "Header", "Index", "Request", "Matcher", "IndexMatcher", "CudaOptions", "Step", "beam_search", "Result", "SuccinctTrie", "trie_beam_search", "trie_beam_stepper", "TrieBeamStepper", "TrieSearchServer", "GtmkitError", "CatalogError",
           "SchemaError", "ArtifactError", "RequestError"]
