"""Debezium's unchanged-TOAST placeholder in every column type PostgreSQL stores out of line
(text, bytea, text[], int[], date[], uuid[], bytea[], hstore in map and json modes: each
arrives in its own shape), through real PostgreSQL and
Debezium: an update that leaves large values alone, and a primary-key update (Debezium's
delete of the old key plus create of the new one, whose unchanged values arrive as the
placeholder) end with silver equal to PostgreSQL, SCD1 and SCD2; a placeholder with no value
to take is quarantined, never stored."""

from __future__ import annotations

import uuid
from datetime import date, timedelta

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


# The types whose placeholder Debezium shapes apart (its UnchangedToastedPlaceholder): a date[]
# arrives as the placeholder's byte codes (read as epoch days), a uuid[] as a one-element array
# of the UUID named by the placeholder's bytes, a bytea[] as a one-element array of its bytes,
# an hstore as the map {placeholder: placeholder} (or that map's JSON text, in json mode), a
# bigint[] as the codes (read as doubles in an ARRAY<DOUBLE>).
SHAPED_DDL = [
    "CREATE EXTENSION IF NOT EXISTS hstore",
    "CREATE TABLE public.{table} (id int PRIMARY KEY, name text, days date[], ids uuid[], "
    "bins bytea[], h hstore, b64 bytea, codes int[], nums bigint[])",
    *[
        f"ALTER TABLE public.{{table}} ALTER COLUMN {c} SET STORAGE EXTERNAL"
        for c in ("days", "ids", "bins", "h", "b64", "codes", "nums")
    ],
]
SHAPED_LARGE = (
    [date(2000, 1, 1) + timedelta(days=i) for i in range(1000)],
    [str(uuid.UUID(int=i * 7919)) for i in range(300)],
    [bytes(range(256)) * 12, b"x" * 900],
    "v" * 3000,
    bytes(range(256)) * 12,  # read as STRING: base64 text
    list(range(1000)),  # read as ARRAY<STRING>: each number's text
    list(range(0, 3000, 3)),  # read as ARRAY<DOUBLE> (the placeholder: its codes as doubles)
)
SHAPED_ROUNDS: list[Round] = [
    (
        [
            "INSERT INTO {t} VALUES (1, 'a', %s, %s::uuid[], %s, hstore('k', %s), %s, %s, %s)",
            "INSERT INTO {t} VALUES (2, 'b')",
        ],
        2,
    ),
    *ROUNDS[1:],
]
# PostgreSQL's base64 breaks lines every 76 characters; Kafka's JSON does not.
SHAPED_TAIL = (
    "translate(encode(b64, 'base64'), E'\\n', '') AS b64, codes::text[] AS codes, "
    "nums::float8[] AS nums"
)


def test_unchanged_toast_values_debezium_shapes_by_type_are_never_stored_as_data(
    spark: SparkSession, kafka_up: Settings
) -> None:
    schema = (
        "id INT, name STRING, days ARRAY<DATE>, ids ARRAY<STRING>, bins ARRAY<BINARY>, "
        "h MAP<STRING,STRING>, b64 STRING, codes ARRAY<STRING>, nums ARRAY<DOUBLE>"
    )
    with debezium_table(
        kafka_up, SHAPED_DDL, connector_config={"hstore.handling.mode": "map"}
    ) as pg:
        source, settings = pg.source, pg.settings
        scd1, settings = with_silver(settings, source, mode="scd1", schema=schema, keys=("id",))
        scd2, settings = with_silver(
            settings, source, mode="scd2", schema=schema, keys=("id",), track_columns=("name",)
        )
        rounds_equal_postgres(
            spark,
            pg,
            settings,
            SHAPED_ROUNDS,
            (scd1, scd2),
            schema,
            SHAPED_LARGE,
            pg_columns=f"id, name, days, ids::text[], bins, hstore_to_json(h) AS h, {SHAPED_TAIL}",
        )


def test_an_unchanged_hstore_in_json_mode_is_never_stored_as_data(
    spark: SparkSession, kafka_up: Settings
) -> None:
    # Only the shape differs from map mode (the placeholder map's JSON text in a STRING), so
    # one table of the hstore alone, SCD1 (SCD2 resolves a placeholder the same way: above).
    ddl = [
        "CREATE EXTENSION IF NOT EXISTS hstore",
        "CREATE TABLE public.{table} (id int PRIMARY KEY, name text, h hstore)",
        "ALTER TABLE public.{table} ALTER COLUMN h SET STORAGE EXTERNAL",
    ]
    rounds: list[Round] = [
        (
            [
                "INSERT INTO {t} VALUES (1, 'a', hstore('k', %s))",
                "INSERT INTO {t} VALUES (2, 'b')",
            ],
            2,
        ),
        *ROUNDS[1:],
    ]
    schema = "id INT, name STRING, h STRING"
    with debezium_table(kafka_up, ddl, connector_config={"hstore.handling.mode": "json"}) as pg:
        scd1, settings = with_silver(
            pg.settings, pg.source, mode="scd1", schema=schema, keys=("id",)
        )
        # Debezium's JSON of a one-key map is `{"k":"..."}` (Jackson, no spaces).
        h_pg = "'{\"k\":\"' || (h -> 'k') || '\"}' AS h"
        rounds_equal_postgres(
            spark,
            pg,
            settings,
            rounds,
            (scd1,),
            schema,
            ("v" * 3000,),
            pg_columns=f"id, name, {h_pg}",
        )
