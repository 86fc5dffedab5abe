"""Snapshot reads against real Delta MERGE, SCD1 and SCD2: a change arriving after a snapshot
read of its key replaces it whatever its position, as a transaction open during the snapshot
does (it commits after the snapshot with changes written to the WAL before the snapshot's
position; tests/silver/test_cdc_snapshot_race.py reproduces it with PostgreSQL and Debezium).
Between streamed changes the position decides, so replays change nothing.

The property test is checked against an independent model of the source: the committed states
in commit order, which is what the connector's delivery order (not the positions) follows."""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakehouse.core import tables
from lakehouse.core.current import current_rows
from lakehouse.core.settings import Settings
from lakehouse.silver.changes import ARRIVAL, OP, SEQ
from lakehouse.silver.scd1 import apply_scd1, scd1_schema
from lakehouse.silver.scd2 import apply_scd2, history_rows, scd2_schema

COLUMNS = StructType([StructField("id", LongType()), StructField("name", StringType())])
CHANGES = f"id long, name string, {OP} string, {SEQ} long, {ARRIVAL} long"
# id, name, op, position (the WAL position the change was written at), arrival
Change = tuple[int, str | None, str, int, int]
Apply = Callable[[SparkSession, str, DataFrame], None]


def scd1(spark: SparkSession, path: str, batch: DataFrame) -> None:
    apply_scd1(spark, path, batch, ["id"])


def scd2(spark: SparkSession, path: str, batch: DataFrame) -> None:
    apply_scd2(spark, path, batch, ["id"], [])


def new_target(spark: SparkSession, settings: Settings, schema: StructType) -> str:
    path = settings.storage.path("silver", f"snap_{uuid.uuid4().hex[:8]}")
    tables.create_table(spark, path, schema, {})
    return path


def run(spark: SparkSession, path: str, apply: Apply, batches: Sequence[Sequence[Change]]) -> None:
    for batch in batches:
        apply(spark, path, spark.createDataFrame(list(batch), CHANGES))


def versions(spark: SparkSession, path: str) -> list[tuple[int, str | None, bool]]:
    """(id, name, current) of every version, in position order."""
    rows = history_rows(spark.read.format("delta").load(path)).orderBy("id", "__start_seq")
    return [(r["id"], r["name"], r["__end_seq"] is None) for r in rows.collect()]


def test_a_change_after_the_snapshot_read_wins_in_one_batch_and_across_batches(
    spark: SparkSession, settings: Settings
) -> None:
    # Key 1: the snapshot (position 100) read 'before'; the open transaction's update was
    # written at 40 and arrives after it. Key 2: a snapshot read no change follows.
    snapshot = [(1, "before", "r", 100, 1), (2, "b", "r", 100, 2)]
    late = [(1, "after", "u", 40, 3)]
    expected = spark.createDataFrame([(1, "after"), (2, "b")], COLUMNS)
    for schema, apply in ((scd1_schema(COLUMNS), scd1), (scd2_schema(COLUMNS), scd2)):
        for batches in ([snapshot + late], [snapshot, late, late]):
            path = new_target(spark, settings, schema)
            run(spark, path, apply, batches)
            current = current_rows(spark.read.format("delta").load(path))
            assert_df_equality(current, expected, ignore_row_order=True, ignore_nullable=True)
            if apply is scd2:
                after = [(1, "before", False), (1, "after", True), (2, "b", True)]
                assert versions(spark, path) == after


def test_streamed_changes_still_order_by_position_and_a_later_snapshot_wins(
    spark: SparkSession, settings: Settings
) -> None:
    # A replay (position 20 again) arrives after the newer change at 30: it must lose. A later
    # snapshot (position 50) replaces what was streamed before it.
    batches = [[(1, "a", "c", 10, 1), (1, "b", "u", 20, 2), (1, "c", "u", 30, 3)]]
    batches += [[(1, "b", "u", 20, 4)], [(1, "snap", "r", 50, 5), (2, "x", "r", 50, 6)]]
    expected = spark.createDataFrame([(1, "snap"), (2, "x")], COLUMNS)
    for schema, apply in ((scd1_schema(COLUMNS), scd1), (scd2_schema(COLUMNS), scd2)):
        path = new_target(spark, settings, schema)
        run(spark, path, apply, batches[:2])
        current = current_rows(spark.read.format("delta").load(path))
        c_only = spark.createDataFrame([(1, "c")], COLUMNS)
        assert_df_equality(current, c_only, ignore_row_order=True, ignore_nullable=True)
        run(spark, path, apply, batches[2:])
        current = current_rows(spark.read.format("delta").load(path))
        assert_df_equality(current, expected, ignore_row_order=True, ignore_nullable=True)


@dataclass
class Source:
    """A table's committed states and the connector's delivery of them (the model)."""

    rng: random.Random
    keys: int
    position: int = 0
    state: dict[int, str | None] = field(default_factory=dict)  # committed: name, None deleted
    # Per key, its committed states in commit order (None: deleted), a snapshot read included.
    history: dict[int, list[str | None]] = field(default_factory=dict)
    delivered: list[Change] = field(default_factory=list)

    def next_position(self) -> int:
        self.position += 8  # WAL records start 8-byte aligned
        return self.position

    def change(self, key: int) -> tuple[str | None, str]:
        """The next change of `key`: (name or None, op)."""
        if self.state.get(key) is None:
            return f"n{self.position}", "c"
        if self.rng.random() < 0.25:
            return None, "d"
        return f"n{self.position}", "u"

    def commit(self, key: int, name: str | None, op: str, position: int, send: bool) -> None:
        self.state[key] = name
        if send:
            self.history.setdefault(key, []).append(name)
            self.deliver(key, name, op, position)

    def deliver(self, key: int, name: str | None, op: str, position: int) -> None:
        self.delivered.append((key, name, op, position, len(self.delivered)))

    def replay_some(self, since: int) -> None:
        """At least once: the connector sends a run of records of this phase again."""
        if len(self.delivered) - since < 2 or self.rng.random() < 0.5:
            return
        start = self.rng.randrange(since, len(self.delivered) - 1)
        end = self.rng.randrange(start + 1, len(self.delivered))
        for key, name, op, position, _ in self.delivered[start:end]:
            self.deliver(key, name, op, position)


def connector_run(rng: random.Random, keys: int, streamed_before: bool) -> Source:
    """Changes (streamed or, `streamed_before` false, made before the connector existed),
    transactions left open, a snapshot, then the open transactions commit among new changes."""
    source = Source(rng, keys)
    for _ in range(rng.randint(0, 30)):
        key = rng.randrange(keys)
        source.commit(key, *source.change(key), source.next_position(), streamed_before)
    source.replay_some(0)
    # Transactions holding a key's row lock, their change written before the snapshot begins.
    held = {k: (*source.change(k), source.next_position()) for k in rng.sample(range(keys), 3)}
    for _ in range(rng.randint(0, 5)):
        key = rng.choice([k for k in range(keys) if k not in held])
        source.commit(key, *source.change(key), source.next_position(), streamed_before)
    snapshot_at = source.next_position()
    for key in rng.sample(range(keys), keys):
        if source.state.get(key) is not None:
            source.history.setdefault(key, []).append(source.state[key])  # folds or opens
            source.deliver(key, source.state[key], "r", snapshot_at)
    # A restart after the snapshot resends streamed records only (one during it snapshots
    # again, at a new position).
    phase = len(source.delivered)
    for _ in range(rng.randint(5, 40)):
        key = rng.randrange(keys)
        if key in held:
            name, op, position = held.pop(key)
        else:
            name, op = source.change(key)
            position = source.next_position()
        source.commit(key, name, op, position, True)
    for key, (name, op, position) in held.items():
        source.commit(key, name, op, position, True)
    source.replay_some(phase)
    return source


def expected_versions(source: Source) -> list[tuple[int, str | None, bool]]:
    """SCD2 over every column: a state opens a version when it differs from the one before or
    follows a delete; the last one of a key is current unless it is a delete."""
    out: list[tuple[int, str | None, bool]] = []
    for key in sorted(source.history):
        mine: list[str] = []
        previous: str | None = None
        for name in source.history[key]:
            if name is not None and name != previous:
                mine.append(name)
            previous = name
        alive = source.history[key][-1] is not None
        out += [(key, n, alive and i == len(mine) - 1) for i, n in enumerate(mine)]
    return out


def test_property_connector_runs_with_open_transactions_match_the_source(
    spark: SparkSession, settings: Settings
) -> None:
    for seed in range(4):
        rng = random.Random(seed)  # noqa: S311 - reproducible test data
        source = connector_run(rng, keys=6, streamed_before=seed % 2 == 0)
        cuts = sorted(rng.sample(range(1, len(source.delivered)), 3))
        bounds = [0, *cuts, len(source.delivered)]
        batches = [source.delivered[a:b] for a, b in itertools.pairwise(bounds)]
        alive = [(k, n) for k, n in source.state.items() if n is not None]
        expected = spark.createDataFrame(alive, COLUMNS)
        for schema, apply in ((scd1_schema(COLUMNS), scd1), (scd2_schema(COLUMNS), scd2)):
            path = new_target(spark, settings, schema)
            run(spark, path, apply, batches)
            current = current_rows(spark.read.format("delta").load(path))
            assert_df_equality(current, expected, ignore_row_order=True, ignore_nullable=True)
            if apply is scd2:
                assert versions(spark, path) == expected_versions(source), f"seed {seed}"
