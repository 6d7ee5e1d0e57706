"""The GTM index artifact: format name, version and array names (documented in docs/format.md)."""

FORMAT_NAME = "gtmkit-index"
FORMAT_VERSION = 2  # 2: the manifest carries its own digest (artifact.DIGEST); 1 still loads
SUPPORTED_VERSIONS = (1, 2)


def bloom_table(b: int) -> str:
    return f"bloom_table_b{b}"


def bloom_dict(b: int) -> str:
    return f"bloom_dict_b{b}"


def ad_allow(b: int) -> tuple:
    return f"ad_allow_offsets_b{b}", f"ad_allow_codes_b{b}"


def ad_exclude(b: int) -> tuple:
    return f"ad_exclude_offsets_b{b}", f"ad_exclude_codes_b{b}"
