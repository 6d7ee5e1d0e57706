"""The `gtmkit` command line: a thin click layer over the library; each command lives in gtmkit/commands/."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import warnings

import click

from . import _cache
from ._compile_notice import CompileNotice
from ._version import __version__
from .commands._common import handle_errors  # noqa: F401  (re-exported for plugins and tests)

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# Seconds of numba compile on a command's first run, measured on a 2-core x86 host (cold minus warm
# wall time); commands that compile under ~3 s are not announced.
FIRST_COMPILE_SECONDS = {"demo": 22, "build": 4, "eval": 18, "match": 14, "synth-proposals": 4,
                         "trie-search": 11}
_GROUPS = ("synth", "trie")  # commands named by two words


def _command_key(argv) -> str | None:
    """"demo", "trie-search", ...: the command argv runs; None for help and version."""
    if any(a in ("-h", "--help", "--version") for a in argv):
        return None
    words = [a for a in argv if not a.startswith("-")]
    if not words:
        return None
    return f"{words[0]}-{words[1]}" if words[0] in _GROUPS and len(words) > 1 else words[0]


_pending = {"key": None}  # the command main() announced, marked compiled once it returns


def _marker(key: str):
    return _cache.compiled_marker(key)


class _Gtmkit(click.Group):
    """The root group: a command stopped by Ctrl-C or SIGTERM ends in one line saying whether its new version was
    published (click would print 'Aborted!' either way), once its cleanup has run."""

    def invoke(self, ctx):
        from .commands import _stops
        _stops.reset()
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            signum = signal.SIGINT
        except SystemExit as exc:
            signum = _stopped["signal"]
            if signum is None or exc.code != 128 + signum:
                raise
        click.echo(_stops.stop_line(signum), err=True)
        raise click.exceptions.Exit(128 + signum)


@click.group(cls=_Gtmkit, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "--version", prog_name="gtmkit")
def cli():
    """gtmkit: constrained decoding + Generative Target Matching indexes for generative ad retrieval.

    \b
    Example:
        gtmkit synth catalog --ads 100000 -o catalog.parquet
        gtmkit build catalog.parquet -o index/
        gtmkit stats index/
    """


@cli.result_callback()
def _after(*_args, **_kwargs):
    """A command that returned has compiled what it uses: its next run is warm."""
    key = _pending["key"]
    if key in FIRST_COMPILE_SECONDS:
        try:
            _marker(key).parent.mkdir(parents=True, exist_ok=True)
            _marker(key).touch()
        except OSError:  # a read-only cache only costs the notice on the next run
            pass


def _register():
    # Imported here so `gtmkit --help` stays cheap and each command file has one job.
    from .commands import build, demo, eval, match, stats, synth, synth_trie, trie, update, verify

    for mod in (synth, build, update, stats, verify, eval, match, demo, trie):
        cli.add_command(mod.command)
    synth_trie.register(synth.command)


_register()


_STOPS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}  # and their defaults
FORCE_AFTER_S = 10.0  # a stop repeated this long after the first no longer waits for the cleanup
_stopped = {"at": None, "signal": None}


def _stop(signum, frame):
    """The first Ctrl-C or SIGTERM stops the command by an error, so its cleanup (removing a half-written index,
    stopping its workers) runs; repeats are ignored while that runs, unless the first came FORCE_AFTER_S ago."""
    now = time.monotonic()
    if _stopped["at"] is None:
        _stopped["at"], _stopped["signal"] = now, signum
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)  # unwinds like an error, so the same cleanup runs
    if now - _stopped["at"] >= FORCE_AFTER_S:  # the cleanup hangs, or the first stop was swallowed: stop now
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    on_main = threading.current_thread() is threading.main_thread()
    # a signal the embedding program handles, or ignores (a background job's SIGINT), is left to it
    own = [s for s, default in _STOPS.items() if on_main and signal.getsignal(s) is default]
    _stopped["at"] = _stopped["signal"] = None
    for s in own:
        signal.signal(s, _stop)
    key = _pending["key"] = _command_key(argv)
    silent = any(a in ("-s", "--silent") for a in argv)  # -s: nothing on stderr but errors
    # the command line says it its own way, below; its Dask workers and other children inherit the silence
    warnings.filterwarnings("ignore", category=CompileNotice)
    os.environ.setdefault("GTMKIT_COMPILE_NOTICE", "0")
    if key in FIRST_COMPILE_SECONDS and not silent and not _marker(key).exists():
        click.echo(f"gtmkit: compiling kernels, once per install, ~{FIRST_COMPILE_SECONDS[key]} s", err=True)
    try:
        return cli.main(args=argv, prog_name="gtmkit")
    finally:
        if _stopped["at"] is None:  # once stopped, repeats stay ignored through the interpreter's exit
            for s in own:
                signal.signal(s, _STOPS[s])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
