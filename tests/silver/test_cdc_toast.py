"""Debezium's unchanged-TOAST placeholder in every column type PostgreSQL stores out of line
(text, bytea, text[], int[]: each arrives in its own shape), through real PostgreSQL and
Debezium: an update that leaves large values alone, and a primary-key update (Debezium's
delete of the old key plus create of the new one, whose unchanged values arrive as the
placeholder) end with silver equal to PostgreSQL, SCD1 and SCD2; a placeholder with no value
to take is quarantined, never stored."""

from __future__ import annotations

from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from tests.silver.helpers import Round, debezium_table, rounds_equal_postgres, with_silver

SCHEMA = "id INT, name STRING, notes STRING, blob BINARY, tags ARRAY<STRING>, nums ARRAY<INT>"
DDL = [
    "CREATE TABLE public.{table} (id int PRIMARY KEY, name text, notes text, blob bytea, "
    "tags text[], nums int[])",
    *[
        f"ALTER TABLE public.{{table}} ALTER COLUMN {c} SET STORAGE EXTERNAL"
        for c in ("notes", "blob", "tags", "nums")
    ],
]
# Each over PostgreSQL's 2 kB TOAST threshold, stored out of line uncompressed.
LARGE = (
    "n" * 3000,
    bytes(range(256)) * 12,
    [f"tag-{i:05d}" for i in range(300)],
    list(range(1000)),
)
ROUNDS: list[Round] = [
    (["INSERT INTO {t} VALUES (1, 'a', %s, %s, %s, %s)", "INSERT INTO {t} VALUES (2, 'b')"], 2),
    (["UPDATE {t} SET name = 'a2' WHERE id = 1"], 1),  # the large values are unchanged
    (
        [
            "UPDATE {t} SET id = 10 WHERE id = 1",  # delete of 1, create of 10 (+ tombstone)
            "UPDATE {t} SET id = 20, name = 'b2' WHERE id = 2",
        ],
        6,
    ),
    (
        [
            "UPDATE {t} SET name = 'a3' WHERE id = 10",
            "UPDATE {t} SET id = 11 WHERE id = 10",  # the key's value is earlier in the batch
        ],
        4,
    ),
]


def test_unchanged_toast_values_of_every_type_survive_updates_and_key_changes(
    spark: SparkSession, kafka_up: Settings
) -> None:
    with debezium_table(kafka_up, DDL) as pg:
        source, settings = pg.source, pg.settings
        scd1, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
        scd2, settings = with_silver(
            settings, source, mode="scd2", schema=SCHEMA, keys=("id",), track_columns=("name",)
        )
        rounds_equal_postgres(spark, pg, settings, ROUNDS, (scd1, scd2), SCHEMA, LARGE)
