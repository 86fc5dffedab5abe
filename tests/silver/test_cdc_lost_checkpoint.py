"""A lost refine checkpoint with silver kept, through real PostgreSQL and Debezium. The
restarted streams read bronze from its start again: every change already applied comes once
more (an insert of a key deleted since among them), and silver must neither lose the changes
that follow nor add a version for those it already holds. After each round SCD1's and SCD2's
current rows equal PostgreSQL, and SCD2's history is the one a clean run gives."""

from __future__ import annotations

from pyspark.sql import SparkSession

from lakehouse.core import fs
from lakehouse.core.settings import Settings
from lakehouse.silver.refine import checkpoint_path
from lakehouse.silver.scd2 import history_rows
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

FIRST: Round = (["INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c')"], 3)
# An update, a delete (its change and its tombstone: two records) and an insert.
SECOND: Round = (
    [
        "UPDATE {t} SET name = 'a2' WHERE id = 1",
        "DELETE FROM {t} WHERE id = 2",
        "INSERT INTO {t} VALUES (4, 'd')",
    ],
    4,
)
THIRD: Round = (["UPDATE {t} SET name = 'c2' WHERE id = 3", "INSERT INTO {t} VALUES (5, 'e')"], 2)


def test_a_lost_refine_checkpoint_leaves_cdc_silver_equal_to_postgres_and_its_history_clean(
    spark: SparkSession, kafka_up: Settings
) -> None:
    with debezium_table(kafka_up, DDL) as pg:
        source, settings = pg.source, pg.settings
        scd1, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
        scd2, settings = with_silver(settings, source, mode="scd2", schema=SCHEMA, keys=("id",))
        tables = (scd1, scd2)
        produced = rounds_equal_postgres(spark, pg, settings, [FIRST], tables, SCHEMA)
        # Lost after the first round, and again after the second (then bronze replays the
        # insert of key 2 as well as its delete).
        for changes in (SECOND, THIRD):
            for table in tables:
                checkpoint = checkpoint_path(settings, table)
                assert fs.exists(spark, checkpoint), checkpoint
                fs.delete(spark, checkpoint)
            produced = rounds_equal_postgres(
                spark, pg, settings, [changes], tables, SCHEMA, produced=produced
            )

        history = history_rows(silver_table(spark, settings, scd2)).collect()
        versions = sorted((r["id"], r["name"], r["__end_seq"] is None) for r in history)
        expected: list[Version] = [
            (1, "a", False),
            (1, "a2", True),
            (2, "b", False),
            (3, "c", False),
            (3, "c2", True),
            (4, "d", True),
            (5, "e", True),
        ]
        assert versions == sorted(expected)
