"""Online side: request encoding, CD+GTM step, top-k, beam search, post-filter."""
