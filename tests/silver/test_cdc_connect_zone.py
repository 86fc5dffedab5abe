"""A Kafka Connect worker on a host whose zone is not UTC (`TZ=America/New_York`). Debezium reads
a `timestamp[]`'s and a `timestamptz[]`'s elements through java.sql.Timestamp in the worker JVM's
zone (probed): a local time that zone skips (2024-03-10 02:30, New York's spring-forward gap)
arrived an hour late, and a value before 1900 (the zone's local mean time) minutes off, while
top-level columns arrived right. Nothing downstream can tell such a value from a real one, so the
dev stack starts its worker in UTC whatever the host's zone, and silver equals PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from lakehouse.devstack.connect import start_connect, stop_connect
from tests.bronze.helpers import run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import current, debezium_table, run_refine, with_silver

ZONE = "America/New_York"
COLUMNS = "id int PRIMARY KEY, at timestamp, ats timestamp[], at_tzs timestamptz[]"
SCHEMA = "id INT, at TIMESTAMP, ats ARRAY<TIMESTAMP>, at_tzs ARRAY<TIMESTAMP>"
ROW = (
    "(1, '2024-03-10 02:30', "
    "ARRAY['2024-03-10 02:30', '1850-06-01 12:00', '2024-07-05 10:00']::timestamp[], "
    "ARRAY['2024-03-10 02:30+00', '1850-06-01 12:00+00']::timestamptz[])"
)
GAP, OLD = datetime(2024, 3, 10, 2, 30), datetime(1850, 6, 1, 12, 0)
EXPECTED = [(1, GAP, [GAP, OLD, datetime(2024, 7, 5, 10, 0)], [GAP, OLD])]


@pytest.fixture
def worker_in_new_york(kafka_up: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The shared worker restarted by the dev stack with the host's zone set to New York, and
    restarted as it was afterwards."""
    stop_connect(kafka_up)
    try:
        # Only while the worker starts: libc reads TZ too, and PySpark's timestamps go through it.
        with monkeypatch.context() as host:
            host.setenv("TZ", ZONE)
            start_connect(kafka_up)
        yield
    finally:
        stop_connect(kafka_up)
        start_connect(kafka_up)


@pytest.mark.usefixtures("worker_in_new_york")
def test_a_worker_on_a_host_outside_utc_sends_array_timestamps_as_postgresql_holds_them(
    spark: SparkSession, kafka_up: Settings
) -> None:
    ddl = ["CREATE TABLE public.{table} (" + COLUMNS + ")"]
    with debezium_table(kafka_up, ddl) as pg:
        name, settings = with_silver(
            pg.settings, pg.source, mode="scd1", schema=SCHEMA, keys=("id",)
        )
        with pg_connect(settings) as conn:
            conn.execute(f"INSERT INTO public.{pg.table} VALUES {ROW}")
        wait_for_records(settings, pg.topic, 1)
        run_ingest(spark, settings, pg.source, kind="cdc")
        assert run_refine(spark, settings, name).rows_quarantined == 0
        assert_df_equality(
            current(spark, settings, name).select("id", "at", "ats", "at_tzs"),
            spark.createDataFrame(EXPECTED, SCHEMA),
            ignore_nullable=True,
        )
