"""A real `TRUNCATE` through Debezium (which the connector config now emits; Debezium skips them
by default), alone and followed by a reload of the same keys inside one micro-batch, the nightly
truncate-and-reload pattern: SCD1 equals PostgreSQL, and SCD2 closes every version the truncate
removed, at the truncate, and keeps the reloaded versions open."""

from __future__ import annotations

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from tests.bronze.helpers import run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import current, debezium_table, run_refine, silver_table, with_silver

SCHEMA = "id INT, name STRING"


def test_truncate_and_reload_in_one_batch_keeps_the_reload_and_closes_the_old_versions(
    spark: SparkSession, kafka_up: Settings
) -> None:
    ddl = ["CREATE TABLE public.{table} (id int PRIMARY KEY, name text)"]
    with debezium_table(kafka_up, ddl) as pg:
        table, topic, source, settings = pg.table, pg.topic, pg.source, pg.settings
        scd1, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
        scd2, settings = with_silver(settings, source, mode="scd2", schema=SCHEMA, keys=("id",))

        def sync(records: int) -> None:
            wait_for_records(settings, topic, records)
            run_ingest(spark, settings, source, kind="cdc")
            for name in (scd1, scd2):
                assert run_refine(spark, settings, name).rows_quarantined == 0, name

        def postgres() -> list[tuple[int, str]]:
            with pg_connect(settings) as conn:
                return sorted(conn.execute(f"SELECT id, name FROM public.{table}").fetchall())

        with pg_connect(settings) as conn:
            conn.execute(f"INSERT INTO public.{table} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        sync(3)
        with pg_connect(settings) as conn:
            conn.execute(f"TRUNCATE public.{table}")
            conn.execute(f"INSERT INTO public.{table} VALUES (1, 'a2'), (2, 'b')")
        sync(3 + 1 + 2)
        assert postgres() == [(1, "a2"), (2, "b")]
        for name in (scd1, scd2):
            assert_df_equality(
                current(spark, settings, name).drop("_rescued_data"),
                spark.createDataFrame(postgres(), SCHEMA),
                ignore_row_order=True,
                ignore_nullable=True,
            )
        history = silver_table(spark, settings, scd2).collect()
        closed = sorted((r["id"], r["name"]) for r in history if r["__end_seq"] is not None)
        opened = sorted((r["id"], r["name"]) for r in history if r["__end_seq"] is None)
        assert closed == [(1, "a"), (2, "b"), (3, "c")]
        assert opened == [(1, "a2"), (2, "b")]
        truncated_at = {r["__end_seq"] for r in history if r["__end_seq"] is not None}
        assert len(truncated_at) == 1, "every old version closes at the truncate"
        assert all(
            r["__start_seq"] > next(iter(truncated_at)) for r in history if r["__end_seq"] is None
        )

        with pg_connect(settings) as conn:
            conn.execute(f"TRUNCATE public.{table}")
        sync(3 + 1 + 2 + 1)
        for name in (scd1, scd2):
            assert current(spark, settings, name).count() == 0, name
        assert len(silver_table(spark, settings, scd2).collect()) == 5
