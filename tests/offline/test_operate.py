"""The offline layer as operators and notebooks meet it: `lakehouse boundary`, `lakehouse
status`, the tables and views by name, and the backfill job's exit codes."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakehouse import cli
from lakehouse.cli import offline as cli_offline
from lakehouse.core.errors import EXIT_CONTRACT, EXIT_OK, EXIT_USAGE
from lakehouse.core.settings import Settings
from lakehouse.offline import boundary, hybrid
from lakehouse.offline.move import MoveOptions, realtime_to_offline
from lakehouse.status import offline_summary
from tests.bronze.helpers import run_job
from tests.offline.helpers import T0, offline_setup, order, upsert
from tests.offline.test_move import job_env

H = timedelta(hours=1)


@pytest.fixture
def moved(spark: SparkSession, settings: Settings) -> tuple[str, Settings]:
    offline, settings = offline_setup(spark, settings)
    upsert(spark, settings, offline, [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)])
    realtime_to_offline(spark, settings, MoveOptions(offline, T0 + 6 * H + timedelta(minutes=1)))
    return offline, settings


def run_cli(
    monkeypatch: pytest.MonkeyPatch, spark: SparkSession, settings: Settings, *argv: str
) -> int:
    """`lakehouse ...` in-process on the test session (the CLI's own session lifecycle would
    stop the shared one)."""

    def shared_session(_s: Settings, _name: str, body: Callable[[SparkSession], object]) -> None:
        body(spark)

    monkeypatch.setattr(cli, "load_settings", lambda env: settings)
    monkeypatch.setattr(cli_offline, "with_session", shared_session)
    return cli.main(["--env", "test", *argv])


def test_boundary_shows_history_and_is_set_by_hand_within_the_offline_data(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spark: SparkSession,
    moved: tuple[str, Settings],
) -> None:
    offline, settings = moved
    assert run_cli(monkeypatch, spark, settings, "boundary", offline) == EXIT_OK
    out = capsys.readouterr().out
    assert f"offline.{offline}: boundary 2026-01-01T06:00:00 (seq 1)" in out

    args = ("boundary", offline, "--set", "2026-01-01T02:00:00Z")
    assert run_cli(monkeypatch, spark, settings, *args) == EXIT_USAGE
    assert "--set needs --reason" in capsys.readouterr().err
    assert run_cli(monkeypatch, spark, settings, *args, "--reason", "audit") == EXIT_OK
    now = boundary.current(spark, settings, offline)
    assert now is not None
    assert (now.boundary, now.job, now.reason, now.previous) == (
        T0 + 2 * H,
        "lakehouse boundary",
        "audit",
        T0 + 6 * H,
    )
    # Served from realtime from 02:00 now: still every order, once.
    assert sorted(
        r["order_id"] for r in hybrid.read_hybrid(spark, settings, offline).collect()
    ) == [
        0,
        1,
        2,
        3,
    ]
    # Back up to where the offline data reaches is fine; past it, or off an edge, is not.
    later = ("boundary", offline, "--reason", "x", "--set")
    assert run_cli(monkeypatch, spark, settings, *later, "2026-01-01T06:00:00Z") == EXIT_OK
    assert run_cli(monkeypatch, spark, settings, *later, "2026-01-01T08:00:00Z") == EXIT_USAGE
    assert "is past the offline data (it ends at 2026-01-01T06:00:00)" in capsys.readouterr().err
    assert run_cli(monkeypatch, spark, settings, *later, "2026-01-01T05:00:00Z") == EXIT_USAGE
    assert "is not a bucket edge" in capsys.readouterr().err


def test_status_and_the_tables_by_name(spark: SparkSession, moved: tuple[str, Settings]) -> None:
    offline, settings = moved
    (row,) = offline_summary(spark, settings).where(f"table = 'offline.{offline}'").collect()
    # Buckets of 2 h: 00:00, 02:00 and 04:00 moved; order 3 (06:30) waits in the 06:00
    # bucket, closed by the clock (months later).
    assert (
        row["boundary"],
        row["buckets"],
        row["rows"],
        row["closed_buckets_waiting"],
        row["late_changes_pending"],
        row["late_changes_not_applied"],
    ) == (T0 + 6 * H, 3, 3, 1, 0, 0)

    # A change to moved order 1, a move in time of moved order 2 (04:30 -> 02:15: two
    # buckets touched, one change counted), a new order at 09:00 (another bucket waiting) and
    # a change to order 3 (still waiting: not late).
    changes = [
        order(1, T0 + 2.5 * H, "2.00"),
        order(2, T0 + 2.25 * H),
        order(7, T0 + 9 * H),
        order(3, T0 + 6.5 * H, "3.00"),
    ]
    upsert(spark, settings, offline, changes)
    (row,) = offline_summary(spark, settings).where(f"table = 'offline.{offline}'").collect()
    assert (row["closed_buckets_waiting"], row["late_changes_pending"]) == (2, 2)
    realtime_to_offline(spark, settings, MoveOptions(offline, T0 + 12 * H))
    (row,) = offline_summary(spark, settings).where(f"table = 'offline.{offline}'").collect()
    assert (row["boundary"], row["closed_buckets_waiting"], row["late_changes_pending"]) == (
        T0 + 10 * H,
        0,
        0,
    )
    assert row["late_buckets_moved_again"] == 2  # 02:00 and 04:00 (order 2 left it)
    names = hybrid.register_views(spark, settings)
    view = settings.offline_table(offline).view
    assert f"offline.{offline}" in names
    assert f"silver.{view}" in names
    assert spark.sql(f"SELECT count(*) FROM silver.{view}").collect()[0][0] == 5
    assert spark.sql(f"SELECT count(*) FROM offline.{offline}").collect()[0][0] == 5


def test_the_backfill_job_exits_5_naming_the_problem_and_2_for_an_open_window(
    spark: SparkSession, moved: tuple[str, Settings], tmp_path: Path
) -> None:
    offline, settings = moved
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(
            {
                "order_id": 9,
                "customer_id": 1,
                "order_status": "paid",
                "amount": "1",
                "ts": order(9, T0 + 5 * H)[4],
            }
        )
        + "\n"
    )
    env = job_env(settings, offline, tmp_path)
    base = ["--table", offline, "--input", str(bad), "--from", "2026-01-01T00:00Z"]
    done = run_job("backfill", [*base, "--to", "2026-01-01T02:00Z"], env)
    assert done.returncode == EXIT_CONTRACT, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"backfill: backfill of offline.{offline} refused, nothing written: ")
    assert "records outside the window" in last

    done = run_job("backfill", [*base, "--to", "2099-01-01T00:00Z"], env)
    assert done.returncode == EXIT_USAGE
    assert "is not closed yet: it closes at 2099-01-01T00:01:00" in done.stderr


def test_a_table_that_cannot_be_read_is_skipped_with_a_warning_and_the_rest_register(
    spark: SparkSession, settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = replace(settings, storage=replace(settings.storage, root=str(tmp_path / "lake")))
    readable, unreadable = "good_t", "future_t"
    for name in (readable, unreadable):
        spark.range(3).write.format("delta").save(settings.storage.path("bronze", name))
    # A newer Delta Lake's commit: a reader feature this one does not know.
    log = Path(settings.storage.path("bronze", unreadable)) / "_delta_log"
    (log / f"{1:020d}.json").write_text(
        '{"commitInfo": {"timestamp": 1, "operation": "UPGRADE PROTOCOL"}}\n'
        '{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, '
        '"readerFeatures": ["futureFeature"], "writerFeatures": ["futureFeature"]}}\n'
    )
    spark.sql(f"DROP TABLE IF EXISTS bronze.{unreadable}")

    with caplog.at_level(logging.WARNING, logger="lakehouse.offline.hybrid"):
        names = hybrid.register_views(spark, settings)

    assert names == [f"bronze.{readable}"]
    assert spark.sql(f"SELECT count(*) FROM bronze.{readable}").collect()[0][0] == 3
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(
        f"bronze.{unreadable} not registered: a Delta table needs a newer Delta Lake"
    ), warning
