"""A transaction open while Debezium snapshots a table commits after the snapshot, with a change
whose LSN is below the snapshot rows' LSN (the snapshot's position is where the WAL was when it
started; the open transaction wrote its change before that). Only Kafka order says the change is
newer than the snapshot row: silver must end equal to PostgreSQL, and SCD2 must keep the
snapshot's version before the change's, not after.

Reproduced with real PostgreSQL and Debezium: the slot is created before the connector (an
existing slot gives no exported snapshot, so the snapshot does not wait for open transactions,
as it does when Debezium creates the slot)."""

from __future__ import annotations

from typing import Any

import psycopg
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from tests.bronze.helpers import bronze, run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import current, debezium_table, run_refine, silver_table, with_silver

SCHEMA = "id INT, name STRING"


def test_a_transaction_open_during_the_snapshot_replaces_the_snapshot_row_it_commits_after(
    spark: SparkSession, kafka_up: Settings
) -> None:
    held: list[psycopg.Connection[Any]] = []

    def open_a_transaction_then_create_the_slot(table: str, slot: str) -> None:
        with pg_connect(kafka_up) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            conn.execute(f"CREATE PUBLICATION {slot[:59]}_pub FOR TABLE public.{table}")
        session_a = pg_connect(kafka_up)
        held.append(session_a)
        session_a.execute("BEGIN")
        session_a.execute(f"UPDATE public.{table} SET name = 'after' WHERE id = 1")
        # Another session commits, so the WAL (and the snapshot's position) moves past the
        # open transaction's change.
        with pg_connect(kafka_up) as conn:
            conn.execute(f"INSERT INTO public.{table} VALUES (3, 'c')")

    ddl = [
        "CREATE TABLE public.{table} (id int PRIMARY KEY, name text)",
        "INSERT INTO public.{table} VALUES (1, 'before'), (2, 'b')",
    ]
    with debezium_table(
        kafka_up, ddl, before_connector=open_a_transaction_then_create_the_slot
    ) as pg:
        try:
            settings, source = pg.settings, pg.source
            scd1, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
            scd2, settings = with_silver(settings, source, mode="scd2", schema=SCHEMA, keys=("id",))
            wait_for_records(settings, pg.topic, 3)  # the snapshot: ids 1 ('before'), 2, 3
            held[0].execute("COMMIT")
            wait_for_records(settings, pg.topic, 4)
        finally:
            for session in held:
                session.close()
        run_ingest(spark, settings, source, kind="cdc")
        # The race happened: the update arrived last with a position below the snapshot's.
        arrived = bronze(spark, settings, source).orderBy("offset").collect()
        assert [r["cdc_op"] for r in arrived] == ["r", "r", "r", "u"]
        assert arrived[-1]["cdc_lsn"] < min(r["cdc_lsn"] for r in arrived[:3])
        for name in (scd1, scd2):
            assert run_refine(spark, settings, name).rows_quarantined == 0, name
            assert_df_equality(
                current(spark, settings, name).drop("_rescued_data"),
                spark.createDataFrame([(1, "after"), (2, "b"), (3, "c")], SCHEMA),
                ignore_row_order=True,
                ignore_nullable=True,
            )
        versions = silver_table(spark, settings, scd2).where("id = 1").orderBy("__start_seq")
        assert [(r["name"], r["__end_seq"] is None) for r in versions.collect()] == [
            ("before", False),
            ("after", True),
        ]
