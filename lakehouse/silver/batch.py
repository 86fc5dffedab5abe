"""One refine micro-batch, idempotent: parse, check every rule in one pass, then commit the
silver write under the batch's Delta transaction id, then its quarantined rows and metrics
once for the stream (`once`): a batch replayed after a crash commits nothing twice. A `fail`
rule or a `fail` drift policy stops before any commit."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from lakehouse.core import compaction, faults, tables
from lakehouse.core.columns import case_colliding_fields, case_collisions, unnameable_fields
from lakehouse.quality.expectations import (
    REMOVING,
    Expectation,
    check_fail_rules,
    fails,
    fails_any,
    kept,
    quarantined,
)
from lakehouse.quality.metrics import METRICS_AT, BatchCounts, metrics_rows
from lakehouse.quality.quarantine import QUARANTINED_AT
from lakehouse.silver import nested, once, resolve, scd1, scd2, shape, toast
from lakehouse.silver import transform as silver
from lakehouse.silver.changes import ARRIVAL, OP, SEQ, SNAPSHOT_READ, TRUNCATE, TS
from lakehouse.silver.plan import EVOLVED, Plan, row_columns
from lakehouse.silver.transform import SchemaDriftError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row, SparkSession
    from pyspark.sql.types import StructField

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchStats(BatchCounts):
    """A batch's counts, plus the unknown fields it carried and its truncates (CDC)."""

    unknown_fields: frozenset[str]
    truncates: tuple[tuple[int, Any], ...]
    snapshot_reads: int
    # Per declared column with values that did not decode into its type: how many.
    undecoded: dict[str, int] = field(default_factory=dict)
    # Per nested column with values holding a field their struct does not declare: how many.
    undeclared: dict[str, int] = field(default_factory=dict)
    # Where the batch's time went: (phase, seconds) in order (`refine_batch`).
    phases: tuple[tuple[str, float], ...] = ()
    # The rows a CDC batch read from bronze's feed, counted once (its resolution reads the
    # feed again, and drops a tombstone that repeats its delete); None for other batches.
    read: int | None = None

    def timing(self) -> str:
        """`2.31 s: check 0.20, silver 1.15, metrics 0.59` (empty before the batch ran)."""
        if not self.phases:
            return ""
        parts = ", ".join(f"{name} {seconds:.2f}" for name, seconds in self.phases)
        return f"{self.seconds:.2f} s: {parts}"

    @property
    def seconds(self) -> float:
        """The whole batch (0 before it ran)."""
        return sum(s for _n, s in self.phases)


class _Clock:
    """Seconds per phase of a batch, each phase from the end of the one before."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, float]] = []
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases.append((name, now - self.last))
        self.last = now


def refine_batch(batch: DataFrame, batch_id: int, plan: Plan) -> BatchStats:
    """Refine one micro-batch of bronze's change feed into silver; returns its figures and
    where its time went: for CDC `parse` (reading the feed, parsing, every rule, TOAST and
    tombstones), then `check` (the batch's one aggregation; for events also the reading,
    parsing and rules), `silver` (the write or MERGE), `quarantine`, `metrics`."""
    spark = batch.sparkSession
    clock = _Clock()
    records = plan.records(batch)
    columns = toast.toast_columns(records, plan.table.keys) if plan.kind == "cdc" else []
    first = _placeholders_unchecked(records, columns)
    evaluated = plan.evaluated(first).persist()
    read: int | None = None
    try:
        if plan.kind == "cdc":
            # The scan that looks for tombstones and placeholders fills the cache every later
            # step reads: the batch is parsed once when it holds neither (inserts and updates
            # only). It scanned the parse uncached, so every CDC batch was parsed twice (16 s
            # of 45 per million changes, bench/README.md). A batch that holds either is
            # resolved from its records and evaluated again.
            has_tombstones, has_placeholders, read = _carries(evaluated, columns)
            if has_tombstones or has_placeholders:
                evaluated.unpersist()
                target = resolve.silver_as_found(spark, plan, batch_id)
                if has_tombstones:
                    records = resolve.tombstones_as_deletes(spark, plan, records, target)
                if has_placeholders:
                    records = resolve.unchanged_toast(plan, records, columns, target)
                evaluated = plan.evaluated(records).persist()
            clock.lap("parse")
        stats = batch_stats(
            evaluated, plan.expectations, plan.schema.names, nested.columns(plan.schema.struct)
        )
        if stats.unknown_fields and _drift(spark, plan, evaluated, stats, batch_id):
            evaluated.unpersist()
            return refine_batch(batch, batch_id, plan)  # parsed again with the new columns
        check_fail_rules(evaluated.drop(*silver.TRANSIENT), plan.expectations, stats.per_rule)
        clock.lap("check")
        kept_rows = kept(evaluated, plan.expectations)
        write_silver(spark, plan, kept_rows, stats, batch_id)
        clock.lap("silver")
        faults.point("after_silver_commit")
        if stats.quarantined:
            rejected = silver.quarantine_rows(
                quarantined(evaluated, plan.expectations), plan.name, plan.run_id, batch_id
            )
            once.append(spark, rejected, plan.quarantine_path, plan, batch_id, QUARANTINED_AT)
            clock.lap("quarantine")
        faults.point("after_quarantine_commit")
        actions = {e.name: e.action for e in plan.expectations}
        metrics = metrics_rows(
            spark,
            plan.name,
            plan.run_id,
            batch_id,
            actions,
            stats,
            stats.undecoded,
            "rescue" if plan.kind == "events" else "quarantine",
            stats.undeclared,
        )
        once.append(spark, metrics, plan.metrics_path, plan, batch_id, METRICS_AT)
        clock.lap("metrics")
        faults.point("after_metrics_commit")
        # Once the batch is whole: a compaction is maintenance, not part of the batch.
        if compaction.compact_when_due(spark, plan.path, plan.compact_every) is not None:
            clock.lap("compaction")
            faults.point("after_compaction")  # the checkpoint's commit of the batch comes next
        # The system tables every refine job appends to, each only after a write to it (a due
        # version left alone would try again every batch); another job's conflict skips it.
        for path in [plan.metrics_path] + ([plan.quarantine_path] if stats.quarantined else []):
            compaction.compact_when_due(spark, path, plan.compact_every)
    finally:
        evaluated.unpersist()
    return replace(stats, phases=tuple(clock.phases), read=read)


def _placeholders_unchecked(records: DataFrame, columns: Sequence[str]) -> DataFrame:
    """`records` with no rule applied to a row carrying a TOAST placeholder: it is not the
    row's value, and a rule such as `parse_json(doc) IS NOT NULL` raises on it. Such rows are
    resolved and evaluated again (`refine_batch`); without placeholders nothing changes."""
    from pyspark.sql import functions as F

    if not columns:
        return records
    placeholder = toast.carries_toast_placeholder(records, columns)
    return records.withColumn(silver.CHECKED, F.col(silver.CHECKED) & ~placeholder)


def _drift(
    spark: SparkSession, plan: Plan, evaluated: DataFrame, stats: BatchStats, batch_id: int
) -> bool:
    """Apply the table's schema-drift policy to fields the schema lacks: True when the schema
    evolved (the batch must be parsed again), False to go on (rescue)."""
    if plan.table.schema_drift == "fail":
        raise SchemaDriftError(
            f"silver.{plan.name}: records carry field(s) {sorted(stats.unknown_fields)} "
            "that the declared schema lacks (schema_drift: fail); nothing of batch "
            f"{batch_id} was written. Add them to silver.{plan.name}.schema in "
            "conf/base/tables.yml, or set schema_drift: evolve or rescue"
        )
    if plan.table.schema_drift == "evolve":
        return _evolve(spark, plan, evaluated, stats.unknown_fields)
    return False


def _carries(records: DataFrame, toast_columns: Sequence[str]) -> tuple[bool, bool, int]:
    """Whether the batch holds tombstones, and unchanged-TOAST placeholders, and how many
    rows it holds (one per record read): one scan answers all three."""
    from pyspark.sql import functions as F

    placeholders = toast.carries_toast_placeholder(records, toast_columns)
    row = records.agg(
        F.max(F.col(silver.TOMBSTONE_ROW).cast("int")),
        F.max(placeholders.cast("int")),
        F.count(F.lit(1)),
    ).first()
    assert row is not None  # an aggregation without grouping returns one row
    return bool(row[0]), bool(row[1]), int(row[2])


def batch_stats(
    evaluated: DataFrame,
    expectations: Sequence[Expectation],
    columns: Sequence[str] = (),
    nested_columns: Sequence[str] = (),
) -> BatchStats:
    """Every figure a batch needs, from one aggregation: rows, per-rule failures, what is
    written/dropped/quarantined, unknown field names, truncate positions, per declared
    column (`columns`) the values that did not decode and per nested column
    (`nested_columns`) the values holding an undeclared field."""
    from pyspark.sql import functions as F

    def count_if(condition: Column) -> Column:
        return F.sum(condition.cast("long"))

    quarantine = fails_any(expectations, ("quarantine",))
    removed = fails_any(expectations, REMOVING)
    aggregates = [
        F.count(F.lit(1)).alias("_rows"),
        count_if(~removed).alias("_written"),
        count_if(quarantine).alias("_quarantined"),
        count_if(removed & ~quarantine).alias("_dropped"),
        F.array_distinct(F.flatten(F.collect_set(silver.UNKNOWN))).alias("_unknown"),
        *[count_if(fails(expectations, e.name)).alias(e.name) for e in expectations],
        *[
            count_if(F.array_contains(silver.MISTYPED, c)).alias(f"_undecoded_{i}")
            for i, c in enumerate(columns)
        ],
        *[
            count_if(F.array_contains(silver.UNDECLARED, c)).alias(f"_undeclared_{i}")
            for i, c in enumerate(nested_columns)
        ],
    ]
    is_cdc = OP in evaluated.columns
    if is_cdc:
        truncate = F.when(F.col(OP) == TRUNCATE, F.struct(SEQ, TS))
        aggregates.append(F.collect_list(truncate).alias("_truncates"))
        aggregates.append(count_if(F.col(OP) == SNAPSHOT_READ).alias("_snapshot_reads"))
    row: Row = evaluated.agg(*aggregates).collect()[0]
    rows = int(row["_rows"])
    per_rule = {e.name: (rows - int(row[e.name] or 0), int(row[e.name] or 0)) for e in expectations}
    truncates = tuple((int(t[0]), t[1]) for t in row["_truncates"]) if is_cdc else ()
    snapshot_reads = int(row["_snapshot_reads"] or 0) if is_cdc else 0
    return BatchStats(
        rows,
        int(row["_written"] or 0),
        int(row["_dropped"] or 0),
        int(row["_quarantined"] or 0),
        per_rule,
        frozenset(row["_unknown"] or ()),
        truncates,
        snapshot_reads,
        {c: int(n) for i, c in enumerate(columns) if (n := row[f"_undecoded_{i}"] or 0)},
        undeclared={
            c: int(n) for i, c in enumerate(nested_columns) if (n := row[f"_undeclared_{i}"] or 0)
        },
    )


def write_silver(
    spark: SparkSession,
    plan: Plan,
    rows: DataFrame,
    stats: BatchStats,
    batch_id: int,
) -> None:
    """`stats`: the batch's figures (its one aggregation): how many rows `rows` holds, so the
    MERGE need not count them again to decide on broadcasting, its truncates and whether it
    holds snapshot reads."""
    from pyspark.sql import functions as F

    columns = row_columns(rows)
    mode, keys, count = plan.table.mode, list(plan.table.keys), stats.written
    if mode == "append":
        tables.append_once(
            rows.select(*[f"`{c}`" for c in columns]), plan.path, plan.app_id, batch_id
        )
        return
    # Bronze lineage: the first arrival wins between changes of a key at the same position,
    # and a change arriving after a snapshot read replaces it (`changes.snapshot_position`).
    arrival = F.struct(silver.TOPIC, silver.PARTITION, silver.OFFSET).alias(ARRIVAL)
    if mode == "upsert":
        changes = silver.event_upserts(
            rows, plan.table.sequence_by, plan.table.apply_as_deletes
        ).select(*[f"`{c}`" for c in columns], OP, SEQ, arrival)
        with tables.transaction(spark, plan.app_id, batch_id):
            scd1.apply_scd1(spark, plan.path, changes, keys, rows=count, snapshot_reads=False)
        return
    changes = rows.where(f"{OP} <> '{TRUNCATE}'").select(
        *[f"`{c}`" for c in columns], OP, SEQ, TS, arrival
    )
    # Changes and truncates apply in source order: the changes before the first truncate, the
    # truncate, the changes up to the next, ... (a truncate-and-reload in one batch keeps the
    # reload). Each commit of the batch has its own app id: Delta skips a commit whose app id
    # already reached this batch, so a crash between two redoes only the ones after.
    if mode == "scd1":
        apply = partial(
            scd1.apply_scd1,
            spark,
            plan.path,
            keys=keys,
            rows=count,
            snapshot_reads=stats.snapshot_reads > 0,
        )
        truncate = partial(scd1.apply_truncate_scd1, spark, plan.path)
    else:
        track = list(plan.table.track_columns)
        apply = partial(scd2.apply_scd2, spark, plan.path, keys=keys, track_columns=track)
        truncate = partial(scd2.apply_truncate_scd2, spark, plan.path)
    ordered = sorted(stats.truncates, key=lambda t: t[0])
    for i, (lower, upper) in enumerate(pairwise([None, *[t[0] for t in ordered], None])):
        part = changes
        if lower is not None:
            part = part.where(F.col(SEQ) >= F.lit(lower))
        if upper is not None:
            part = part.where(F.col(SEQ) < F.lit(upper))
        # Without truncates there is one part, always applied; a part between truncates is
        # looked at first (an empty MERGE would still commit).
        if i == 0 or part.take(1):
            app_id = plan.app_id if i == 0 else f"{plan.app_id}:after_truncate{i}"
            with tables.transaction(spark, app_id, batch_id):
                apply(part)
        if upper is not None:
            with tables.transaction(spark, f"{plan.app_id}:truncate{i}", batch_id):
                truncate(*ordered[i])


def _evolve(spark: SparkSession, plan: Plan, evaluated: DataFrame, unknown: frozenset[str]) -> bool:
    """schema_drift: evolve. Infer the new fields' types from this batch's records (events:
    the JSON values; CDC: the rescued fields, so as text), add them as silver columns
    (flattened like the rest) and record them in a table property, so later batches and
    restarts parse them too. Idempotent: a replayed batch finds the columns already there.
    A field with a name no column can have (at any depth) stays rescued. True: evolved."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    with_unknown = evaluated.where(F.size(silver.UNKNOWN) > 0)
    if plan.kind == "events":
        texts = with_unknown.select(F.col(silver.RAW_VALUE).cast("string"))
    else:
        texts = with_unknown.select(F.col(silver.RESCUED))
    inferred = spark.read.json(texts.rdd.map(lambda r: str(r[0])))
    types = {f.name: f for f in inferred.schema.fields}
    new_fields = [types.get(n, StructField(n, StringType())) for n in sorted(unknown)]
    colliding = set(_collisions(spark, plan, evaluated, new_fields))
    kept = [
        f
        for f in new_fields
        if not unnameable_fields(StructType([f]))
        and not case_colliding_fields(StructType([f]))
        and f.name not in colliding
    ]
    if len(kept) < len(new_fields):
        log.warning(
            "silver.%s: field(s) %s stay in _rescued_data: a name in them cannot name a column "
            "(a character Delta refuses; a column's name but for case, once flattened too; "
            "silver's own)",
            plan.name,
            sorted({f.name for f in new_fields} - {f.name for f in kept}),
        )
    if not kept:
        return False
    new_fields = kept
    flat = shape.flatten(spark.createDataFrame([], StructType(new_fields)))
    columns = tables.missing_columns(spark, plan.path, flat.schema.fields)
    if columns:
        spark.sql(f"ALTER TABLE delta.`{plan.path}` ADD COLUMNS ({tables.columns_ddl(columns)})")
    declared = set(silver.parse_schema(plan.table.schema).names)
    evolved = [f for f in plan.schema.struct.fields if f.name not in declared] + new_fields
    ddl = tables.columns_ddl(evolved)
    tables.set_properties(spark, plan.path, {EVOLVED: ddl})
    log.warning("silver.%s: schema evolved, added %s", plan.name, [f.name for f in new_fields])
    plan.schema = plan.schema.evolved(plan.table.schema, ddl)
    return True


def _collisions(
    spark: SparkSession, plan: Plan, evaluated: DataFrame, fields: list[StructField]
) -> list[str]:
    """The new `fields` (names) whose columns (`flat_names`: a struct's fields flattened)
    would be a column the batch or the table has already but for case (`ID` beside `id`,
    `meta: {a}` beside `meta_a`), or each other's, or silver's own (`silvers_own`). A table
    column of exactly a new column's name is no collision: an evolve that failed before its
    table property was set added it."""
    flat = {f.name: shape.flat_names(f) for f in fields}
    names = [n for columns in flat.values() for n in columns]
    existing = spark.read.format("delta").load(plan.path).columns
    taken = [*evaluated.columns, *(c for c in existing if c not in names)]
    bad = set(case_collisions(names, taken))
    return [
        name
        for name, columns in flat.items()
        if silver.silvers_own(name) or any(c in bad or silver.silvers_own(c) for c in columns)
    ]
