"""Exception types gtmkit raises for bad input; each message is one line naming what and where.

The CLI turns every GtmkitError into a one-line message and exit code 1 (no traceback)."""


class GtmkitError(Exception):
    """Base class: a problem with the user's input or files, not a bug in gtmkit."""


class SchemaError(GtmkitError):
    """The catalog schema JSON is malformed or names unknown keys."""


class CatalogError(GtmkitError):
    """The Parquet catalog is unreadable or a row breaks the schema (message names file, column, row)."""


class ArtifactError(GtmkitError):
    """An on-disk artifact is missing, truncated, corrupt, foreign or of an unsupported version."""


class RequestError(GtmkitError):
    """A request (user dict) names an unknown attribute or carries a value of the wrong type."""


class UpdateError(GtmkitError):
    """A catalog update cannot be applied in place (the index's slack for new ads is used up): rebuild."""
