"""PostgreSQL's special values through the real Debezium connector with its default modes:
an infinite `timestamp`, `timestamptz` or `date` (sent as the extreme count or the word
`infinity`) has no Spark value, so its change is quarantined naming the column; a `real` or
`double precision` NaN/Infinity is stored as such; a `numeric` NaN reaches Kafka as null in
`precise` mode (Debezium's documented loss: only `string` or `double` mode keeps it), so silver
can only store NULL. This pins what the README promises for these values; a connector that
changed how it sends them would fail here."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from tests.bronze.helpers import run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import current, debezium_table, quarantine, run_refine, with_silver

COLUMNS = (
    "id int PRIMARY KEY, day date, at timestamp, at_tz timestamptz, r real, "
    "d double precision, amount numeric(12,2)"
)
SCHEMA = "id INT, day DATE, at TIMESTAMP, at_tz TIMESTAMP, r FLOAT, d DOUBLE, amount DECIMAL(12,2)"
ORDINARY = "'2024-01-05', '2024-01-05 10:00:00', '2024-01-05 10:00:00+00'"
# One special value per row, so each row's fate names one behaviour (offsets 0-5, in order).
ROWS = [
    "(1, '2024-01-05', 'infinity', '2024-01-05 10:00:00+00', 1, 1, 1)",
    "(2, '2024-01-05', '2024-01-05 10:00:00', '-infinity', 1, 1, 1)",
    "(3, 'infinity', '2024-01-05 10:00:00', '2024-01-05 10:00:00+00', 1, 1, 1)",
    f"(4, {ORDINARY}, 'NaN', '-Infinity', 1)",
    f"(5, {ORDINARY}, '-Infinity', 'Infinity', 'NaN')",
    f"(6, {ORDINARY}, 1.5, 2.5, 12.34)",
]


def test_infinite_times_are_quarantined_float_specials_stored_and_numeric_nan_arrives_null(
    spark: SparkSession, kafka_up: Settings
) -> None:
    with debezium_table(kafka_up, ["CREATE TABLE public.{table} (" + COLUMNS + ")"]) as pg:
        settings = pg.settings
        name, settings = with_silver(settings, pg.source, mode="scd1", schema=SCHEMA, keys=("id",))
        with pg_connect(settings) as conn:
            conn.execute(f"INSERT INTO public.{pg.table} VALUES {', '.join(ROWS)}")
        wait_for_records(settings, pg.topic, len(ROWS))
        run_ingest(spark, settings, pg.source, kind="cdc")

        result = run_refine(spark, settings, name)

        errors = sorted(
            (r["offset"], r["parse_error"]) for r in quarantine(spark, settings, name).collect()
        )
        assert errors == [
            (0, "undecodable: at"),
            (1, "undecodable: at_tz"),
            (2, "undecodable: day"),
        ]
        assert (result.rows_in, result.rows_quarantined) == (6, 3)
        day, at = date(2024, 1, 5), datetime(2024, 1, 5, 10, 0)
        inf, nan = float("inf"), float("nan")
        expected = spark.createDataFrame(
            [
                (4, day, at, at, nan, -inf, Decimal("1.00")),
                (5, day, at, at, -inf, inf, None),
                (6, day, at, at, 1.5, 2.5, Decimal("12.34")),
            ],
            SCHEMA,
        )
        assert_df_equality(
            current(spark, settings, name).drop("_rescued_data"),
            expected,
            ignore_row_order=True,
            ignore_nullable=True,
            allow_nan_equality=True,
        )
