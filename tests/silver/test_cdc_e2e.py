"""Real end to end: random inserts, updates and deletes on a PostgreSQL table, through the real
Debezium connector, Kafka, `ingest_cdc` and `refine_silver`, end with silver equal to
`SELECT * FROM` the table after every round: SCD1 current rows and SCD2 current versions.

The table keeps PostgreSQL's REPLICA IDENTITY DEFAULT, so deletes carry only the key, and a
`notes` column stored out of line (TOAST) that most updates leave alone, so Debezium sends its
unchanged-TOAST placeholder instead of the value and silver must keep the old one."""

from __future__ import annotations

import random
import string
from typing import Any

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.connector_specs import TOAST_PLACEHOLDER
from lakehouse.core.settings import Settings
from tests.bronze.helpers import bronze, run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import current, debezium_table, run_refine, with_silver

COLUMNS = ("customer_id", "name", "email", "country", "notes", "updated_at")
SCHEMA = (
    "customer_id INT, name STRING, email STRING, country STRING, notes STRING, updated_at TIMESTAMP"
)
COUNTRIES = ("NO", "SE", "DK", "FI", None)


def long_text(rng: random.Random) -> str:
    """Over PostgreSQL's 2 kB TOAST threshold; with STORAGE EXTERNAL it is moved out of line
    uncompressed, so an update that leaves it alone sends Debezium's placeholder."""
    return "".join(rng.choices(string.ascii_letters, k=3000))


def random_round(conn: Any, table: str, rng: random.Random, live: set[int], first: int) -> int:
    """25 random operations, some grouped in transactions; returns the Kafka records they make
    (a delete makes two: the change and its tombstone)."""
    records, next_id = 0, first
    for _ in range(25):
        op = rng.choice(["insert", "insert", "update", "update", "delete"]) if live else "insert"
        with conn.transaction():
            if op == "insert":
                notes = rng.choice([long_text(rng), "short", None])
                conn.execute(
                    f"INSERT INTO public.{table} VALUES (%s, %s, %s, %s, %s, now())",
                    (next_id, f"n{next_id}", f"c{next_id}@x.io", rng.choice(COUNTRIES), notes),
                )
                live.add(next_id)
                next_id, records = next_id + 1, records + 1
            elif op == "update":
                for key in rng.sample(sorted(live), k=min(len(live), rng.randint(1, 3))):
                    if rng.random() < 0.2:  # rewrites the TOASTed value too
                        conn.execute(
                            f"UPDATE public.{table} SET notes = %s WHERE customer_id = %s",
                            (long_text(rng), key),
                        )
                    else:
                        conn.execute(
                            f"UPDATE public.{table} SET name = %s, country = %s, "
                            "updated_at = now() WHERE customer_id = %s",
                            (f"n{key}-{rng.randint(0, 999)}", rng.choice(COUNTRIES), key),
                        )
                    records += 1
            else:
                key = rng.choice(sorted(live))
                conn.execute(f"DELETE FROM public.{table} WHERE customer_id = %s", (key,))
                live.discard(key)
                records += 2
    return records


def postgres_rows(spark: SparkSession, settings: Settings, table: str) -> DataFrame:
    with pg_connect(settings) as conn:
        rows = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM public.{table}").fetchall()
    return spark.createDataFrame(rows, SCHEMA)


def test_postgres_through_debezium_to_silver(spark: SparkSession, kafka_up: Settings) -> None:
    ddl = [
        "CREATE TABLE public.{table} (customer_id int PRIMARY KEY, name text NOT NULL, "
        "email text, country text, notes text, updated_at timestamptz)",
        "ALTER TABLE public.{table} ALTER COLUMN notes SET STORAGE EXTERNAL",
    ]
    with debezium_table(kafka_up, ddl) as pg:
        table, topic, source, settings = pg.table, pg.topic, pg.source, pg.settings
        scd1, settings = with_silver(
            settings, source, mode="scd1", schema=SCHEMA, keys=("customer_id",)
        )
        scd2, settings = with_silver(
            settings,
            source,
            mode="scd2",
            schema=SCHEMA,
            keys=("customer_id",),
            track_columns=("name", "country"),
        )
        rng = random.Random(20261123)  # noqa: S311 - test data
        live: set[int] = set()
        produced = 0
        for round_ in range(3):
            with pg_connect(settings) as conn:
                produced += random_round(conn, table, rng, live, first=100 * round_ + 1)
            wait_for_records(settings, topic, produced)
            run_ingest(spark, settings, source, kind="cdc")
            for name in (scd1, scd2):
                result = run_refine(spark, settings, name)
                assert result.rows_quarantined == 0, f"round {round_}: {name} quarantined rows"
                actual = current(spark, settings, name).select(*COLUMNS)
                assert_df_equality(
                    actual,
                    postgres_rows(spark, settings, table),
                    ignore_row_order=True,
                    ignore_nullable=True,
                )
        # The run really exercised the placeholder path: updates that left a TOASTed value alone.
        toasted = bronze(spark, settings, source).where(
            F.col("value").cast("string").contains(TOAST_PLACEHOLDER)
        )
        assert toasted.count() >= 3, "no unchanged-TOAST placeholder reached bronze"
