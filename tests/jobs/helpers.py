"""Jobs and the CLI as a scheduler runs them: subprocesses over a conf overlay."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from lakehouse.core.settings import Settings, project_root
from tests.bronze.helpers import short_lived


def conf_overlay(
    tmp_path: Path, extra: dict[str, object], devstack: bool = True, drop: tuple[str, ...] = ()
) -> Path:
    """A copy of `conf/` with `extra` as `conf/test/job.yml` (tables with expectations need a
    file: environment variables cannot carry lists); without the dev stack's `postgres` and
    `connect` sections when `devstack` is False, nor the entries `drop` names (`section.name`,
    e.g. `sources.lineitem`: an overlay can add and change entries, not remove them)."""
    conf = tmp_path / "conf"
    shutil.copytree(project_root() / "conf", conf, ignore=shutil.ignore_patterns("local"))
    removed = [*drop, *([] if devstack else ["postgres", "connect"])]
    found: set[str] = set()
    for base in sorted((conf / "base").glob("*.yml")):
        sections = yaml.safe_load(base.read_text())
        gone = _remove(sections, removed)
        if gone:
            found |= gone
            base.write_text(yaml.safe_dump(sections))
    assert found == set(removed), f"conf/base holds no {sorted(set(removed) - found)}"
    (conf / "test" / "job.yml").write_text(yaml.safe_dump(extra))
    return conf


def _remove(sections: dict[str, Any], removed: list[str]) -> set[str]:
    """Remove the `section` or `section.name` entries of `removed` these sections hold; the
    ones they held."""
    gone = set()
    for path in removed:
        section, _, name = path.partition(".")
        if not name and section in sections:
            del sections[section]
            gone.add(path)
        elif name and name in (sections.get(section) or {}):
            del sections[section][name]
            gone.add(path)
    return gone


def overlay_env(settings: Settings, conf: Path) -> dict[str, str]:
    """The environment of a job or CLI subprocess: the test's storage root and `conf`."""
    return {
        **os.environ,
        "LAKEHOUSE__STORAGE__ROOT": settings.storage.root,
        "LAKEHOUSE_CONF_DIR": str(conf),
    }


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`lakehouse --env test ARGS` as a user types it."""
    command = str(Path(sys.executable).parent / "lakehouse")
    return subprocess.run(
        [command, "--env", "test", *args],
        env=short_lived(env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command ends with (what a scheduler's alert shows)."""
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else ""
