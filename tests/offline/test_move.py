"""realtime_to_offline against real Delta tables: closed buckets move, the boundary follows,
late changes move again, re-runs and crashes commit nothing twice; the hybrid view equals a
model of the orders at every step."""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core import tables
from lakehouse.core.faults import FAULT_ENV
from lakehouse.core.settings import Settings, project_root
from lakehouse.offline import audit, boundary, hybrid, store
from lakehouse.offline import move as move_module
from lakehouse.offline.changes import UnreadableTimeError
from lakehouse.offline.move import MoveOptions, realtime_to_offline
from tests.bronze.helpers import run_job
from tests.offline.helpers import (
    ORDER_COLUMNS,
    T0,
    Order,
    delete,
    frame,
    offline_rows,
    offline_setup,
    order,
    upsert,
)

H = timedelta(hours=1)


def move(spark: SparkSession, settings: Settings, offline: str, now: datetime) -> None:
    realtime_to_offline(spark, settings, MoveOptions(offline, now))


def assert_hybrid(
    spark: SparkSession, settings: Settings, offline: str, model: list[Order]
) -> None:
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, model),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def buckets_of(spark: SparkSession, settings: Settings, offline: str) -> dict[datetime, list[int]]:
    rows = offline_rows(spark, settings, offline).select("order_id", store.BUCKET).collect()
    result: dict[datetime, list[int]] = {}
    for r in rows:
        result.setdefault(r[store.BUCKET], []).append(r["order_id"])
    return {b: sorted(ids) for b, ids in result.items()}


def boundaries(spark: SparkSession, settings: Settings, offline: str) -> list[datetime]:
    history = boundary.history(spark, settings, offline).orderBy("seq").collect()
    return [r["boundary"] for r in history]


def test_closed_buckets_move_and_the_boundary_follows(
    spark: SparkSession, settings: Settings
) -> None:
    offline, settings = offline_setup(spark, settings)
    orders = [
        order(1, T0 + timedelta(minutes=30)),
        order(2, T0 + 2 * H - timedelta(milliseconds=1)),  # the last instant of [00:00, 02:00)
        order(3, T0 + 2 * H),  # exactly on the edge: the next bucket
        order(4, T0 + 3.5 * H),
        order(5, T0 + 4.5 * H),
    ]
    upsert(spark, settings, offline, orders)
    assert_hybrid(spark, settings, offline, orders)  # nothing offline yet: all realtime

    # 04:00:30 with a 1 minute buffer: [02:00, 04:00) closes at 04:01, so only [00:00, 02:00).
    move(spark, settings, offline, T0 + 4 * H + timedelta(seconds=30))
    assert buckets_of(spark, settings, offline) == {T0: [1, 2]}
    assert boundaries(spark, settings, offline) == [T0 + 2 * H]
    assert_hybrid(spark, settings, offline, orders)

    move(spark, settings, offline, T0 + 4 * H + timedelta(minutes=1))
    assert buckets_of(spark, settings, offline) == {T0: [1, 2], T0 + 2 * H: [3, 4]}
    assert boundaries(spark, settings, offline) == [T0 + 2 * H, T0 + 4 * H]
    assert_hybrid(spark, settings, offline, orders)

    # A re-run with nothing new commits nothing.
    version = tables.latest_version(spark, store.offline_path(settings, offline))
    move(spark, settings, offline, T0 + 4 * H + timedelta(minutes=1))
    assert tables.latest_version(spark, store.offline_path(settings, offline)) == version
    assert boundaries(spark, settings, offline) == [T0 + 2 * H, T0 + 4 * H]

    # An empty bucket [06:00, 08:00) closes like any other: the boundary passes it.
    move(spark, settings, offline, T0 + 8 * H + timedelta(minutes=1))
    assert buckets_of(spark, settings, offline) == {
        T0: [1, 2],
        T0 + 2 * H: [3, 4],
        T0 + 4 * H: [5],
    }
    assert boundaries(spark, settings, offline)[-1] == T0 + 8 * H
    assert_hybrid(spark, settings, offline, orders)


def test_late_changes_to_moved_buckets_move_again(spark: SparkSession, settings: Settings) -> None:
    offline, settings = offline_setup(spark, settings)
    first = [order(1, T0 + 0.5 * H), order(2, T0 + H), order(3, T0 + 2.5 * H)]
    upsert(spark, settings, offline, first)
    now = T0 + 4 * H + timedelta(minutes=5)
    move(spark, settings, offline, now)
    assert buckets_of(spark, settings, offline) == {T0: [1, 2], T0 + 2 * H: [3]}

    # Late: order 1 re-priced, order 2 deleted, order 4 arrives for [00:00, 02:00), order 3
    # moves from [02:00, 04:00) to [00:00, 02:00).
    repriced, moved_back, late = (
        order(1, T0 + 0.5 * H, "99.00"),
        order(3, T0 + 1.5 * H),
        order(4, T0 + 0.25 * H),
    )
    upsert(spark, settings, offline, [repriced, moved_back, late])
    delete(spark, settings, offline, [2])
    # Until the next move the view serves what was moved (a consistent, older state).
    assert_hybrid(spark, settings, offline, first)

    move(spark, settings, offline, now)
    assert buckets_of(spark, settings, offline) == {T0: [1, 3, 4]}
    assert_hybrid(spark, settings, offline, [repriced, moved_back, late])
    (last,) = [e for e in audit.move_events(spark, settings, offline) if e["event"] == "moved"][-1:]
    assert sorted(last["late"]) == [T0.isoformat(), (T0 + 2 * H).isoformat()]


def test_unreadable_time_stops_the_move_naming_table_and_column(
    spark: SparkSession, settings: Settings
) -> None:
    offline, settings = offline_setup(spark, settings)
    upsert(spark, settings, offline, [order(1, T0)])
    bad: Order = (2, 1, "paid", Decimal("1.00"), None)  # type: ignore[assignment]
    upsert(spark, settings, offline, [bad])
    with pytest.raises(UnreadableTimeError) as err:
        move(spark, settings, offline, T0 + 4 * H)
    assert str(err.value).startswith(
        f"offline.{offline}: 1 live row(s) of silver.{settings.offline_table(offline).realtime} "
        "have a ts that cannot be read as epoch_ms"
    )
    assert boundary.current(spark, settings, offline) is None
    # The row stays visible in the view (realtime side), never silently dropped.
    assert_hybrid(spark, settings, offline, [order(1, T0), bad])


def job_env(settings: Settings, offline: str, tmp_path: Path) -> dict[str, str]:
    """A conf overlay declaring the test's tables, for the job as a subprocess."""
    conf = tmp_path / "conf"
    shutil.copytree(project_root() / "conf", conf, ignore=shutil.ignore_patterns("local"))
    spec = settings.offline_table(offline)
    realtime = settings.silver_table(spec.realtime)
    (conf / "test" / "offline_job.yml").write_text(
        yaml.safe_dump(
            {
                "sources": {"unused": {"kind": "events", "topics": ["unused"]}},
                "silver": {
                    spec.realtime: {
                        "source": "unused",
                        "mode": realtime.mode,
                        "schema": ORDER_COLUMNS,
                        "keys": list(realtime.keys),
                        "sequence_by": realtime.sequence_by,
                    }
                },
                "offline": {
                    offline: {
                        "realtime": spec.realtime,
                        "time_column": spec.time_column,
                        "bucket": spec.bucket,
                        "buffer": spec.buffer,
                    }
                },
            }
        )
    )
    env = dict(os.environ)
    env.update({"LAKEHOUSE__STORAGE__ROOT": settings.storage.root, "LAKEHOUSE_CONF_DIR": str(conf)})
    return env


def test_crashes_between_commits_then_a_rerun_end_as_one_uninterrupted_run(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    orders = [order(1, T0 + 0.5 * H), order(2, T0 + 2.5 * H), order(3, T0 + 5 * H)]
    crashed, settings = offline_setup(spark, settings)
    upsert(spark, settings, crashed, orders)
    twin, settings = offline_setup(spark, settings)
    upsert(spark, settings, twin, orders)
    at = T0 + 4 * H + timedelta(minutes=1)
    now = at.isoformat()

    env = job_env(settings, crashed, tmp_path)
    # The first run dies after the offline commit; the second resumes the move and dies after
    # the boundary's; the third finishes it.
    for fault in ("after_offline_commit", "after_boundary_commit"):
        done = run_job(
            "realtime_to_offline", ["--table", crashed, "--now", now], {**env, FAULT_ENV: fault}
        )
        assert done.returncode == -9, f"{fault}: {done.stderr[-2000:]}"
        # Mid-crash the view is one consistent state: the same rows.
        assert_hybrid(spark, settings, crashed, orders)
    # The rerun reads only what the killed runs left on disk: in this JVM (a job's exit and
    # output after a crash are test_console's and test_exit_codes' subject).
    rerun = realtime_to_offline(spark, settings, MoveOptions(crashed, at))
    assert (rerun.resumed, rerun.boundary_after) == (True, T0 + 4 * H)

    move(spark, settings, twin, at)
    columns = [c for c in offline_rows(spark, settings, twin).columns]
    assert_df_equality(
        offline_rows(spark, settings, crashed).select(*columns),
        offline_rows(spark, settings, twin).select(*columns),
        ignore_row_order=True,
    )
    assert boundaries(spark, settings, crashed) == boundaries(spark, settings, twin) == [T0 + 4 * H]
    assert_hybrid(spark, settings, crashed, orders)
    writes = [
        r["operation"]
        for r in tables_history(spark, store.offline_path(settings, crashed))
        if r["operation"] == "WRITE"
    ]
    assert len(writes) == 1  # the rerun committed the move's data once, not twice


def test_the_job_on_a_host_outside_utc_moves_the_buckets_and_boundary_it_moves_in_utc(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    """PySpark turns a naive datetime into a TIMESTAMP and back in its process's local zone;
    the lakehouse's datetimes are naive UTC. A host in New York (`TZ`) changes nothing."""
    orders = [order(1, T0 + 0.5 * H), order(2, T0 + 2.5 * H), order(3, T0 + 5 * H)]
    offline, settings = offline_setup(spark, settings)
    upsert(spark, settings, offline, orders)
    env = {**job_env(settings, offline, tmp_path), "TZ": "America/New_York"}
    now = (T0 + 4 * H + timedelta(minutes=1)).isoformat()
    done = run_job("realtime_to_offline", ["--table", offline, "--now", now], env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert buckets_of(spark, settings, offline) == {T0: [1], T0 + 2 * H: [2]}
    assert boundaries(spark, settings, offline) == [T0 + 4 * H]
    assert_hybrid(spark, settings, offline, orders)


def tables_history(spark: SparkSession, path: str) -> list[dict[str, object]]:
    from delta.tables import DeltaTable

    return [r.asDict() for r in DeltaTable.forPath(spark, path).history().collect()]


def test_racing_boundary_writers_each_get_their_own_sequence_number(
    spark: SparkSession, settings: Settings
) -> None:
    """Two writers moving one table's boundary at once: one of the MERGEs conflicts in Delta
    and retries with the next number, instead of both landing on the same one."""
    import threading

    offline, settings = offline_setup(spark, settings)
    errors: list[BaseException] = []

    def write(at: datetime) -> None:
        try:
            # Backward allowed, as by hand: every writer lands a row whatever the order (a
            # job's forward-only move is test_races' subject).
            boundary.move(spark, settings, offline, at, "test", "race", 0, forward_only=False)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(T0 + (i + 1) * 2 * H,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    seqs = [r["seq"] for r in boundary.history(spark, settings, offline).collect()]
    assert sorted(seqs) == [1, 2, 3]


class Killed(Exception):
    pass


def test_a_run_after_a_crash_finishes_the_unfinished_move_then_moves_what_changed_since(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The killed move's plan fixed its realtime version; a late change and a new order came
    after. One available-now run leaves nothing closed behind: it finishes the plan, then
    moves the rest (the fault test's drain found the late change still unmoved)."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(1, T0 + 0.5 * H), order(2, T0 + 2.5 * H)]
    upsert(spark, settings, offline, orders)
    now = T0 + 4 * H + timedelta(minutes=1)

    def killed(*_: object, **__: object) -> None:
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(boundary, "move", killed)  # dies after its offline commit
        with pytest.raises(Killed):
            realtime_to_offline(spark, settings, MoveOptions(offline, now))
    late, new = order(1, T0 + 1.5 * H, "99.00"), order(3, T0 + 3 * H)
    upsert(spark, settings, offline, [late, new])

    move_module.run(spark, settings, MoveOptions(offline, now))

    expected = frame(spark, [late, orders[1], new])
    assert_df_equality(
        offline_rows(spark, settings, offline).select(*expected.columns),
        expected,
        ignore_row_order=True,
    )
    assert boundaries(spark, settings, offline) == [T0 + 4 * H]
