"""SCD2 CDC apply (and truncates) against real Delta MERGE: versions follow `_lh_seq`, never
arrival; replays and out-of-order batches end in the history of the in-order changes."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakehouse.core import tables
from lakehouse.core.current import current_rows
from lakehouse.core.settings import Settings
from lakehouse.silver.changes import OP, SEQ, TS
from lakehouse.silver.scd1 import apply_scd1, apply_truncate_scd1, scd1_schema
from lakehouse.silver.scd2 import apply_scd2, apply_truncate_scd2, history_rows, scd2_schema

COLUMNS = StructType(
    [
        StructField("id", LongType()),
        StructField("name", StringType()),
        StructField("city", StringType()),
    ]
)
CHANGES = f"id long, name string, city string, {OP} string, {SEQ} long, {TS} timestamp"
Change = tuple[int, str | None, str | None, str, int, datetime | None]
# id, name, city, __start_seq, __end_seq, __start_at, __end_at, __seq
Version = tuple[int, str | None, str | None, int, int | None, datetime | None, datetime | None, int]

T0 = datetime(2025, 1, 1, 12, 0, 0)


def at(seq: int) -> datetime:
    return T0 + timedelta(seconds=seq)


def new_target(spark: SparkSession, settings: Settings, schema: StructType) -> str:
    path = settings.storage.path("silver", f"cdc_{uuid.uuid4().hex[:8]}")
    tables.create_table(spark, path, schema, {})
    return path


def apply(
    spark: SparkSession, path: str, batch: Sequence[Change], track: Sequence[str] = ("name",)
) -> None:
    apply_scd2(spark, path, spark.createDataFrame(list(batch), CHANGES), ["id"], list(track))


def table(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.format("delta").load(path)


def assert_versions(spark: SparkSession, path: str, expected: Sequence[Version]) -> None:
    assert_df_equality(
        table(spark, path),
        # No snapshot reads here: no version is one (`__snapshot`).
        spark.createDataFrame([(*v, False) for v in expected], scd2_schema(COLUMNS)),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def c(id_: int, name: str | None, city: str | None, seq: int, op: str = "u") -> Change:
    """A change of the row at position `seq`, committed at `at(seq)`."""
    return (id_, name, city, op, seq, at(seq))


def d(id_: int, seq: int) -> Change:
    """A key-only delete (REPLICA IDENTITY DEFAULT)."""
    return (id_, None, None, "d", seq, at(seq))


def test_tracked_changes_open_versions_untracked_changes_update_in_place(
    spark: SparkSession, settings: Settings
) -> None:
    path = new_target(spark, settings, scd2_schema(COLUMNS))
    apply(spark, path, [c(1, "ada", "london", 10, "c"), c(2, "alan", "wilmslow", 11, "r")])
    # name is tracked: a new version; city is not: the current version changes in place.
    apply(spark, path, [c(1, "ada l", "london", 20), c(2, "alan", "manchester", 21)])
    apply(spark, path, [c(1, "ada l", "paris", 30)])
    # Late and stale: an untracked change of key 2 older than its version's __seq.
    apply(spark, path, [c(2, "alan", "stale", 15)])
    expected: list[Version] = [
        (1, "ada", "london", 10, 20, at(10), at(20), 10),
        (1, "ada l", "paris", 20, None, at(20), None, 30),
        (2, "alan", "manchester", 11, None, at(11), None, 21),
    ]
    assert_versions(spark, path, expected)
    current = current_rows(table(spark, path)).collect()
    assert sorted(tuple(r) for r in current) == [(1, "ada l", "paris"), (2, "alan", "manchester")]


def test_key_only_delete_closes_and_a_late_older_update_does_not_reopen(
    spark: SparkSession, settings: Settings
) -> None:
    path = new_target(spark, settings, scd2_schema(COLUMNS))
    apply(spark, path, [c(1, "ada", "london", 10, "c")])
    apply(spark, path, [d(1, 30)])  # only the key: the closed version keeps its values
    assert_versions(spark, path, [(1, "ada", "london", 10, 30, at(10), at(30), 10)])
    # An update from before the delete arrives late: it becomes a closed version in between.
    apply(spark, path, [c(1, "ada l", "paris", 20)])
    expected: list[Version] = [
        (1, "ada", "london", 10, 20, at(10), at(20), 10),
        (1, "ada l", "paris", 20, 30, at(20), at(30), 20),
    ]
    assert_versions(spark, path, expected)
    assert current_rows(table(spark, path)).count() == 0


def test_delete_of_an_unseen_key_is_a_marker_that_its_late_insert_closes_against(
    spark: SparkSession, settings: Settings
) -> None:
    path = new_target(spark, settings, scd2_schema(COLUMNS))
    apply(spark, path, [d(3, 50)])
    assert_versions(spark, path, [(3, None, None, 50, 50, at(50), at(50), 50)])
    assert current_rows(table(spark, path)).count() == 0
    assert history_rows(table(spark, path)).count() == 0
    # The insert behind that delete, and a later re-insert, arrive together.
    apply(spark, path, [c(3, "grace", "ny", 60, "c"), c(3, "grace", "arlington", 40, "c")])
    expected: list[Version] = [
        (3, "grace", "arlington", 40, 50, at(40), at(50), 40),
        (3, "grace", "ny", 60, None, at(60), None, 60),
    ]
    assert_versions(spark, path, expected)


def test_late_change_inside_a_folded_version_is_approximate_until_the_fold_is_replayed(
    spark: SparkSession, settings: Settings
) -> None:
    """The documented inexactness: the fold at 30 lost its time when a late tracked change
    at 20 splits its version; replaying the fold restores it."""
    path = new_target(spark, settings, scd2_schema(COLUMNS))
    apply(spark, path, [c(1, "a", "x", 10, "c"), c(1, "a", "y", 30)])
    apply(spark, path, [c(1, "b", "z", 20)])
    approximate: list[Version] = [
        (1, "a", "y", 10, 20, at(10), at(20), 10),  # untracked city of the last fold
        (1, "b", "z", 20, 30, at(20), at(20), 20),  # zero-length in time
        (1, "a", "y", 30, None, at(20), None, 30),
    ]
    assert_versions(spark, path, approximate)
    apply(spark, path, [c(1, "a", "y", 30)])
    exact_times: list[Version] = [
        (1, "a", "y", 10, 20, at(10), at(20), 10),
        (1, "b", "z", 20, 30, at(20), at(30), 20),
        (1, "a", "y", 30, None, at(30), None, 30),
    ]
    assert_versions(spark, path, exact_times)


def test_unknown_track_columns_are_refused(spark: SparkSession, settings: Settings) -> None:
    path = new_target(spark, settings, scd2_schema(COLUMNS))
    with pytest.raises(ValueError, match="track_columns not among the row columns: nmae"):
        apply(spark, path, [c(1, "a", "x", 1, "c")], track=["nmae"])


def test_truncate_scd2_closes_open_versions_older_than_it(
    spark: SparkSession, settings: Settings
) -> None:
    path = new_target(spark, settings, scd2_schema(COLUMNS))
    apply(
        spark,
        path,
        [c(1, "ada", "london", 10, "c"), c(2, "alan", "x", 11, "c"), d(2, 12)],
    )
    apply(spark, path, [c(3, "grace", "ny", 120, "c")])  # after the truncate (seq 100)
    apply_truncate_scd2(spark, path, 100, at(100))
    # A late update of key 1 from before the truncate lands inside its closed history.
    apply(spark, path, [c(1, "ada l", "paris", 90)])
    expected: list[Version] = [
        (1, "ada", "london", 10, 90, at(10), at(90), 10),
        (1, "ada l", "paris", 90, 100, at(90), at(100), 90),
        (2, "alan", "x", 11, 12, at(11), at(12), 11),
        (3, "grace", "ny", 120, None, at(120), None, 120),
    ]
    assert_versions(spark, path, expected)


def test_truncate_scd1_tombstones_rows_older_than_it(
    spark: SparkSession, settings: Settings
) -> None:
    path = new_target(spark, settings, scd1_schema(COLUMNS))

    def apply1(batch: list[Change]) -> None:  # with `_lh_ts`, which SCD1 ignores
        apply_scd1(spark, path, spark.createDataFrame(batch, CHANGES), ["id"])

    apply1([c(1, "ada", "london", 10, "c"), c(2, "alan", "x", 11, "c"), d(2, 12)])
    apply1([c(3, "grace", "ny", 120, "c")])
    apply_truncate_scd1(spark, path, 100, at(100))
    # Late changes older than the truncate resurrect nothing, also for a key deleted before it.
    apply1([c(1, "ada l", "paris", 90), c(2, "alan", "y", 50, "c")])
    rows = table(spark, path).select("id", "name", "__seq", "__deleted", "__deleted_at")
    assert sorted((r[0], r[1], r[2], r[3]) for r in rows.collect()) == [
        (1, "ada", 100, True),
        (2, None, 100, True),  # the insert and delete came in one batch: a key-only tombstone
        (3, "grace", 120, False),
    ]
    assert rows.where("__deleted AND __deleted_at IS NULL").count() == 0


# --- property test: shuffled, duplicated batches against a plain-Python model ------------------


def random_history(rng: random.Random, keys: int, steps: int) -> list[Change]:
    """Per key: inserts, tracked and untracked updates, no-op updates, key-only deletes (also
    of keys with nothing live) and re-inserts. A changed value is always a fresh one, so no row
    returns to earlier values non-adjacently: the documented inexactness cannot occur."""
    live: dict[int, tuple[str, str | None]] = {}
    events: list[Change] = []
    for seq in range(1, steps + 1):
        key = rng.randrange(keys)
        ts = None if rng.random() < 0.1 else at(seq)
        row = live.get(key)
        deletes = 0.15 if row is None else 0.2  # also deletes of keys with nothing live
        if rng.random() < deletes:
            events.append((key, None, None, "d", seq, ts))
            live.pop(key, None)
            continue
        if row is None:
            op, row = "c", (f"n{seq}", rng.choice([None, f"c{seq}"]))
        else:
            # Not "r": a snapshot read gives way to what arrives after it, whatever its
            # position (tests/silver/test_snapshot_reads.py), and these batches are shuffled.
            op = "u"
            kind = rng.random()
            if kind < 0.4:
                row = (f"n{seq}", row[1])  # tracked change
            elif kind < 0.8:
                row = (row[0], f"c{seq}")  # untracked change
        live[key] = row
        events.append((key, row[0], row[1], op, seq, ts))
    return events


@dataclass
class Open:
    key: int
    name: str | None
    city: str | None
    start: int
    start_at: datetime | None
    seq: int

    def closed(self, end: int | None, end_at: datetime | None) -> Version:
        return (self.key, self.name, self.city, self.start, end, self.start_at, end_at, self.seq)


def model(events: list[Change], track: Sequence[str]) -> list[Version]:
    """The SCD2 contract, applied to the changes in `_lh_seq` order."""
    out: list[Version] = []
    live: dict[int, Open] = {}
    for key, name, city, op, seq, ts in sorted(events, key=lambda e: e[4]):
        cur = live.pop(key, None)
        if op == "d":
            out.append(cur.closed(seq, ts) if cur else (key, None, None, seq, seq, ts, ts, seq))
            continue
        new = {"name": name, "city": city}
        if cur is not None and all(getattr(cur, t) == new[t] for t in track or new):
            cur.name, cur.city, cur.seq = name, city, seq  # in place
            live[key] = cur
            continue
        if cur is not None:
            out.append(cur.closed(seq, ts))
        live[key] = Open(key, name, city, seq, ts, seq)
    return out + [v.closed(None, None) for v in live.values()]


@pytest.mark.parametrize(("track", "seeds"), [(("name",), (1, 2)), ((), (3, 4))])
def test_property_shuffled_duplicated_batches_match_the_model(
    spark: SparkSession, settings: Settings, track: tuple[str, ...], seeds: tuple[int, ...]
) -> None:
    for seed in seeds:
        rng = random.Random(seed)  # noqa: S311 - reproducible test data
        events = random_history(rng, keys=6, steps=60)
        delivered = events + rng.sample(events, 15)  # at-least-once: some arrive twice
        rng.shuffle(delivered)
        cuts = sorted(rng.sample(range(1, len(delivered)), 2))
        batches = [delivered[a:b] for a, b in zip([0, *cuts], [*cuts, len(delivered)], strict=True)]
        path = new_target(spark, settings, scd2_schema(COLUMNS))
        for batch in batches:
            apply(spark, path, batch, track)
        expected = model(events, track)
        assert_versions(spark, path, expected)
        for batch in reversed(batches):  # replaying everything, in another order: no change
            apply(spark, path, batch, track)
        assert_versions(spark, path, expected)
