"""Shared helpers for the silver tests: per-test silver tables over per-test bronze sources."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.bronze.transform import kafka_to_bronze
from lakehouse.core import kafka
from lakehouse.core.current import current_rows
from lakehouse.core.settings import Settings
from lakehouse.core.specs import ExpectationSettings, SilverTableSettings
from lakehouse.devstack.connect import start_connect
from lakehouse.devstack.processes import state_paths
from lakehouse.silver.refine import RefineOptions, RefineResult, refine
from tests.bronze.helpers import new_source, run_ingest, wait_for_records
from tests.conftest import pg_connect

MINUTE = datetime(2021, 9, 24, 6, 2)
AT, AT_US = datetime(2021, 9, 24, 6, 2, 31), datetime(2021, 9, 24, 6, 2, 31, 123456)
# The ISO-8601 forms real feeds send beyond Spark's cast: RFC 3339's lowercase `t` and `z`,
# Java's `toString` (seconds left out when zero, a region in brackets), a comma before the
# fraction; a fraction of a minute, an unknown region or trailing text is refused, never
# guessed. The offline layer's `iso8601` times read them too (`tests/offline/test_buckets.py`).
ISO_FORMS: list[tuple[str, datetime | None]] = [
    ("2021-09-24t06:02:31z", AT),
    ("2021-09-24T06:02Z", MINUTE),  # OffsetDateTime.toString()
    ("2021-09-24T08:02+02:00", MINUTE),
    ("2021-09-24T06:02", MINUTE),  # LocalDateTime.toString(): UTC, as every local time
    ("2021-09-24 06:02", MINUTE),
    ("2021-09-24T06:02:31,123456Z", AT_US),
    ("2021-09-24T06:02:31.123456789Z", AT_US),  # cut to the microsecond
    ("2021-09-24T06:02:31+0200", datetime(2021, 9, 24, 4, 2, 31)),
    # ZonedDateTime.toString(): the offset decides the instant
    ("2021-09-24T08:02+02:00[Europe/Paris]", MINUTE),
    ("2021-09-24T08:02:31+02:00[Europe/Paris]", AT),
    ("2021-09-24T06:02:31+00:00[Europe/Paris]", AT),
    ("2021-09-24T08:02:31[Europe/Paris]", AT),  # summer time: +02:00
    ("2021-01-24T07:02:31[Europe/Paris]", datetime(2021, 1, 24, 6, 2, 31)),
    ("2021-09-24T06:02z[UTC]", MINUTE),
    ("2021-09-24T06:02,5Z", None),  # half a minute, not half a second
    ("2021-09-24T06:02:31[Nowhere/City]", None),
    ("2021-09-24T06:02:31+02:00[Nowhere/City]", None),
    ("2021-09-24T06:02:31Zgarbage", None),
    ("2021-09-24T06Z", None),
    ("2021-09-24T06:02:31+02:00 [Europe/Paris]", None),
    ("2021-09-24T06:02:31 UTC", AT),
    ("2021-09-24T06:02:31GMT", AT),
    # Abbreviations Java reads as it likes: BST as Asia/Dhaka, PST in September as -07:00,
    # CET in summer as +02:00; which instant was meant cannot be told.
    ("2021-09-24T07:02:31 BST", None),
    ("2021-09-24T07:02:31[BST]", None),
    ("2021-09-23T22:02:31 PST", None),
    ("2021-09-24T07:02:31 CET", None),
    ("2021-09-24T07:02:31+01:00[CET]", datetime(2021, 9, 24, 6, 2, 31)),  # the offset decides
    # Outside the years 0001-9999 once in UTC, which Python cannot even collect.
    ("9999-12-31T23:59:59-01:00", None),
    ("0001-01-01T00:00:00+01:00", None),
    ("+10000-01-01T00:00:00Z", None),
]

# A round of PostgreSQL statements (`{t}` for the table; `%s` takes the round's parameters)
# and how many Kafka records Debezium sends for them.
Round = tuple[list[str], int]

ORDER_SCHEMA = "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DOUBLE, ts BIGINT"

KAFKA = (
    "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
    "partition int, offset long, timestamp timestamp, timestampType int"
)


def bronze_rows(spark: SparkSession, values: list[object]) -> DataFrame:
    """Bronze rows as ingest writes them, from Kafka records holding `values` (dicts become
    JSON, bytes are sent as they are)."""
    at = datetime(2026, 1, 1)
    raw = spark.createDataFrame(
        [
            (None, v if isinstance(v, bytes) else json.dumps(v).encode(), None, "t", 0, i, at, 0)
            for i, v in enumerate(values)
        ],
        KAFKA,
    )
    return kafka_to_bronze(raw, "src", "events", 1 << 20)


def rule(
    name: str, action: str, sql: str = "", expect: str = "", **kwargs: Any
) -> ExpectationSettings:
    return ExpectationSettings(name, action, sql, expect, kwargs)


def with_silver(settings: Settings, source: str, **fields: Any) -> tuple[str, Settings]:
    """A silver table named after a fresh id, fed by `source`, added to a copy of `settings`."""
    name = f"s{uuid.uuid4().hex[:10]}"
    table = SilverTableSettings(source=source, **fields)
    return name, replace(settings, silver={**settings.silver, name: table})


def change(op: str, lsn: int, before: object = None, after: object = None) -> bytes:
    """A Debezium envelope (schemas off) of a change to table `t` at position `lsn`."""
    source = {"lsn": lsn, "ts_ms": 1_700_000_000_000 + lsn, "schema": "public", "table": "t"}
    return json.dumps(
        {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1}
    ).encode()


def events_pipeline(
    spark: SparkSession, settings: Settings, events: list[object], **silver: Any
) -> tuple[str, str, str, Settings]:
    """A topic holding `events` (dicts become JSON, bytes are sent as is), ingested into
    bronze; returns (source, topic, silver table, settings)."""
    source, topic, settings = new_source(settings)
    produce(settings, topic, events)
    run_ingest(spark, settings, source)
    name, settings = with_silver(settings, source, **silver)
    return source, topic, name, settings


def produce(settings: Settings, topic: str, events: Sequence[object]) -> None:
    records: list[tuple[bytes | None, bytes | None, int | None]] = [
        (None, e if isinstance(e, bytes) else json.dumps(e).encode(), 0) for e in events
    ]
    kafka.produce(settings.kafka, topic, records)


def run_refine(spark: SparkSession, settings: Settings, name: str, **options: Any) -> RefineResult:
    return refine(spark, settings, RefineOptions(name, **options))


def silver_table(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    return spark.read.format("delta").load(settings.storage.path("silver", name))


def current(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    """What a reader sees in a keyed silver table: live rows, no bookkeeping columns."""
    return current_rows(silver_table(spark, settings, name))


def assert_current(
    spark: SparkSession, settings: Settings, name: str, rows: list[tuple[Any, ...]], schema: str
) -> None:
    """The table's current rows are exactly `rows` (in any order)."""
    assert_df_equality(
        current(spark, settings, name),
        spark.createDataFrame(rows, schema),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def quarantine(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    path = settings.storage.path("_system", "quarantine")
    return spark.read.format("delta").load(path).where(f"`table` = '{name}'")


def metrics(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    path = settings.storage.path("_system", "expectation_metrics")
    return spark.read.format("delta").load(path).where(f"`table` = '{name}'")


@dataclass(frozen=True)
class DebeziumTable:
    table: str  # public.<table> in PostgreSQL
    topic: str  # Debezium's topic for it
    source: str  # a CDC source reading the topic, in `settings`
    settings: Settings
    connector: str  # the Debezium connector's name
    prefix: str  # its topic prefix

    def register_again(self, settings: Settings) -> None:
        """Register the connector again (schemas off, no unwrap), as an operator does after a
        standalone worker restarted and forgot it: Debezium resumes from the offsets it
        flushed and re-sends the rest."""
        from lakehouse.connectors.debezium import register_postgres_connector

        register_postgres_connector(
            settings,
            self.connector,
            self.prefix,
            [f"public.{self.table}"],
            schemas_enable=False,
            unwrap=False,
        )


@contextmanager
def debezium_table(
    settings: Settings,
    ddl: Sequence[str],
    schemas_enable: bool = False,
    drop: Sequence[str] = (),
    unwrap: bool = False,
    connector_config: dict[str, str] | None = None,
    before_connector: Callable[[str, str], None] | None = None,
) -> Iterator[DebeziumTable]:
    """A fresh PostgreSQL table made by `ddl` (statements with `{table}` for its name, run in
    order), streamed by its own real Debezium connector into its own topic, and a CDC source
    reading that topic added to a copy of `settings`. Afterwards the connector (and its slot)
    and the table are dropped, then the `drop` statements run. `unwrap` adds the
    ExtractNewRecordState SMT; `connector_config` overrides connector settings;
    `before_connector(table, slot)` runs after the DDL, before the connector is registered."""
    from lakehouse.connectors.debezium import delete_connector, register_postgres_connector
    from lakehouse.core.connector_specs import default_slot_name

    # One worker serves every test: if an earlier test left it dead, start it again here so
    # its failure stays that test's own instead of failing every CDC test after it.
    start_connect(settings)
    table = f"t_{uuid.uuid4().hex[:8]}"
    with pg_connect(settings) as conn:
        for statement in ddl:
            conn.execute(statement.format(table=table))
    connector, prefix = f"test-{table}", f"d{table[-8:]}"
    topic = f"{prefix}.public.{table}"
    kafka.ensure_topic(settings.kafka, topic, partitions=1)
    if before_connector is not None:
        before_connector(table, default_slot_name(connector))
    register_postgres_connector(
        settings,
        connector,
        prefix,
        [f"public.{table}"],
        schemas_enable=schemas_enable,
        unwrap=unwrap,
        extra=connector_config,
    )
    failing = True
    try:
        source, _, with_source = new_source(settings, kind="cdc")
        cdc = replace(with_source.sources[source], topics=(topic,))
        with_source = replace(with_source, sources={**with_source.sources, source: cdc})
        yield DebeziumTable(table, topic, source, with_source, connector, prefix)
        failing = False
    finally:
        try:
            delete_connector(settings, connector)
            with pg_connect(settings) as conn:
                conn.execute(f"DROP TABLE IF EXISTS public.{table}")
                for statement in drop:
                    conn.execute(statement)
        except Exception as error:
            # A clean-up error must not hide the test's own failure; either way the worker's
            # last lines tell why it went away.
            message = f"clean-up failed: {error}\n--- {CONNECT_LOG} ---\n{_connect_log_tail()}"
            if not failing:
                raise AssertionError(message) from error
            print(message, file=sys.stderr)


CONNECT_LOG = "the last lines of .lakehouse/logs/connect.log"


def _connect_log_tail(lines: int = 40) -> str:
    log = state_paths().log("connect")
    if not log.exists():
        return "(no log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def rounds_equal_postgres(
    spark: SparkSession,
    pg: DebeziumTable,
    settings: Settings,
    rounds: Sequence[Round],
    silver_tables: Sequence[str],
    schema: str,
    params: Sequence[Any] | None = None,
    produced: int = 0,
    pg_columns: str | None = None,
) -> int:
    """Each round: run its statements in PostgreSQL, wait for Debezium's records (`produced`:
    how many the topic held before), ingest, refine every table in `silver_tables` (nothing
    quarantined) and compare its current rows with `SELECT` of `schema`'s columns from
    PostgreSQL (or of `pg_columns`, expressions giving them as `schema` types them), both
    ordered by the first column, which must be the integer key. Returns how many records the
    topic holds after."""
    columns = ", ".join(f.split()[0] for f in schema.split(", "))
    for statements, records in rounds:
        with pg_connect(settings) as conn:
            for statement in statements:
                sql = statement.format(t=f"public.{pg.table}")
                conn.execute(sql, params if "%s" in sql else None)
            select = f"SELECT {pg_columns or columns} FROM public.{pg.table} ORDER BY 1"
            rows = conn.execute(select).fetchall()
        produced += records
        wait_for_records(settings, pg.topic, produced)
        run_ingest(spark, settings, pg.source, kind="cdc")
        for name in silver_tables:
            assert run_refine(spark, settings, name).rows_quarantined == 0, name
            assert_df_equality(
                # Ordered by the key (the first column), not by every column: maps cannot be.
                current(spark, settings, name)
                .selectExpr(*columns.split(", "))
                .orderBy(columns.split(", ")[0]),
                spark.createDataFrame(rows, schema),
                ignore_nullable=True,
                underline_cells=True,
            )
    return produced
