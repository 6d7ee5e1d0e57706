"""The `gtmkit-trie` artifact's names and its writer, shared by the whole and the sharded build (docs/format.md)."""

from __future__ import annotations

from .container import ArtifactWriter
from .._rank_select import SAMPLE

FORMAT_NAME = "gtmkit-trie"
FORMAT_VERSION = 3  # 3: tail labels (trie/tails.py); 2: the manifest carries its own digest; 1 and 2 still load
SUPPORTED_VERSIONS = (1, 2, 3)
BASE_ARRAY_NAMES = ("louds", "louds_rank", "louds_select0", "louds_select1", "label_low", "label_high",
                    "terminal", "terminal_rank", "terminal_select1", "level_offsets")
TAIL_ARRAY_NAMES = ("label_tail", "label_tail_rank", "tail_dict", "tail_low", "tail_wide", "tail_wide_rank", "tail_high")
ARRAY_NAMES = BASE_ARRAY_NAMES + TAIL_ARRAY_NAMES + ("level_label",)
TAIL_FIELDS = ("tail_nodes", "tail_low_bits", "tail_high_bits")  # manifest counts of version 3 (0 for older tries)
LABEL_DEFAULTS = {"low_bits": 16, "const_levels": 0}  # what a trie without these fields (versions 1, 2) means
# Node ids fit 32 unsigned bits, below 0xFFFFFFFF: the GPU search ranks candidates by 64-bit composites whose
# low half is 0xFFFFFFFF - node id (or key id) and must not be 0 (trie/kernels/trie_search.cu).
MAX_NODES = 2**32 - 1


def write_trie(w: ArtifactWriter, built: dict, build: dict = None) -> None:
    """A trie's arrays (build_arrays' output; those already in w were streamed there) and manifest into an open
    writer, committed. build: how the trie was built."""
    w.expect_arrays({name: built["arrays"][name] for name in ARRAY_NAMES if name in built["arrays"]})
    for name in ARRAY_NAMES:
        if not w.has(name):
            w.add_array(name, built["arrays"][name])
    w.commit({"num_nodes": int(built["num_nodes"]), "num_keys": int(built["num_keys"]),
              "high_bits": int(built["high_bits"]), **{f: int(built.get(f, 0)) for f in TAIL_FIELDS},
              "tail_dict_size": len(built["arrays"]["tail_dict"]), "low_bits": int(built.get("low_bits", 16)),
              "const_levels": len(built["arrays"]["level_label"]), "max_depth": len(built["arrays"]["level_offsets"]) - 2,
              "layout": "LOUDS 2n+1 bits LSB-first uint64, rank9 (512-bit superblocks), select "
                        f"samples every {SAMPLE}; label = label_low | label_high << low_bits at entry j - rank1(label_tail, j), "
                        "tail_dict[code] for a tail node (trie/tails.py), level_label for the constant deepest levels",
              "build": build or {"mode": "single-process"}})
