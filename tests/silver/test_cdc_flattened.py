"""ExtractNewRecordState-flattened records with the SMT's default delete handling
(`delete.tombstone.handling.mode=tombstone`): a delete reaches Kafka only as a tombstone, a
key with a null value and no position. Through real PostgreSQL and Debezium, deletes in the
batch of their key's insert, in a later batch, and followed by a re-insert of the same key,
end with silver equal to PostgreSQL: SCD1 current rows and SCD2 versions."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from lakehouse.silver.scd2 import history_rows
from tests.silver.helpers import (
    Round,
    debezium_table,
    rounds_equal_postgres,
    silver_table,
    with_silver,
)

SCHEMA = "id INT, name STRING"
Version = tuple[int, str, bool]  # id, name, still open

# What a user gets who adds the SMT with the metadata silver orders by and keeps its defaults.
SMT_DEFAULTS = {"transforms.unwrap.delete.tombstone.handling.mode": "tombstone"}

ROUNDS: list[Round] = [
    (
        [
            "INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e'), (6, 'f')",
            "UPDATE {t} SET name = 'b2' WHERE id = 2",
            "DELETE FROM {t} WHERE id = 3",  # inserted in the same batch
            "INSERT INTO {t} VALUES (7, 'g')",
            "DELETE FROM {t} WHERE id = 7",
            "INSERT INTO {t} VALUES (7, 'g2')",  # deleted and back in one batch
        ],
        6 + 1 + 1 + 3,
    ),
    (
        [
            "DELETE FROM {t} WHERE id = 1",  # inserted in an earlier batch
            "UPDATE {t} SET name = 'd2' WHERE id = 4",
            "DELETE FROM {t} WHERE id = 4",
            "DELETE FROM {t} WHERE id = 7",
            "INSERT INTO {t} VALUES (7, 'g3')",
            "DELETE FROM {t} WHERE id = 5",
        ],
        6,
    ),
    (["INSERT INTO {t} VALUES (1, 'a2')"], 1),  # deleted in an earlier batch, back
]

EXPECTED_VERSIONS: list[Version] = [
    (1, "a", False),
    (1, "a2", True),
    (2, "b", False),
    (2, "b2", True),
    (3, "c", False),
    (4, "d", False),
    (4, "d2", False),
    (5, "e", False),
    (6, "f", True),
    (7, "g", False),
    (7, "g2", False),
    (7, "g3", True),
]


@pytest.mark.parametrize("schemas_enable", [False, True], ids=["schemas_off", "schemas_on"])
def test_tombstone_only_deletes_of_flattened_records_delete_in_silver(
    spark: SparkSession, kafka_up: Settings, schemas_enable: bool
) -> None:
    ddl = ["CREATE TABLE public.{table} (id int PRIMARY KEY, name text)"]
    with debezium_table(
        kafka_up,
        ddl,
        schemas_enable=schemas_enable,
        unwrap=True,
        connector_config=SMT_DEFAULTS,
    ) as pg:
        source, settings = pg.source, pg.settings
        scd1, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
        scd2, settings = with_silver(settings, source, mode="scd2", schema=SCHEMA, keys=("id",))
        rounds_equal_postgres(spark, pg, settings, ROUNDS, (scd1, scd2), SCHEMA)
        history = history_rows(silver_table(spark, settings, scd2)).collect()
        versions = sorted((r["id"], r["name"], r["__end_seq"] is None) for r in history)
        assert versions == EXPECTED_VERSIONS
        # A version a tombstone closed has an end time, so as-of queries see it closed.
        assert all(r["__end_at"] is not None for r in history if r["__end_seq"] is not None)
