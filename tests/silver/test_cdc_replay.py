"""Debezium is at-least-once: a connector re-created with a new slot (a lost slot, lost
offsets, a rebuilt Connect cluster) snapshots again, sending every live row a second time, as
`r` at a newer position, into the same topic. Through real PostgreSQL and Debezium, silver's
current rows (SCD1 and SCD2) equal PostgreSQL after each round, and SCD2's history is what one
clean run gives: the replay adds no version and loses none."""

from __future__ import annotations

from pyspark.sql import SparkSession

from lakehouse.connectors.debezium import delete_connector, register_postgres_connector
from lakehouse.core.settings import Settings
from lakehouse.silver.scd2 import history_rows
from tests.bronze.helpers import run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import (
    Round,
    debezium_table,
    rounds_equal_postgres,
    run_refine,
    silver_table,
    with_silver,
)

SCHEMA = "id INT, name STRING, country STRING"
DDL = ["CREATE TABLE public.{table} (id int PRIMARY KEY, name text, country text)"]
Version = tuple[int, str, str, bool]  # id, name, country, still open

BEFORE: list[Round] = [
    (["INSERT INTO {t} VALUES (1, 'a', 'NO'), (2, 'b', 'SE'), (3, 'c', 'DK')"], 3),
    (
        [
            "UPDATE {t} SET name = 'a2' WHERE id = 1",  # tracked: a new version
            "UPDATE {t} SET country = 'FI' WHERE id = 2",  # not tracked: in place
            "DELETE FROM {t} WHERE id = 3",  # the delete and its tombstone
        ],
        4,
    ),
]
VERSIONS_BEFORE: list[Version] = [
    (1, "a", "NO", False),
    (1, "a2", "NO", True),
    (2, "b", "FI", True),
    (3, "c", "DK", False),
]
AFTER: list[Round] = [
    (
        [
            "UPDATE {t} SET name = 'b2' WHERE id = 2",
            "INSERT INTO {t} VALUES (3, 'c2', 'NO')",
            "DELETE FROM {t} WHERE id = 1",
        ],
        4,
    ),
]
VERSIONS_AFTER: list[Version] = [
    (1, "a", "NO", False),
    (1, "a2", "NO", False),
    (2, "b", "FI", False),
    (2, "b2", "FI", True),
    (3, "c", "DK", False),
    (3, "c2", "NO", True),
]


def test_a_resnapshot_into_the_same_topic_leaves_silver_as_one_clean_run(
    spark: SparkSession, kafka_up: Settings
) -> None:
    with debezium_table(kafka_up, DDL) as pg:
        source, settings = pg.source, pg.settings
        scd1, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
        scd2, settings = with_silver(
            settings, source, mode="scd2", schema=SCHEMA, keys=("id",), track_columns=("name",)
        )

        def versions() -> list[Version]:
            history = history_rows(silver_table(spark, settings, scd2)).collect()
            return sorted(
                (r["id"], r["name"], r["country"], r["__end_seq"] is None) for r in history
            )

        produced = rounds_equal_postgres(spark, pg, settings, BEFORE, (scd1, scd2), SCHEMA)
        assert versions() == VERSIONS_BEFORE

        # The connector re-created under a new name and slot, the same topic: it snapshots the
        # live rows (ids 1 and 2) again, then streams.
        delete_connector(settings, pg.connector)
        again = f"{pg.connector}-again"
        register_postgres_connector(
            settings, again, pg.prefix, [f"public.{pg.table}"], schemas_enable=False, unwrap=False
        )
        try:
            produced += 2
            wait_for_records(settings, pg.topic, produced)
            run_ingest(spark, settings, source, kind="cdc")
            for name in (scd1, scd2):
                assert run_refine(spark, settings, name).rows_quarantined == 0, name
            assert versions() == VERSIONS_BEFORE  # the snapshot changed nothing
            with pg_connect(settings) as conn:
                live = conn.execute(f"SELECT id, name, country FROM public.{pg.table}").fetchall()
            current = silver_table(spark, settings, scd1).where("NOT __deleted")
            assert sorted(
                tuple(r) for r in current.select("id", "name", "country").collect()
            ) == sorted(live)

            rounds_equal_postgres(
                spark, pg, settings, AFTER, (scd1, scd2), SCHEMA, produced=produced
            )
            assert versions() == VERSIONS_AFTER
        finally:
            delete_connector(settings, again)
