"""The driver's console configuration lives where only this user can write: the JVM acts on
what a log4j configuration says, so another user must not be able to put one there first."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from lakehouse.core.driver import log4j_options

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`


def configured_file(verbose: bool) -> Path:
    option = log4j_options(verbose)
    return Path(option.split("file:", 1)[1])


def test_the_log4j_configuration_is_in_a_directory_only_this_user_can_write(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    quiet, verbose = configured_file(False), configured_file(True)

    assert quiet.parent == verbose.parent == tmp_path / f"lakehouse-{os.getuid()}"
    info = quiet.parent.lstat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (os.getuid(), 0o700)
    assert "rootLogger.level = warn" in quiet.read_text()
    assert "rootLogger.level = info" in verbose.read_text()


def test_a_planted_directory_is_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / f"lakehouse-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # anyone may write here: not ours to trust

    used = configured_file(False)

    assert used.parent != planted
    assert used.parent.parent == tmp_path
    assert stat.S_IMODE(used.parent.lstat().st_mode) == 0o700
    assert list(planted.iterdir()) == []
