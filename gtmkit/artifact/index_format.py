"""The GTM index artifact: format name, version and array names (documented in docs/format.md)."""

FORMAT_NAME = "gtmkit-index"
# 2: the manifest carries its own digest (artifact.DIGEST); 3: a build's arrays are a function of the catalog's
# content (string dictionaries sorted, not in order of first appearance); 1 and 2 still load
FORMAT_VERSION = 3
SUPPORTED_VERSIONS = (1, 2, 3)


def bloom_table(b: int) -> str:
    return f"bloom_table_b{b}"


def bloom_dict(b: int) -> str:
    return f"bloom_dict_b{b}"


def ad_allow(b: int) -> tuple:
    return f"ad_allow_offsets_b{b}", f"ad_allow_codes_b{b}"


def ad_exclude(b: int) -> tuple:
    return f"ad_exclude_offsets_b{b}", f"ad_exclude_codes_b{b}"


DEFAULT_SLACK = 0.01  # new ads an index takes between builds (`gtmkit update`), as a share of its ads at build


def default_slack_ads(num_ads: int) -> int:
    return max(1000, int(num_ads * DEFAULT_SLACK))


def update_state(manifest: dict) -> dict:
    """The manifest's update record: slack_ads (new ads the index may take after its build), added (so far),
    updates (applied so far); an artifact built before the record existed gets the default slack."""
    rec = manifest.get("updates") or {}
    slack = rec.get("slack_ads")
    if slack is None:
        slack = default_slack_ads(int(manifest["counts"]["ads"]))
    return {"slack_ads": int(slack), "added": int(rec.get("added", 0)), "updates": int(rec.get("updates", 0))}
