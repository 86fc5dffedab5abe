"""What a move reads back from the previous move's record."""

from __future__ import annotations

from typing import Any

import pytest

from lakehouse.offline import move

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
    assert move._planned_at(record) == since
