"""A move and a backfill that run at the same time never undo the backfill: whatever the order
in which their steps interleave, the backfilled window holds the backfill's rows afterwards,
every other bucket the realtime table's, and the hybrid view shows exactly that.

The interleavings are forced in one process: the backfill runs to completion after the move
decided which buckets a backfill owns, either before the move looks again right before its
write or at the moment it writes. (The continuous
pipeline's fault test found this race with real jobs; timing cannot hit it reliably.)"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core import faults, tables
from lakehouse.core.settings import Settings
from lakehouse.offline import audit, boundary, gap, hybrid, store
from lakehouse.offline import backfill as backfill_module
from lakehouse.offline import move as move_module
from lakehouse.offline.backfill import BackfillOptions, backfill
from lakehouse.offline.move import MoveOptions, MoveResult, realtime_to_offline
from tests.offline.helpers import T0, Order, frame, offline_rows, offline_setup, order, upsert
from tests.offline.test_backfill import write_jsonl

H = timedelta(hours=1)
NOW = T0 + 8 * H + timedelta(minutes=1)  # [00:00, 08:00) closed
WINDOW = (T0 + 2 * H, T0 + 4 * H)
FIXED = [order(1, T0 + 2.5 * H, "12.34"), order(10, T0 + 3 * H, "5.00")]

Orders = list[Order]
COLUMNS = ["order_id", "customer_id", "order_status", "amount", "ts", "_rescued_data"]


def backfill_when_the_move_writes(
    monkeypatch: pytest.MonkeyPatch, run_backfill: Callable[[], Any]
) -> list[str]:
    """Make the move's first offline write wait for a whole backfill; returns the app ids of
    every offline write, in order."""
    real = store.replace_where
    writes: list[str] = []

    def interleaved(
        rows: DataFrame, path: str, where: str, app_id: str, version: int, *more: Any
    ) -> None:
        if app_id.startswith("realtime_to_offline") and not writes:
            writes.append("backfill, forced in")
            run_backfill()
        writes.append(app_id)
        real(rows, path, where, app_id, version, *more)

    monkeypatch.setattr(store, "replace_where", interleaved)
    return writes


def epoch_ms(at: datetime) -> int:
    return int((at - datetime(1970, 1, 1)).total_seconds() * 1000)


def expected(orders: Orders) -> Orders:
    """The realtime rows, with the window's replaced by the backfill's."""
    start, end = (epoch_ms(w) for w in WINDOW)
    return [o for o in orders if not start <= o[4] < end] + FIXED


def check_offline(spark: SparkSession, settings: Settings, offline: str, rows: Orders) -> None:
    assert_df_equality(
        offline_rows(spark, settings, offline).select(*COLUMNS),
        frame(spark, rows),
        ignore_row_order=True,
    )


def check(spark: SparkSession, settings: Settings, offline: str, rows: Orders) -> None:
    """The offline table and the whole hybrid view hold `rows`."""
    check_offline(spark, settings, offline, rows)
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, rows),
        ignore_row_order=True,
    )


def start_backfill(
    spark: SparkSession, settings: Settings, offline: str, tmp_path: Path
) -> Callable[[], Any]:
    path = write_jsonl(tmp_path / "fix.jsonl", FIXED)
    options = BackfillOptions(offline, path, *WINDOW, now=NOW, reason="race")
    return lambda: backfill(spark, settings, options)


# A second backfill, of the first one's gap [00:00, 02:00): order 0 corrected, order 20 added.
SECOND = [order(0, T0 + 0.75 * H, "55.00"), order(20, T0 + 1.5 * H, "1.00")]


def second_backfill(offline: str, tmp_path: Path, reason: str = "") -> BackfillOptions:
    path = write_jsonl(tmp_path / "second.jsonl", SECOND)
    return BackfillOptions(offline, path, T0, T0 + 2 * H, now=NOW, reason=reason)


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


class Killed(Exception):
    pass


def kill(*_: Any) -> None:
    raise Killed


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


@pytest.mark.parametrize(
    ("second_killed", "killed", "rerun"),
    [(False, False, True), (True, True, True), (False, True, True), (False, True, False)],
    ids=[
        "whole",
        "both_killed_after_commit",
        "first_killed_after_the_second_is_recorded",
        "first_killed_and_never_rerun",
    ],
)
def test_a_backfill_committed_before_another_backfills_gap_is_put_back_keeps_its_rows(
    spark: SparkSession,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    second_killed: bool,
    killed: bool,
    rerun: bool,
) -> None:
    """As above, a whole move commits the gap while the first backfill runs, so the backfill
    puts the move's rows back after its commit. A second backfill of [00:00, 02:00) commits
    right before that put-back: its rows win over the move's, then and after the next move.
    Killed: the first is killed right after its put-back, and its rerun (both writes done)
    puts the second's rows back. The second killed right after its commit, the rerun has the
    first's transaction; the second recorded, it has a new one and finishes the first's. Never
    rerun, the next move finishes it (the first's window stays its own: it committed)."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    changed = order(0, T0 + 0.75 * H, "99.00")
    second, second_options = SECOND, second_backfill(offline, tmp_path, reason="b3")
    writes: list[str] = []
    real = store.replace_where

    def run_second() -> None:
        if not second_killed:
            backfill(spark, settings, second_options)
            return
        with monkeypatch.context() as patch:
            patch.setattr(faults, "point", kill)
            with pytest.raises(Killed):
                backfill(spark, settings, second_options)

    def interleaved(rows: DataFrame, path: str, where: str, app_id: str, *more: Any) -> None:
        if app_id.startswith("backfill") and not writes:
            writes.append("move")
            upsert(spark, settings, offline, [changed])
            realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
        if app_id.endswith(":restore") and "second" not in writes:
            writes.append("second")
            run_second()
        if killed and app_id.endswith(":restore:restore"):
            raise Killed
        writes.append(app_id)
        real(rows, path, where, app_id, *more)

    monkeypatch.setattr(store, "replace_where", interleaved)
    run_first = start_backfill(spark, settings, offline, tmp_path)
    if killed:
        with pytest.raises(Killed):
            run_first()
        monkeypatch.undo()
    want = [*second, *FIXED, *orders[2:]]
    if not rerun:
        realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
        check(spark, settings, offline, want)
        return
    report = run_first()
    monkeypatch.undo()

    check(spark, settings, offline, want)
    if second_killed:  # its rerun (a new transaction now the first is recorded) changes nothing
        backfill(spark, settings, second_options)
        check(spark, settings, offline, want)
    # The gap bucket holds the second backfill's rows, not the move's; a rerun found the
    # boundary at 08:00 (no gap of its own).
    assert (report.gap, report.kept_moved) == ([] if killed else [T0], [])
    if not killed:
        # The move forced in before the first backfill's commit, the second backfill before
        # the put-back of the move's rows, then the put-back of the second backfill's rows.
        apps = {a.window: a.txn[0] for a in audit.announced_backfills(spark, settings, offline)}
        first, other = apps[WINDOW], apps[(T0, T0 + 2 * H)]
        assert writes == [
            "move",
            f"realtime_to_offline:{offline}",
            first,
            "second",
            other,
            f"{first}:restore",
            f"{first}:restore:restore",
        ]
    # The next move moves nothing again: the gap is the second backfill's now.
    assert realtime_to_offline(spark, settings, MoveOptions(offline, NOW + H)).plan is None
    check(spark, settings, offline, want)


def test_the_move_after_a_backfill_moves_its_gap_again_and_reports_it_apart_from_late_changes(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    """No race: the backfill (no boundary yet) copies the gap [00:00, 02:00) from realtime.
    The next move, with no late change, moves that gap again once (it cannot tell whether a
    move raced with it) and reports it as a backfill's gap, not as late; the move after that
    has nothing to do."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    report = start_backfill(spark, settings, offline, tmp_path)()
    assert report.gap == [T0]

    again = realtime_to_offline(spark, settings, MoveOptions(offline, T0 + 4 * H))

    assert again.plan is not None
    bucket = T0.isoformat()
    assert (again.plan.late, again.plan.regap, again.rows) == ([], [bucket], {bucket: 1})
    assert "1 backfill gap bucket(s) moved again" in move_module.describe(again)
    check_offline(spark, settings, offline, [orders[0], *FIXED])
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, expected(orders)),
        ignore_row_order=True,
    )
    assert realtime_to_offline(spark, settings, MoveOptions(offline, T0 + 4 * H)).plan is None


def test_a_backfill_committed_during_a_put_back_keeps_its_rows_though_another_was_read_before(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, the second backfill of [00:00, 02:00) commits right before the first puts
    the move's rows back; a third, of [04:00, 06:00), commits right after the first's commit,
    so the put-back's look reads the announcements before the second announced. Its put-back
    of the second's rows must still see the second's window: it owns the bucket, no move
    would ever fix it."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    second = SECOND
    third = [order(2, T0 + 4.5 * H, "7.00")]
    runs = {
        name: BackfillOptions(
            offline, write_jsonl(tmp_path / f"{name}.jsonl", rows), *window, now=NOW
        )
        for name, rows, window in [
            ("second", second, (T0, T0 + 2 * H)),
            ("third", third, (T0 + 4 * H, T0 + 6 * H)),
        ]
    }
    writes: list[str] = []
    real_write, real_keep = store.replace_where, gap.keep_moved

    def interleaved(rows: DataFrame, path: str, where: str, app_id: str, *more: Any) -> None:
        if app_id.startswith("backfill") and not writes:
            writes.append("move")
            upsert(spark, settings, offline, [order(0, T0 + 0.75 * H, "99.00")])
            realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
        if app_id.endswith(":restore") and "second" not in writes:
            writes.append("second")
            backfill(spark, settings, runs["second"])
        real_write(rows, path, where, app_id, *more)

    def third_first(*args: Any) -> list[datetime]:
        if "third" not in writes:
            writes.append("third")
            backfill(spark, settings, runs["third"])
        return real_keep(*args)

    monkeypatch.setattr(store, "replace_where", interleaved)
    monkeypatch.setattr(gap, "keep_moved", third_first)
    report = start_backfill(spark, settings, offline, tmp_path)()
    monkeypatch.undo()

    want = [*second, *FIXED, *third, orders[3]]
    check(spark, settings, offline, want)
    assert (writes, report.gap, report.kept_moved) == (["move", "third", "second"], [T0], [])
    assert realtime_to_offline(spark, settings, MoveOptions(offline, NOW + H)).plan is None
    check(spark, settings, offline, want)


def test_a_backfill_killed_after_its_commit_and_rerun_over_a_wider_window_replaces_that_window(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same input over [02:00, 04:00), killed after its commit and before its record, then
    run again over [02:00, 06:00) to clear order 2 too: a new write, not the first one's
    transaction (which Delta would skip as done, leaving order 2 while recording it applied)."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
    path = write_jsonl(tmp_path / "fix.jsonl", FIXED)
    with monkeypatch.context() as patch:
        patch.setattr(backfill_module, "_record", kill)
        with pytest.raises(Killed):
            backfill(spark, settings, BackfillOptions(offline, path, *WINDOW, now=NOW))

    wider = BackfillOptions(offline, path, WINDOW[0], WINDOW[1] + 2 * H, now=NOW)
    report = backfill(spark, settings, wider)

    assert report.status == "applied"
    check(spark, settings, offline, [orders[0], *FIXED, orders[3]])


@pytest.mark.parametrize("at", ["before_the_look", "at_the_write"])
def test_a_backfill_committed_to_another_backfills_gap_while_it_runs_keeps_its_rows(
    spark: SparkSession,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    at: str,
) -> None:
    """No boundary yet: the first backfill, of [02:00, 04:00), reads the gap [00:00, 02:00)
    from realtime at its start. Before its commit a second backfill of [00:00, 02:00) runs
    whole, and owns that bucket: no move would ever fix it. Before the first's look right
    before its write, the first leaves the bucket out of its gap; at its write, the first's
    commit writes the gap's realtime rows over it and puts the second's rows back right after."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    second, second_options = SECOND, second_backfill(offline, tmp_path)
    ran: list[str] = []

    def run_second() -> None:
        if not ran:
            ran.append("second")
            ran.append(backfill(spark, settings, second_options).status)

    real_gap, real_write = gap.with_gap, store.replace_where

    def second_after_the_gap(*args: Any) -> Any:
        found = real_gap(*args)
        run_second()
        return found

    def second_at_the_write(
        rows: DataFrame, path: str, where: str, app_id: str, *more: Any
    ) -> None:
        if app_id.startswith("backfill"):
            run_second()
        real_write(rows, path, where, app_id, *more)

    if at == "before_the_look":
        monkeypatch.setattr(gap, "with_gap", second_after_the_gap)
    else:
        monkeypatch.setattr(store, "replace_where", second_at_the_write)
    report = start_backfill(spark, settings, offline, tmp_path)()
    monkeypatch.undo()

    gap_written = [] if at == "before_the_look" else [T0]
    assert (ran, report.gap, report.kept_moved) == (["second", "applied"], gap_written, [])
    assert sorted(report.buckets) == [*gap_written, WINDOW[0]]  # what the record counts
    check_offline(spark, settings, offline, [*second, *FIXED])
    realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
    check(spark, settings, offline, [*second, *FIXED, *orders[2:]])


def first_killed_after_the_second_committed_to_its_gap(
    spark: SparkSession,
    settings: Settings,
    offline: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> list[str]:
    """The first backfill, of [02:00, 04:00), with no boundary yet: at its write the second
    (of its gap) runs whole, then the first commits (the gap's realtime rows over the
    second's) and is killed right after. Returns the app ids of every offline write from then
    on, in order (the patch stays until the test undoes it)."""
    second_options = second_backfill(offline, tmp_path)
    real_write = store.replace_where
    writes: list[str] = []

    def second_then_killed_after_the_commit(
        rows: DataFrame, path: str, where: str, app_id: str, *more: Any
    ) -> None:
        first = app_id.startswith("backfill") and not writes
        if first:
            writes.append("second")
            backfill(spark, settings, second_options)
        writes.append(app_id)
        real_write(rows, path, where, app_id, *more)
        if first:
            raise Killed

    monkeypatch.setattr(store, "replace_where", second_then_killed_after_the_commit)
    with pytest.raises(Killed):
        start_backfill(spark, settings, offline, tmp_path)()
    return writes


def test_a_backfill_killed_after_its_commit_and_never_rerun_leaves_the_next_move_to_put_back_one_committed_to_its_gap(  # noqa: E501
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above at the write, but the first backfill is killed right after its commit (the
    gap's realtime rows now over the second's) and never rerun: the next move finishes its
    put-back, since no move ever rewrites the bucket the second owns."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    writes = first_killed_after_the_second_committed_to_its_gap(
        spark, settings, offline, tmp_path, monkeypatch
    )
    check_offline(spark, settings, offline, [orders[0], *FIXED])  # the realtime row, row 20 lost
    realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
    monkeypatch.undo()

    want = [*SECOND, *FIXED, *orders[2:]]
    check(spark, settings, offline, want)
    # The second backfill, the first's commit (killed right after), then the move: the first's
    # put-back of the second's rows, before its own write.
    first = writes[2]
    assert [w.split(":")[-1] for w in writes[:3]] == [
        "second",
        "20260101T000000-20260101T020000",
        "20260101T020000-20260101T040000",
    ]
    assert writes[3:] == [f"{first}:restore", f"realtime_to_offline:{offline}"]
    # Done for good: the next move has nothing to do and changes nothing.
    assert realtime_to_offline(spark, settings, MoveOptions(offline, NOW + H)).plan is None
    check(spark, settings, offline, want)


def test_a_backfill_committed_but_not_yet_recorded_keeps_its_window_though_another_was_recorded_at_its_seq(  # noqa: E501
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two backfills that start together both take seq 1 (the count of records + 1). The first
    commits [02:00, 04:00); before it is recorded, the second (of its gap, [00:00, 02:00)) runs
    whole and is recorded at seq 1, then a move plans. The first run still owns its window
    (committed, no record of its own): the move must not write the realtime rows over it."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    second, second_options = SECOND, second_backfill(offline, tmp_path)
    ran: list[str] = []
    real_keep_moved = gap.keep_moved

    def second_and_a_move_after_the_commit(*args: Any) -> Any:
        if not ran:
            ran.append("second")
            ran.append(backfill(spark, settings, second_options).status)
            moved = realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
            ran.append(",".join(sorted(b[11:13] for b in moved.rows)))
        return real_keep_moved(*args)

    monkeypatch.setattr(gap, "keep_moved", second_and_a_move_after_the_commit)
    report = start_backfill(spark, settings, offline, tmp_path)()
    monkeypatch.undo()

    seqs = [r["seq"] for r in audit.backfills(spark, settings, offline).collect()]
    assert (ran, report.status, seqs) == (["second", "applied", "04,06"], "applied", [1, 1])
    check(spark, settings, offline, [*second, *FIXED, *orders[2:]])


def test_a_backfill_committed_but_not_yet_recorded_keeps_its_window_though_two_later_runs_were_recorded(  # noqa: E501
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but a third backfill, of [04:00, 06:00), also runs whole and is recorded (at
    seq 2) while the first is still running after its commit, and a late change lands in the
    first one's window. The first still owns its window: the next move must not
    write the late change over the first one's rows."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    realtime_to_offline(spark, settings, MoveOptions(offline, NOW))  # the boundary at 08:00
    third = [order(2, T0 + 4.5 * H, "7.00")]
    third_options = BackfillOptions(
        offline, write_jsonl(tmp_path / "third.jsonl", third), T0 + 4 * H, T0 + 6 * H, now=NOW
    )
    ran: list[str] = []
    real_keep_moved = gap.keep_moved

    def two_more_and_a_move_after_the_commit(*args: Any) -> Any:
        if not ran:
            ran.append("more")
            ran.append(backfill(spark, settings, second_backfill(offline, tmp_path)).status)
            ran.append(backfill(spark, settings, third_options).status)
            upsert(spark, settings, offline, [order(1, T0 + 2.5 * H, "99.00")])  # a late change
            moved = realtime_to_offline(spark, settings, MoveOptions(offline, NOW + H))
            ran.append(",".join(sorted(b[11:13] for b in moved.rows)))
        return real_keep_moved(*args)

    monkeypatch.setattr(gap, "keep_moved", two_more_and_a_move_after_the_commit)
    report = start_backfill(spark, settings, offline, tmp_path)()
    monkeypatch.undo()

    check(spark, settings, offline, [*SECOND, *FIXED, *third, orders[3]])
    seqs = sorted(r["seq"] for r in audit.backfills(spark, settings, offline).collect())
    assert (ran, report.status) == (["more", "applied", "applied", ""], "applied")
    assert seqs == [1, 1, 2]  # the first took seq 1 at its start, as the second did


def test_a_backfill_killed_after_its_commit_and_rerun_after_two_other_records_puts_back_one_committed_to_its_gap(  # noqa: E501
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the killed case above, but before any move a third backfill, of [04:00, 06:00), is
    recorded (seq 2, after the second at seq 1), and then the first is rerun: a new
    transaction (seq 3). The killed run committed, so it owns its window, and its put-back of
    the second's rows over its gap must still be done, before the rerun's own."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    writes = first_killed_after_the_second_committed_to_its_gap(
        spark, settings, offline, tmp_path, monkeypatch
    )
    third = [order(2, T0 + 4.5 * H, "7.00")]
    path = write_jsonl(tmp_path / "third.jsonl", third)
    third_options = BackfillOptions(offline, path, T0 + 4 * H, T0 + 6 * H, now=NOW)
    statuses = [backfill(spark, settings, third_options).status]

    statuses.append(start_backfill(spark, settings, offline, tmp_path)().status)
    monkeypatch.undo()

    seqs = sorted(r["seq"] for r in audit.backfills(spark, settings, offline).collect())
    assert (statuses, seqs) == (["applied", "applied"], [1, 2, 3])
    check_offline(spark, settings, offline, [*SECOND, *FIXED, *third])
    # After the third's commit, the rerun's, then the killed run's put-back (no gap of its own).
    first = writes[2]
    assert writes[3].endswith(":20260101T040000-20260101T060000")
    assert writes[4:] == [first, f"{first}:restore"]
    realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
    check(spark, settings, offline, [*SECOND, *FIXED, *third, orders[3]])


def test_a_backfill_committed_but_not_yet_recorded_keeps_its_window_from_a_later_backfills_gap_with_no_move_ever(  # noqa: E501
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No move ever runs: backfills alone move the boundary. While the first, of [02:00,
    04:00), runs after its commit, two more of its gap [00:00, 02:00) are recorded at seq 1
    and 2 (the boundary at 02:00), a late change lands in the first's window, and a fourth,
    of [06:00, 08:00), runs whole: its gap from the boundary on must leave out the first's
    window, which it owns."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    third, fourth = [order(0, T0 + 0.75 * H, "66.00")], [order(3, T0 + 6.5 * H, "8.00")]
    runs = [
        second_backfill(offline, tmp_path),
        BackfillOptions(offline, write_jsonl(tmp_path / "3.jsonl", third), T0, T0 + 2 * H, now=NOW),
        BackfillOptions(
            offline, write_jsonl(tmp_path / "4.jsonl", fourth), T0 + 6 * H, T0 + 8 * H, now=NOW
        ),
    ]
    gaps: list[str] = []
    real_keep_moved = gap.keep_moved

    def three_more_after_the_commit(*args: Any) -> Any:
        if not gaps:
            gaps.append("first committed")  # before the nested backfills' own put-backs
            for options in runs:
                if options is runs[-1]:
                    upsert(spark, settings, offline, [order(1, T0 + 2.5 * H, "99.00")])  # late
                report = backfill(spark, settings, options)
                gaps.append(",".join(b.isoformat()[11:13] for b in report.gap) + report.status)
        return real_keep_moved(*args)

    monkeypatch.setattr(gap, "keep_moved", three_more_after_the_commit)
    report = start_backfill(spark, settings, offline, tmp_path)()
    monkeypatch.undo()

    # The fourth's gap: [02:00, 06:00) but the first's window.
    assert (gaps[1:], report.status) == (["applied", "applied", "04applied"], "applied")
    check(spark, settings, offline, [*third, *FIXED, orders[2], *fourth])
