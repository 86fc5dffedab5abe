"""Session-scoped fixtures: one SparkSession, real services started once per test session.

Tests live in packages mirroring the library's (core, bronze, silver, quality, offline, gold);
`pytest -m "not services"` runs those that need no Kafka, PostgreSQL or Connect, and
`pytest -m pure` the pure transform, expression and config tests (no table written).

In CI (CI=true) a service that cannot start fails the run; nothing is ever skipped there.

`./dev test` runs the suite in two pytest-xdist workers (`-n 2 --dist loadgroup`); each has its
own SparkSession and storage root. The modules in `SERIAL` run on one worker, one after another:
they share or change one service's state. The services are started by whichever worker needs
them first and stopped by the controller at the end when none ran before the session. Tests
marked `exclusive` need the machine and the services alone (the fault test restarts the broker
everyone shares): a distributed run leaves them out, and `./dev test` runs them afterwards in a
second pass, `pytest --exclusive only`."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from xdist import is_xdist_controller, is_xdist_worker
from xdist.scheduler import LoadGroupScheduling

from lakehouse.core.settings import Settings, load_settings
from lakehouse.devstack import pg


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root: Path = tmp_path_factory.mktemp("lake")
    return load_settings("test", overrides={"storage.root": str(root)})


@pytest.fixture(scope="session")
def spark(settings: Settings) -> Iterator[object]:
    from lakehouse.core.spark import build_session

    session = build_session(settings, "lakehouse-tests")
    yield session
    session.stop()


_SERVICES_WERE_UP = pytest.StashKey[bool]()

# Test module -> the group whose modules one worker runs in turn. (By module, in the scheduler:
# xdist's `xdist_group` marker groups nothing under pytest 9, whose node ids it cannot rewrite.)
SERIAL: dict[str, str] = {
    # Kafka Connect is one worker every Debezium test shares, and test_cdc_connect_kill kills it.
    **dict.fromkeys(
        [
            "tests/bronze/test_cdc.py",
            "tests/devstack/test_debezium_smoke.py",
            "tests/jobs/test_connectors.py",
            *[
                f"tests/silver/test_cdc_{name}.py"
                for name in (
                    "connect_kill",
                    "connect_zone",
                    "e2e",
                    "flattened",
                    "lost_checkpoint",
                    "partitioned",
                    "replay",
                    "snapshot_race",
                    "toast",
                    "truncate",
                    "types",
                )
            ],
            # The demo registers the shipped customers connector on that worker.
            "tests/jobs/test_notebooks.py",
            # Status prints every service's state; the next two start and stop the cluster, HDFS.
            "tests/jobs/test_status.py",
            "tests/jobs/test_airflow.py",
            "tests/core/test_remote_root.py",
        ],
        "stack",
    ),
    # Module-scoped fixtures build their tables once per worker: one worker, built once.
    "tests/quality/test_validate.py": "validate",
    "tests/bronze/test_protection.py": "protection",
}


class _ByModule(LoadGroupScheduling):  # type: ignore[misc]
    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return SERIAL.get(module) or str(super()._split_scope(nodeid))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` with the groups of `SERIAL`."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return _ByModule(config, log)


# Seconds spent per worker, per group (a `SERIAL` group, else `other`) and per module, and tests
# counted: where a distributed run's time goes, printed at its end (CI is to stay under an hour).
_BUSY: dict[str, list[float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # set by xdist on the controller's copy
    if node is None:
        return
    module = report.nodeid.split("::", 1)[0]
    group = SERIAL.get(module, "other")
    for key in (f"worker {node.gateway.id}", f"group {group}", f"module {module}"):
        busy = _BUSY.setdefault(key, [0.0, 0])
        busy[0] += report.duration
        busy[1] += report.when == "call"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _BUSY:
        terminalreporter.section("time per worker and group, and the 30 slowest modules")
        modules = sorted((k for k in _BUSY if k.startswith("module ")), key=lambda k: -_BUSY[k][0])
        for key in [*sorted(k for k in _BUSY if not k.startswith("module ")), *modules[:30]]:
            seconds, tests = _BUSY[key]
            terminalreporter.write_line(f"{key:<50} {seconds:8.0f} s  {int(tests):4d} tests")


def pytest_configure(config: pytest.Config) -> None:
    missing = [m for m in SERIAL if not (config.rootpath / m).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py SERIAL names missing modules: {missing}")


def services_up(settings: Settings) -> bool:
    from lakehouse.devstack import stack

    states = stack.status(settings)
    return any(states[name].startswith("running") for name in stack.SERVICES)


@pytest.fixture(scope="session")
def running_services(
    settings: Settings, request: pytest.FixtureRequest
) -> Iterator[dict[str, str]]:
    """Start Kafka, PostgreSQL and Kafka Connect unless already up; stop what we started (in a
    worker of a distributed run, the controller does: the other worker may still use them)."""
    from lakehouse.devstack import ServiceError, stack

    already_up = services_up(settings) or is_xdist_worker(request)
    try:
        stack.start_all(settings)
    except ServiceError as exc:
        if not already_up:
            stack.stop_all(settings)  # leave no half-started stack behind
        if in_ci():
            pytest.fail(f"services did not start in CI: {exc}", pytrace=False)
        pytest.skip(f"services unavailable (run ./dev test to start them): {exc}")
    try:
        yield stack.status(settings)
    finally:
        if not already_up:
            stack.stop_all(settings)


def pg_connect(settings: Settings) -> psycopg.Connection[Any]:
    return pg.connect(settings)


@pytest.fixture
def pg_table(running_services: dict[str, str], settings: Settings) -> Iterator[str]:
    """A fresh `public.<name>(id int PRIMARY KEY, name text NOT NULL)`, dropped afterwards."""
    table = f"t_{uuid.uuid4().hex[:8]}"
    with pg_connect(settings) as conn:
        conn.execute(f"CREATE TABLE public.{table} (id int PRIMARY KEY, name text NOT NULL)")
    yield table
    with pg_connect(settings) as conn:
        conn.execute(f"DROP TABLE IF EXISTS public.{table}")


@pytest.fixture(scope="session")
def kafka_up(running_services: dict[str, str], settings: Settings) -> Settings:
    return settings


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--exclusive",
        choices=("run", "skip", "only"),
        default="run",
        help="the tests marked exclusive: run them (default; left out by the workers of a "
        "distributed run), skip them, or run only them (./dev test's two passes)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that needs the real services (through `running_services`, directly or through
    `kafka_up` / `pg_table`) carries the `services` marker, so `-m "not services"` selects the
    tests that need only Spark and Delta. An `exclusive` test never shares the machine: a
    worker of a distributed run leaves it out (as `--exclusive skip` does), `--exclusive only`
    leaves out the rest."""
    mode = str(config.getoption("--exclusive"))
    if mode == "run" and hasattr(config, "workerinput"):
        mode = "skip"
    wanted = mode == "only"
    left_out = [
        item
        for item in items
        if mode != "run" and (item.get_closest_marker("exclusive") is not None) != wanted
    ]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]
    for item in items:
        if "running_services" in getattr(item, "fixturenames", ()):
            if item.get_closest_marker("pure"):
                raise pytest.UsageError(f"{item.nodeid} is marked pure but needs the services")
            item.add_marker(pytest.mark.services)


def pytest_sessionstart(session: pytest.Session) -> None:
    if is_xdist_controller(session):
        session.stash[_SERVICES_WERE_UP] = services_up(load_settings("test"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped test is a failed test: turn any skip into a failing exit status. The
    controller of a distributed run stops the services a worker started."""
    if is_xdist_controller(session) and not session.stash.get(_SERVICES_WERE_UP, True):
        from lakehouse.devstack import stack

        stack.stop_all(load_settings("test"))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if in_ci() and skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if reporter is not None:
            reporter.write_line(f"CI=true: {skipped} skipped test(s) count as failures", red=True)
