"""The `gtmkit` command line: a thin click layer over the library; each command lives in gtmkit/commands/."""

from __future__ import annotations

import sys

import click

from ._version import __version__
from .commands._common import handle_errors  # noqa: F401  (re-exported for plugins and tests)

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "--version", prog_name="gtmkit")
def cli():
    """gtmkit: constrained decoding + Generative Target Matching indexes for generative ad retrieval.

    \b
    Example:
        gtmkit synth catalog --ads 100000 -o catalog.parquet
        gtmkit build catalog.parquet -o index/
        gtmkit stats index/
    """


def _register():
    # Imported here so `gtmkit --help` stays cheap and each command file has one job.
    from .commands import build, demo, eval, match, stats, synth, synth_trie, trie, verify

    for mod in (synth, build, stats, verify, eval, match, demo, trie):
        cli.add_command(mod.command)
    synth_trie.register(synth.command)


_register()


def main(argv=None):
    return cli.main(args=argv, prog_name="gtmkit")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
