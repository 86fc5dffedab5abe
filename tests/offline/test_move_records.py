"""What a move and a backfill read back from the records and announcements before them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from lakehouse.offline import guard, plans

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`


@pytest.mark.parametrize(
    ("record", "since"),
    [
        (None, None),  # no move yet: every committed backfill's gap moves again
        ({"offline_version": 7, "planned_offline_version": 4}, 4),
        ({"offline_version": 7, "planned_offline_version": 0}, 0),
        # A record from before the field: the version after that move (the upgrade's hole).
        ({"offline_version": 7}, 7),
        ({"offline_version": 7, "planned_offline_version": None}, 7),
    ],
    ids=["no_move", "planned", "planned_at_zero", "older_record", "older_record_null"],
)
def test_the_next_move_regaps_backfills_committed_since_the_last_move_planned(
    record: dict[str, Any] | None, since: int | None
) -> None:
    assert plans.planned_at(record) == since


def test_announcements_are_read_again_only_for_a_backfill_commit_the_last_read_missed() -> None:
    t = datetime(2026, 1, 1)
    known = guard.Announced(("backfill:t:aa:w", 1), (t, t), 3)
    later = guard.Announced(("backfill:t:bb:w", 1), (t, t), 5)
    logs = [[known], [known, later]]
    reads: list[int] = []

    def read() -> list[guard.Announced]:
        reads.append(1)
        return logs[min(len(reads), len(logs)) - 1]

    announced = guard.Announcements(read)
    assert announced() == [known]
    # Known commits, a put-back's and a move's: no new read.
    assert announced([known.txn, ("backfill:t:aa:w:restore", 1), ("realtime_to_offline:t", 2)]) == [
        known
    ]
    assert len(reads) == 1
    assert announced([later.txn]) == [known, later]  # committed after the first read
    assert announced([known.txn, later.txn]) == [known, later]
    assert len(reads) == 2
