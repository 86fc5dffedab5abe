"""A move and a backfill that run at the same time never undo the backfill: whatever the order
in which their steps interleave, the backfilled window holds the backfill's rows afterwards,
every other bucket the realtime table's, and the hybrid view shows exactly that.

The interleavings are forced in one process: the backfill runs to completion after the move
decided which buckets a backfill owns, either before the move looks again right before its
write or at the moment it writes. (The continuous
pipeline's fault test found this race with real jobs; timing cannot hit it reliably.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core import faults, tables
from lakehouse.core.settings import Settings
from lakehouse.offline import audit, boundary, gap, store
from lakehouse.offline import backfill as backfill_module
from lakehouse.offline import move as move_module
from lakehouse.offline.backfill import backfill
from lakehouse.offline.move import MoveOptions, MoveResult, realtime_to_offline
from tests.offline.helpers import T0, frame, offline_setup, order, upsert
from tests.offline.races import (
    COLUMNS,
    FIXED,
    NOW,
    SECOND,
    WINDOW,
    H,
    Killed,
    backfill_when_the_move_writes,
    check,
    check_offline,
    epoch_ms,
    expected,
    kill,
    second_backfill,
    start_backfill,
)


def test_a_first_move_planned_before_a_backfill_leaves_the_backfilled_window_alone(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]  # one per 2h bucket
    upsert(spark, settings, offline, orders)
    writes = backfill_when_the_move_writes(
        monkeypatch, start_backfill(spark, settings, offline, tmp_path)
    )

    result = realtime_to_offline(spark, settings, MoveOptions(offline, NOW))

    assert [writes[0], writes[2]] == ["backfill, forced in", f"realtime_to_offline:{offline}"]
    # The backfill's own transaction: its input's hash and its window.
    own = rf"backfill:{offline}:[0-9a-f]{{16}}:20260101T020000-20260101T040000"
    assert re.fullmatch(own, writes[1]), writes[1]
    assert writes[3:] == [f"realtime_to_offline:{offline}:restore"]  # the backfill put back
    assert result.restored == {WINDOW[0]}
    check(spark, settings, offline, expected(orders))
    after = boundary.current(spark, settings, offline)
    assert after is not None
    assert after.boundary == T0 + 8 * H
    assert result.boundary_after == T0 + 8 * H


def test_a_late_change_moved_again_while_a_backfill_replaces_its_bucket_leaves_the_backfill(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
    late = order(1, T0 + 2.75 * H, "99.00")  # a late change to the window's bucket
    upsert(spark, settings, offline, [late])
    writes = backfill_when_the_move_writes(
        monkeypatch, start_backfill(spark, settings, offline, tmp_path)
    )

    result = realtime_to_offline(spark, settings, MoveOptions(offline, NOW))

    assert result.plan is not None
    assert result.plan.late == [WINDOW[0].isoformat()]
    assert writes[0] == "backfill, forced in"
    assert result.restored == {WINDOW[0]}
    check(spark, settings, offline, expected([orders[0], late, *orders[2:]]))


def test_a_backfill_committed_between_the_moves_plan_and_its_write_is_left_out_of_the_write(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The move looks again right before it writes: no offline version after the backfill's
    commit ever holds the window's realtime rows (no restore needed)."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    run_backfill = start_backfill(spark, settings, offline, tmp_path)
    real_execute = move_module._execute
    path = store.offline_path(settings, offline)
    backfilled: list[int] = []  # the offline version right after the backfill

    def planned_then_backfilled(*args: Any) -> None:
        run_backfill()  # the plan is recorded; the move has not written yet
        backfilled.append(tables.latest_version(spark, path))
        real_execute(*args)

    monkeypatch.setattr(move_module, "_execute", planned_then_backfilled)
    writes: list[str] = []
    real_write = store.replace_where

    def tracked(rows: DataFrame, path: str, where: str, app_id: str, *more: Any) -> None:
        writes.append(app_id.split(":")[0] + (":restore" if app_id.endswith(":restore") else ""))
        real_write(rows, path, where, app_id, *more)

    monkeypatch.setattr(store, "replace_where", tracked)

    result = realtime_to_offline(spark, settings, MoveOptions(offline, NOW))

    assert writes == ["backfill", "realtime_to_offline"]
    assert result.restored == set()
    start, end = (epoch_ms(w) for w in WINDOW)
    versions = range(backfilled[0], tables.latest_version(spark, path) + 1)
    assert len(versions) == 2  # the backfill's commit and the move's
    for version in versions:
        rows = spark.read.format("delta").option("versionAsOf", version).load(path)
        in_window = rows.where(f"ts >= {start} AND ts < {end}").select(*COLUMNS)
        assert_df_equality(in_window, frame(spark, FIXED), ignore_row_order=True)
    check(spark, settings, offline, expected(orders))


def test_a_move_killed_between_its_commit_and_the_restore_puts_the_backfill_back_on_resume(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill commits while the move writes; the move dies right after its own commit,
    before the restore: its resume still puts the backfill back (the backfill is now older
    than the move's look before writing, which must not count it as left out)."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    writes = backfill_when_the_move_writes(
        monkeypatch, start_backfill(spark, settings, offline, tmp_path)
    )
    forced = store.replace_where

    def killed_at_restore(rows: DataFrame, path: str, where: str, app_id: str, *more: Any) -> None:
        if app_id.endswith(":restore"):
            raise Killed
        forced(rows, path, where, app_id, *more)

    monkeypatch.setattr(store, "replace_where", killed_at_restore)
    with pytest.raises(Killed):
        realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
    assert writes[0] == "backfill, forced in"
    monkeypatch.undo()

    result = realtime_to_offline(spark, settings, MoveOptions(offline, NOW))

    assert result.resumed
    assert result.restored == {WINDOW[0]}
    check(spark, settings, offline, expected(orders))


def test_a_move_that_left_a_backfill_out_and_was_killed_after_its_commit_keeps_it_on_resume(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill commits between the move's plan and its write, the write leaves the window
    out, the move dies right after its commit: the resume cannot tell that the window was left
    out, rewrites it as it was just before the move's commit, and the backfill's rows stay."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    run_backfill = start_backfill(spark, settings, offline, tmp_path)
    real_execute = move_module._execute
    backfilled: list[bool] = []

    def planned_then_backfilled(*args: Any) -> None:
        run_backfill()
        backfilled.append(True)
        real_execute(*args)

    def die_after_commit(name: str) -> None:
        if name == "after_offline_commit" and backfilled:  # the move's, not the backfill's
            raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(move_module, "_execute", planned_then_backfilled)
        patch.setattr(faults, "point", die_after_commit)
        with pytest.raises(Killed):
            realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
    check_offline(spark, settings, offline, expected(orders))

    result = realtime_to_offline(spark, settings, MoveOptions(offline, NOW))

    assert result.resumed
    assert result.restored == {WINDOW[0]}  # rewritten with the rows it already held
    check(spark, settings, offline, expected(orders))


def test_a_backfill_stopped_before_its_commit_owns_nothing_and_one_stopped_after_owns_its_window(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after announcing its window, before its commit: the move goes on as if there
    were no backfill (no gap in the view). Killed after its commit, before its record: the
    window is the backfill's, and the move leaves it so."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    with monkeypatch.context() as patch:
        patch.setattr(store, "replace_where", kill)
        with pytest.raises(Killed):
            start_backfill(spark, settings, offline, tmp_path)()
    assert audit.owned_buckets(spark, settings, offline, 2 * 3600) == set()
    realtime_to_offline(spark, settings, MoveOptions(offline, NOW - 4 * H))  # [00:00, 04:00)
    check_offline(spark, settings, offline, orders[:2])

    with monkeypatch.context() as patch:
        patch.setattr(backfill_module, "_record", kill)
        with pytest.raises(Killed):
            start_backfill(spark, settings, offline, tmp_path)()
    assert audit.owned_buckets(spark, settings, offline, 2 * 3600) == {WINDOW[0]}
    late = order(1, T0 + 2.75 * H, "99.00")  # a late change to the backfilled bucket
    upsert(spark, settings, offline, [late])
    result = realtime_to_offline(spark, settings, MoveOptions(offline, NOW))

    assert result.plan is not None
    assert result.plan.ignored == {WINDOW[0].isoformat(): 1}
    check(spark, settings, offline, expected(orders))


def test_a_backfill_killed_after_its_commit_under_an_older_version_keeps_its_window_after_the_upgrade(  # noqa: E501
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An offline log written before announcements recorded the buckets owned through an
    offline version (no `owned`, no `owned_through`): a backfill killed after its commit,
    before its record, owns its window all the same (found from its commit in the offline
    table's log), and the first announcement written since carries it on."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    real_record = audit.record_move

    def as_before_the_upgrade(
        spark: SparkSession, settings: Settings, event: str, table: str, details: dict[str, Any]
    ) -> None:
        older = {k: v for k, v in details.items() if k not in ("owned", audit.OWNED_THROUGH)}
        real_record(spark, settings, event, table, older)

    with monkeypatch.context() as patch:
        patch.setattr(audit, "record_move", as_before_the_upgrade)
        patch.setattr(backfill_module, "_record", kill)
        with pytest.raises(Killed):
            start_backfill(spark, settings, offline, tmp_path)()
    assert audit.owned_buckets(spark, settings, offline, 2 * 3600) == {WINDOW[0]}

    # After the upgrade: a backfill of the first one's gap, [00:00, 02:00), applied whole.
    backfill(spark, settings, second_backfill(offline, tmp_path))
    assert audit.owned_buckets(spark, settings, offline, 2 * 3600) == {T0, WINDOW[0]}
    realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
    check(spark, settings, offline, [*SECOND, *FIXED, *orders[2:]])


def test_a_move_that_advances_the_boundary_while_a_backfill_runs_is_never_moved_back(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill read no boundary at its start; a whole move commits (boundary 08:00)
    before the backfill's own write. The backfill's window ends at 04:00: setting the
    boundary there would take it back over four moved hours (the fault test caught this)."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    moves: list[object] = []
    real = store.replace_where

    def moved_first(rows: DataFrame, path: str, where: str, app_id: str, *more: Any) -> None:
        if app_id.startswith("backfill") and not moves:
            moves.append(realtime_to_offline(spark, settings, MoveOptions(offline, NOW)))
        real(rows, path, where, app_id, *more)

    monkeypatch.setattr(store, "replace_where", moved_first)

    report = start_backfill(spark, settings, offline, tmp_path)()

    assert len(moves) == 1
    assert (report.status, report.boundary_before, report.boundary_after) == (
        "applied",
        None,
        T0 + 8 * H,
    )
    history = boundary.history(spark, settings, offline).orderBy("seq").collect()
    assert [(r["seq"], r["boundary"], r["job"]) for r in history] == [
        (1, T0 + 8 * H, "realtime_to_offline")
    ]
    check(spark, settings, offline, expected(orders))


@pytest.mark.parametrize("killed", [False, True], ids=["whole", "killed_after_its_commit"])
def test_a_move_that_commits_the_gap_while_a_backfill_runs_keeps_its_newer_rows(
    spark: SparkSession,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    killed: bool,
) -> None:
    """The backfill's window starts after the boundary (none yet), so its commit also moves the
    gap [00:00, 02:00) from the realtime version it read. Before that commit, order 0 changes
    and a whole move commits it (boundary 08:00). The backfill's older copy of the gap must not
    replace the move's rows: the next move reads changes only since its own version, so a stale
    row would stay in the view for good. Killed right after its commit, the backfill's rerun
    (whose write Delta skips as done) still puts the move's rows back."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    changed = order(0, T0 + 0.75 * H, "99.00")
    moves: list[object] = []
    real = store.replace_where

    def moved_first(rows: DataFrame, path: str, where: str, app_id: str, *more: Any) -> None:
        if app_id.startswith("backfill") and not moves:
            upsert(spark, settings, offline, [changed])
            moves.append(realtime_to_offline(spark, settings, MoveOptions(offline, NOW)))
        real(rows, path, where, app_id, *more)

    monkeypatch.setattr(store, "replace_where", moved_first)
    run_backfill = start_backfill(spark, settings, offline, tmp_path)
    if killed:
        with monkeypatch.context() as patch:
            patch.setattr(gap, "keep_moved", kill)
            with pytest.raises(Killed):
                run_backfill()

    report = run_backfill()

    assert (len(moves), report.status) == (1, "applied")
    # The rerun found the boundary at 08:00 (no gap of its own) and its commit already done.
    gap_then_kept = ([], [T0]) if killed else ([T0], [T0])
    assert (report.gap, report.kept_moved) == gap_then_kept
    check(spark, settings, offline, expected([changed, *orders[1:]]))
    # And it stays so: the next move finds nothing changed since its own.
    realtime_to_offline(spark, settings, MoveOptions(offline, NOW + H))
    check(spark, settings, offline, expected([changed, *orders[1:]]))


def test_a_move_that_reads_past_a_backfills_gap_without_writing_it_leaves_no_stale_row(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill (no boundary yet) reads the gap [00:00, 02:00) at its start. Before its
    commit order 0 changes and a move runs whose clock (00:30) is behind the backfill's: no
    bucket has closed, so its commit replaces none, yet it reads the realtime table past the
    change. The backfill then commits the gap's older copy, and the next move would find no
    change since its predecessor's: it moves the backfill's gap again instead."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    changed = order(0, T0 + 0.75 * H, "99.00")
    early: list[MoveResult] = []
    changed_at: list[int] = []  # the realtime version with the change
    rt_path = store.realtime_path(settings, settings.offline_table(offline))
    real = store.replace_where

    def moved_first(rows: DataFrame, path: str, where: str, app_id: str, *more: Any) -> None:
        if app_id.startswith("backfill") and not early:
            upsert(spark, settings, offline, [changed])
            changed_at.append(tables.latest_version(spark, rt_path))
            at = T0 + 0.5 * H
            early.append(realtime_to_offline(spark, settings, MoveOptions(offline, at)))
        real(rows, path, where, app_id, *more)

    monkeypatch.setattr(store, "replace_where", moved_first)
    report = start_backfill(spark, settings, offline, tmp_path)()
    monkeypatch.undo()

    assert (len(early), early[0].rows, report.gap, report.kept_moved) == (1, {}, [T0], [])
    assert early[0].plan is not None
    assert early[0].plan.realtime_version == changed_at[0]  # it read past the change
    check_offline(spark, settings, offline, [orders[0], *FIXED])  # the gap's older copy
    result = realtime_to_offline(spark, settings, MoveOptions(offline, NOW + H))

    check(spark, settings, offline, expected([changed, *orders[1:]]))
    assert result.plan is not None
    assert (result.plan.late, result.plan.regap) == ([], [T0.isoformat()])
