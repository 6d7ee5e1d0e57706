"""Decoder integrations: SID token layouts in a model's vocabulary, CD+GTM masking of a model's scores, Hugging
Face `generate()` (`gtmkit.integrations.transformers`, extra `hf`) and plain PyTorch modules
(`gtmkit.integrations.torch`). Nothing here is imported by the core package."""
