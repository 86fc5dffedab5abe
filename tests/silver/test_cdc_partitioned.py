"""A PostgreSQL table partitioned by month, captured by naming its parent, as a user declares
it (`connector: tables: [public.orders]`): PostgreSQL publishes a partition's changes as the
partition unless the publication says otherwise, and Debezium drops a change of a table its
include list does not name. So only the snapshot (which reads the parent) arrived, and every
insert, update and delete after it was lost without a trace. Here the connector's publication
already exists, as one made before the fix left it. Silver must equal PostgreSQL through
inserts (also into a partition made while it streams), updates, deletes, a row moved to another
partition and a truncate."""

from __future__ import annotations

from datetime import date

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.connectors.debezium import publication_name
from lakehouse.core.settings import Settings
from tests.bronze.helpers import run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import current, debezium_table, run_refine, with_silver

Row = tuple[int, date, str]

SCHEMA = "id INT, day DATE, v STRING"
DDL = [
    "CREATE TABLE public.{table} (id int, day date, v text, PRIMARY KEY (id, day)) "
    "PARTITION BY RANGE (day)",
    "CREATE TABLE public.{table}_2024_01 PARTITION OF public.{table} "
    "FOR VALUES FROM ('2024-01-01') TO ('2024-02-01')",
    "CREATE TABLE public.{table}_2024_02 PARTITION OF public.{table} "
    "FOR VALUES FROM ('2024-02-01') TO ('2024-03-01')",
]


def test_every_change_of_a_partitioned_table_reaches_silver_as_its_parents(
    spark: SparkSession, kafka_up: Settings
) -> None:
    def snapshot(table: str, slot: str) -> None:
        with pg_connect(kafka_up) as conn:
            # The connector's publication as a connector applied before the option was on
            # left it: publishing partitions as themselves.
            conn.execute(f"CREATE PUBLICATION {publication_name(slot)} FOR TABLE public.{table}")
            conn.execute(
                f"INSERT INTO public.{table} VALUES (1, '2024-01-05', 'a'), (2, '2024-02-05', 'b')"
            )

    with debezium_table(kafka_up, DDL, before_connector=snapshot) as pg:
        table, topic, source, settings = pg.table, pg.topic, pg.source, pg.settings
        keys = ("id", "day")
        scd1, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=keys)
        scd2, settings = with_silver(settings, source, mode="scd2", schema=SCHEMA, keys=keys)

        def postgres() -> list[Row]:
            with pg_connect(settings) as conn:
                return sorted(conn.execute(f"SELECT id, day, v FROM public.{table}").fetchall())

        def sync_and_compare(records: int, expected: list[Row]) -> None:
            wait_for_records(settings, topic, records)
            run_ingest(spark, settings, source, kind="cdc")
            assert postgres() == expected
            for name in (scd1, scd2):
                assert run_refine(spark, settings, name).rows_quarantined == 0, name
                assert_df_equality(
                    current(spark, settings, name).drop("_rescued_data"),
                    spark.createDataFrame(expected, SCHEMA),
                    ignore_row_order=True,
                    ignore_nullable=True,
                )

        sync_and_compare(2, [(1, date(2024, 1, 5), "a"), (2, date(2024, 2, 5), "b")])

        with pg_connect(settings) as conn:
            # A month's partition made while the connector streams, as a monthly job does.
            conn.execute(
                f"CREATE TABLE public.{table}_2024_03 PARTITION OF public.{table} "
                "FOR VALUES FROM ('2024-03-01') TO ('2024-04-01')"
            )
            conn.execute(
                f"INSERT INTO public.{table} VALUES (3, '2024-01-20', 'c'), (4, '2024-03-20', 'd')"
            )
            conn.execute(f"UPDATE public.{table} SET v = 'a2' WHERE id = 1")
            conn.execute(f"DELETE FROM public.{table} WHERE id = 2")
            # Into the other partition: PostgreSQL publishes a delete and an insert.
            conn.execute(f"UPDATE public.{table} SET day = '2024-02-21' WHERE id = 3")
        # 2 inserts, an update, a delete and its tombstone, the move's delete, tombstone, insert
        moved = [(1, date(2024, 1, 5), "a2"), (3, date(2024, 2, 21), "c")]
        sync_and_compare(2 + 8, [*moved, (4, date(2024, 3, 20), "d")])

        with pg_connect(settings) as conn:
            conn.execute(f"TRUNCATE public.{table}")
            conn.execute(f"INSERT INTO public.{table} VALUES (5, '2024-01-31', 'e')")
        sync_and_compare(2 + 8 + 2, [(5, date(2024, 1, 31), "e")])
