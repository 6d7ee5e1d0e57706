"""A write stopped anywhere (an error or a signal raised at any point, as the command line turns Ctrl-C and SIGTERM
into) leaves the output path whole: the previous version, or nothing; never a pointer to a removed version or a
working folder left behind. And the command line's stop handler: the first stop unwinds, repeats wait for the
cleanup unless the first came long ago."""

from __future__ import annotations

import signal

import numpy as np
import pytest

from gtmkit import cli
from gtmkit.artifact import layout
from gtmkit.artifact.container import ArtifactWriter, open_artifact

FMT = "stop-test"


def _write(out, value, overwrite=False):
    with ArtifactWriter(out, FMT, 1, overwrite=overwrite) as w:
        w.add_array("a", np.full(4, value))
        w.commit({})


@pytest.mark.parametrize("previous", [False, True])
def test_a_stop_right_after_the_pointer_switch_keeps_the_new_version(tmp_path, monkeypatch, previous):
    out = tmp_path / "art"
    if previous:
        _write(out, 1)
    switch = layout.write_pointer

    def then_stop(root, name):
        switch(root, name)
        raise KeyboardInterrupt  # lands before the writer has marked itself published

    monkeypatch.setattr(layout, "write_pointer", then_stop)
    with pytest.raises(KeyboardInterrupt):
        _write(out, 2, overwrite=previous)
    monkeypatch.undo()
    art = open_artifact(out, FMT, [1])
    assert art.array("a").tolist() == [2] * 4
    assert not [p for p in out.iterdir() if layout.STAGING.fullmatch(p.name)]


@pytest.mark.parametrize("previous", [False, True])
def test_a_stop_before_the_pointer_switch_leaves_what_was_there(tmp_path, monkeypatch, previous):
    out = tmp_path / "art"
    if previous:
        _write(out, 1)

    def stop(root, name):
        raise KeyboardInterrupt

    monkeypatch.setattr(layout, "write_pointer", stop)
    with pytest.raises(KeyboardInterrupt):
        _write(out, 2, overwrite=previous)
    monkeypatch.undo()
    if previous:
        assert open_artifact(out, FMT, [1]).array("a").tolist() == [1] * 4
        assert [p.name for p in out.iterdir() if layout.VERSION.fullmatch(p.name)] == [layout.current(out).name]
    else:
        assert not out.exists()


@pytest.mark.parametrize("folder", ("shards", "subtrees"))
def test_working_folders_left_in_the_staging_directory_are_removed(tmp_path, folder):
    """A stop that cut a build's own removal of its working files short: the writer's abort removes them."""
    out = tmp_path / "art"
    with pytest.raises(KeyboardInterrupt):
        with ArtifactWriter(out, FMT, 1) as w:
            work = w.staging / folder / "shard-00000"
            work.mkdir(parents=True)
            np.save(work / "ids1_0.npy", np.arange(3))
            raise KeyboardInterrupt
    assert not out.exists()


def test_the_first_stop_unwinds_and_repeats_wait_unless_it_came_long_ago(monkeypatch):
    killed = []
    monkeypatch.setattr(cli.os, "kill", lambda pid, s: killed.append(s))
    monkeypatch.setattr(cli.signal, "signal", lambda s, h: None)
    monkeypatch.setitem(cli._stopped, "at", None)
    with pytest.raises(SystemExit) as e:
        cli._stop(signal.SIGTERM, None)
    assert e.value.code == 128 + signal.SIGTERM
    assert cli._stop(signal.SIGINT, None) is None and killed == []  # the cleanup runs on
    cli._stopped["at"] -= cli.FORCE_AFTER_S
    cli._stop(signal.SIGINT, None)
    assert killed == [signal.SIGINT]
    monkeypatch.setitem(cli._stopped, "at", None)
    with pytest.raises(KeyboardInterrupt):
        cli._stop(signal.SIGINT, None)
