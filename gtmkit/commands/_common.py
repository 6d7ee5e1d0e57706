"""Helpers shared by CLI commands: error lines, the output options, JSON output and a stderr progress bar."""

from __future__ import annotations

import functools
import json
import sys

import click

from ..errors import GtmkitError


def handle_errors(fn):
    """Turn library input errors into one clear line and exit code 1, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except GtmkitError as exc:  # a value quoted from user input may hold a line break: keep one line
            raise click.ClickException(str(exc).replace("\r", "\\r").replace("\n", "\\n")) from None

    return wrapper


def output_options(what: str = "the result", *, silent: bool = True, notice: bool = True, needs: str = ""):
    """A command's --json (parameter as_json) and, unless silent=False, -s/--silent (parameter silent), in that order.
    what: what --json prints; notice=False: a command without a first-compile notice for -s to hide; needs: the
    option --json applies with, if any."""
    json_help = f"Print {what} as JSON."
    if needs:
        json_help = f"With {needs}: p{json_help[1:]}"
    silent_help = f"No progress bar{' or first-compile notice' if notice else ''} on stderr."

    def decorate(fn):
        if silent:
            fn = click.option("-s", "--silent", is_flag=True, help=silent_help)(fn)
        return click.option("--json", "as_json", is_flag=True, help=json_help)(fn)

    return decorate


def report_problems(problems: list, as_json: bool, record: dict, ok_line: str) -> None:
    """A checking command's ending: the record with ok and problems as JSON, or a FAIL line a problem on stderr, or
    the OK line; exit 1 when there is a problem."""
    if as_json:
        echo_json(dict(record, ok=not problems, problems=problems))
    elif problems:
        for p in problems:
            click.echo(f"FAIL {p}", err=True)
    else:
        click.echo(ok_line)
    if problems:
        raise SystemExit(1)


def echo_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=_jsonable))


def _jsonable(x):
    import numpy as np

    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


class StderrProgress:
    """A `progress(done, total, phase)` callback drawing one bar per phase on stderr."""

    def __init__(self, silent: bool = False):
        self.silent = silent or not sys.stderr
        self._phase = None
        self._bar = None
        self._done = 0

    def __call__(self, done: int, total: int, phase: str) -> None:
        if self.silent:
            return
        if phase != self._phase:
            self.close()
            self._phase = phase
            self._bar = click.progressbar(length=max(int(total), 1), label=f"{phase:<14}", file=sys.stderr,
                                          show_eta=False, show_percent=True)
            self._bar.__enter__()
            self._done = 0
        step = int(done) - self._done
        if step > 0:
            self._bar.update(step)
            self._done = int(done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def cache_option(fn):
    """--cache DIR: where an artifact given as an object-store URL is downloaded to (docs/format.md)."""
    return click.option("--cache", type=click.Path(file_okay=False), default=None,
                        help="For an s3://... (object-store) artifact: local folder its versions are downloaded to "
                        "[default: $XDG_CACHE_HOME/gtmkit/artifacts].")(fn)
