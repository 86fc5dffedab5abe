"""Two backfills, and the moves around them, never undo each other: a backfill committed to
another's gap before, during or after that one's put-backs keeps its rows, whether either run is
killed after its commit, rerun, or never rerun, and however many runs were recorded since.

As in test_races, the interleavings are forced in one process at the offline writes."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core import faults
from lakehouse.core.settings import Settings
from lakehouse.offline import audit, gap, hybrid, store
from lakehouse.offline import backfill as backfill_module
from lakehouse.offline import move as move_module
from lakehouse.offline.backfill import BackfillOptions, backfill
from lakehouse.offline.move import MoveOptions, realtime_to_offline
from tests.offline.helpers import T0, frame, offline_setup, order, upsert
from tests.offline.races import (
    FIXED,
    NOW,
    SECOND,
    WINDOW,
    H,
    Killed,
    check,
    check_offline,
    expected,
    kill,
    second_backfill,
    start_backfill,
)
from tests.offline.test_backfill import write_jsonl


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
