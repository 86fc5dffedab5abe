"""Kafka Connect SIGKILLed mid-stream and restarted: Debezium resumes from the offsets it last
flushed and sends again what it had sent since (at least once, at the same positions). Through
real PostgreSQL and Debezium, silver's current rows (SCD1 and SCD2) equal PostgreSQL after each
round and SCD2's history is the one a clean run gives: the re-sent changes add and lose
nothing. The test proves the re-send happened (bronze holds changes twice)."""

from __future__ import annotations

import os
import signal
import time

from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from lakehouse.devstack.connect import start_connect
from lakehouse.devstack.processes import pid_alive, state_paths
from lakehouse.silver.scd2 import history_rows
from tests.bronze.helpers import bronze, run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import (
    Round,
    debezium_table,
    rounds_equal_postgres,
    silver_table,
    with_silver,
)

SCHEMA = "id INT, name STRING"
DDL = ["CREATE TABLE public.{table} (id int PRIMARY KEY, name text)"]
Version = tuple[int, str, bool]  # id, name, still open
FIRST: list[Round] = [(["INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c')"], 3)]


def kill_connect() -> None:
    pidfile = state_paths().pidfile("connect")
    pid = int(pidfile.read_text().strip())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while pid_alive(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"Kafka Connect (pid {pid}) outlived SIGKILL")
        time.sleep(0.05)


def ingest_until_in_bronze(
    spark: SparkSession, settings: Settings, source: str, row_id: int, timeout_s: float = 90
) -> None:
    """Ingest the source until bronze holds a change of row `row_id`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run_ingest(spark, settings, source, kind="cdc")
        row = f"get_json_object(cdc_key, '$.id') = {row_id}"
        if bronze(spark, settings, source).where(row).take(1):
            return
        time.sleep(0.5)
    raise AssertionError(f"no change of row {row_id} reached bronze in {timeout_s} s")


def changes(attempt: int) -> Round:
    return (
        [
            f"UPDATE {{t}} SET name = 'a{attempt}' WHERE id = 1",
            f"UPDATE {{t}} SET name = 'b{attempt}' WHERE id = 2",
        ],
        2,
    )


def test_connect_killed_mid_stream_resends_and_silver_stays_one_clean_run(
    spark: SparkSession, kafka_up: Settings
) -> None:
    with debezium_table(kafka_up, DDL) as pg:
        source, settings = pg.source, pg.settings
        scd1, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
        scd2, settings = with_silver(settings, source, mode="scd2", schema=SCHEMA, keys=("id",))
        tables = (scd1, scd2)
        produced = rounds_equal_postgres(spark, pg, settings, FIRST, tables, SCHEMA)

        # The worker flushes offsets every second: killed right after the changes reach Kafka,
        # it has usually not flushed them yet. Each attempt is a new round of changes.
        resent, attempts = 0, 0
        while resent == 0 and attempts < 4:
            statements, records = changes(attempts)
            with pg_connect(settings) as conn:
                for statement in statements:
                    conn.execute(statement.format(t=f"public.{pg.table}"))
            produced += records
            wait_for_records(settings, pg.topic, produced, poll_s=0.01)
            try:
                kill_connect()
            finally:
                start_connect(settings)
            pg.register_again(settings)
            # A change after the restart: once it is in bronze, so is everything re-sent before
            # it. Waiting for the topic to hold one record more is not enough: the re-sent
            # records count too, and the change could come after them.
            with pg_connect(settings) as conn:
                conn.execute(
                    f"INSERT INTO public.{pg.table} VALUES ({10 + attempts}, 'n{attempts}')"
                )
            ingest_until_in_bronze(spark, settings, source, 10 + attempts)
            produced = rounds_equal_postgres(
                spark, pg, settings, [([], 0)], tables, SCHEMA, produced=produced + 1
            )
            total = bronze(spark, settings, source).count()
            resent, attempts = total - produced, attempts + 1
            produced = total  # what the topic holds, re-sent records included
        assert resent > 0, f"no change was re-sent in {attempts} kills"
        # The re-sent changes are the same changes (same key and position) again.
        rows = bronze(spark, settings, source).groupBy("cdc_key", "cdc_lsn").count()
        assert rows.where("count > 1").count() == resent

        last: Round = (["DELETE FROM {t} WHERE id = 3"], 2)  # the delete and its tombstone
        rounds_equal_postgres(spark, pg, settings, [last], tables, SCHEMA, produced=produced)
        history = history_rows(silver_table(spark, settings, scd2)).collect()
        versions = sorted((r["id"], r["name"], r["__end_seq"] is None) for r in history)
        expected: list[Version] = [
            (1, "a", False),
            *[(1, f"a{i}", i == attempts - 1) for i in range(attempts)],
            (2, "b", False),
            *[(2, f"b{i}", i == attempts - 1) for i in range(attempts)],
            (3, "c", False),
            *[(10 + i, f"n{i}", True) for i in range(attempts)],
        ]
        assert versions == sorted(expected)
