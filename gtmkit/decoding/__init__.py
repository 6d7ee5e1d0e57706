"""GRACE's decoder half for encoder-decoder SID models of the T5 family (docs/design.md §8):

    decoder = gtmkit.decoding.SidDecoder(model, matcher, layout)
    result = decoder.search(input_ids, requests, beam_sizes=(1, 512, 1024, 1024))

Imported only when used: it needs torch (the extra `hf`)."""

try:
    import torch  # noqa: F401  (the clear error below, before any submodule fails on it)
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"gtmkit.decoding needs torch: pip install 'gtmkit[hf]' ({e})") from None

from .decoder import SidDecoder

__all__ = ["SidDecoder"]
