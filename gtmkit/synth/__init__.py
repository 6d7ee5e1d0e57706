"""Realistic synthetic ad catalogs and users (docs/design.md §7): the inputs of tests, demos and benchmarks.

One deterministic `World` (countries, regions, cities, SID-cluster profiles) feeds both the catalog
(`synth_catalog` / `write_catalog`) and the users (`synth_users`), so targeting and users correlate.
Modules: world (places, cluster profiles), sids (SID tree, ads per SID), targeting (knobs, per-ad
draw), catalog (generation, Parquet + schema JSON), users (requests)."""

from .catalog import ARROW_SCHEMA, catalog_schema, dumps_schema, schema_path_for, synth_catalog, write_catalog
from .sids import _ADS_PER_SID_MEAN, ads_per_sid_stats, first_token_weights
from .targeting import TargetingRates
from .users import synth_users, write_users
from .world import AGE_BUCKETS, GENDERS, GENERATOR, MAX_HOMES, Clusters, World

__all__ = ["World", "Clusters", "TargetingRates", "synth_catalog", "catalog_schema", "write_catalog",
           "synth_users", "write_users", "first_token_weights", "ads_per_sid_stats", "schema_path_for",
           "dumps_schema", "ARROW_SCHEMA", "AGE_BUCKETS", "GENDERS", "GENERATOR", "MAX_HOMES",
           "_ADS_PER_SID_MEAN"]
