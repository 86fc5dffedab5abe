"""PostgreSQL's special values through the real Debezium connector with its default modes:
an infinite `timestamp`, `timestamptz` or `date` (sent as the extreme count or the word
`infinity`) has no Spark value, so its change is quarantined naming the column; a `real` or
`double precision` NaN/Infinity is stored as such; a `numeric` NaN reaches Kafka as null in
`precise` mode (Debezium's documented loss: only `string` or `double` mode keeps it), so silver
can only store NULL. A table with `infinite_times: clamp` stores the infinities as Spark's
latest and earliest values instead (a `timestamp(3)`, sent as pgjdbc's infinity milliseconds,
too, and the arrays' own forms, an old `timestamp[]` element read in Java's calendar). This
pins what the README promises for these values; a connector that changed how it sends them
would fail here."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.settings import Settings
from tests.bronze.helpers import run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import current, debezium_table, quarantine, run_refine, with_silver

COLUMNS = (
    "id int PRIMARY KEY, day date, at timestamp, at_tz timestamptz, r real, "
    "d double precision, amount numeric(12,2), at3 timestamp(3), ats timestamp[], days date[], "
    "at_tzs timestamptz[]"
)
SCHEMA = (
    "id INT, day DATE, at TIMESTAMP, at_tz TIMESTAMP, r FLOAT, d DOUBLE, amount DECIMAL(12,2), "
    "at3 TIMESTAMP, ats ARRAY<TIMESTAMP>, days ARRAY<DATE>, at_tzs ARRAY<TIMESTAMP>"
)
ORDINARY = "'2024-01-05', '2024-01-05 10:00:00', '2024-01-05 10:00:00+00'"
AT3 = "'2024-01-05 10:00:00'"
# Read by the connector's snapshot, before the rows below (offsets 0 and 1): a snapshot sends
# a `date`'s infinity as a `date[]`'s (probed), unlike the stream.
SNAPSHOT = [
    f"(9, 'infinity', '2024-01-05 10:00:00', '2024-01-05 10:00:00+00', 1, 1, 1, {AT3})",
    f"(10, '-infinity', '2024-01-05 10:00:00', '2024-01-05 10:00:00+00', 1, 1, 1, {AT3})",
]
# One special value per row, so each row's fate names one behaviour (offsets 2-9, in order).
ROWS = [
    f"(1, '2024-01-05', 'infinity', '2024-01-05 10:00:00+00', 1, 1, 1, {AT3})",
    f"(2, '2024-01-05', '2024-01-05 10:00:00', '-infinity', 1, 1, 1, {AT3})",
    f"(3, 'infinity', '2024-01-05 10:00:00', '2024-01-05 10:00:00+00', 1, 1, 1, {AT3})",
    f"(4, {ORDINARY}, 'NaN', '-Infinity', 1, {AT3})",
    f"(5, {ORDINARY}, '-Infinity', 'Infinity', 'NaN', {AT3})",
    f"(6, {ORDINARY}, 1.5, 2.5, 12.34, {AT3})",
    f"(7, {ORDINARY}, 1, 1, 1, '-infinity')",
    # Arrays send their infinities apart (a `date[]` its own day counts, a `timestamptz[]`'s
    # -infinity a year 292269055), and their old timestamps in Java's calendar.
    f"(8, {ORDINARY}, 1, 1, 1, {AT3}, "
    "ARRAY['infinity', '-infinity', '1582-10-04 12:00']::timestamp[], "
    "ARRAY['infinity', '-infinity']::date[], ARRAY['infinity', '-infinity']::timestamptz[])",
]


def test_infinite_times_are_quarantined_or_clamped_float_specials_stored_numeric_nan_null(
    spark: SparkSession, kafka_up: Settings
) -> None:
    def snapshot(table: str, _slot: str) -> None:
        with pg_connect(kafka_up) as conn:
            conn.execute(f"INSERT INTO public.{table} VALUES {', '.join(SNAPSHOT)}")

    ddl = ["CREATE TABLE public.{table} (" + COLUMNS + ")"]
    with debezium_table(kafka_up, ddl, before_connector=snapshot) as pg:
        settings = pg.settings
        table = {
            "mode": "scd1",
            "schema": SCHEMA,
            "keys": ("id",),
            "encodings": {"at3": "epoch_ms"},
        }
        name, settings = with_silver(settings, pg.source, **table)
        clamped, settings = with_silver(settings, pg.source, infinite_times="clamp", **table)
        with pg_connect(settings) as conn:
            for row in ROWS:  # the arrays only in the last row
                conn.execute(f"INSERT INTO public.{pg.table} VALUES {row}")
        wait_for_records(settings, pg.topic, len(SNAPSHOT) + len(ROWS))
        run_ingest(spark, settings, pg.source, kind="cdc")

        result = run_refine(spark, settings, name)

        errors = sorted(
            (r["offset"], r["parse_error"]) for r in quarantine(spark, settings, name).collect()
        )
        assert errors == [
            (0, "undecodable: day"),
            (1, "undecodable: day"),
            (2, "undecodable: at"),
            (3, "undecodable: at_tz"),
            (4, "undecodable: day"),
            (8, "undecodable: at3"),
            (9, "undecodable: ats, days, at_tzs"),
        ]
        assert (result.rows_in, result.rows_quarantined) == (10, 7)
        day, at = date(2024, 1, 5), "2024-01-05 10:00:00"
        one, inf, nan = Decimal("1.00"), float("inf"), float("nan")
        kept: list[tuple[object, ...]] = [
            (4, day, at, at, nan, -inf, one, at, None, None, None),
            (5, day, at, at, -inf, inf, None, at, None, None, None),
            (6, day, at, at, 1.5, 2.5, Decimal("12.34"), at, None, None, None),
        ]
        same(stored(spark, settings, name), rows(spark, kept))

        result = run_refine(spark, settings, clamped)

        assert (result.rows_in, result.rows_quarantined) == (10, 0)
        latest, earliest = "9999-12-31 23:59:59.999999", "0001-01-01 00:00:00"
        extremes = [latest, earliest]
        clamped_rows: list[tuple[object, ...]] = [
            (1, day, latest, at, 1.0, 1.0, one, at, None, None, None),
            (2, day, at, earliest, 1.0, 1.0, one, at, None, None, None),
            (3, date(9999, 12, 31), at, at, 1.0, 1.0, one, at, None, None, None),
            (7, day, at, at, 1.0, 1.0, one, earliest, None, None, None),
            (
                *(8, day, at, at, 1.0, 1.0, one, at),
                [*extremes, "1582-10-04 12:00:00"],
                [date(9999, 12, 31), date(1, 1, 1)],
                extremes,
            ),
            (9, date(9999, 12, 31), at, at, 1.0, 1.0, one, at, None, None, None),
            (10, date(1, 1, 1), at, at, 1.0, 1.0, one, at, None, None, None),
        ]
        expected = rows(spark, kept + clamped_rows)
        same(stored(spark, settings, clamped), expected)


def same(actual: DataFrame, expected: DataFrame) -> None:
    assert_df_equality(
        actual, expected, ignore_row_order=True, ignore_nullable=True, allow_nan_equality=True
    )


# The timestamps as text (UTC): PySpark cannot collect 0001-01-01 00:00 of a TIMESTAMP.
TEXT_SCHEMA = SCHEMA.replace("TIMESTAMP", "STRING")
TIMES = {"at": "string", "at_tz": "string", "at3": "string"}
TIMES |= {"ats": "array<string>", "at_tzs": "array<string>"}


def rows(spark: SparkSession, data: list[tuple[object, ...]]) -> DataFrame:
    return spark.createDataFrame(data, TEXT_SCHEMA)


def stored(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    table = current(spark, settings, name).drop("_rescued_data")
    return table.select(*[F.col(c).cast(TIMES[c]) if c in TIMES else c for c in table.columns])
