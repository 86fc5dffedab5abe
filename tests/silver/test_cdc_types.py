"""Every common PostgreSQL column type through the real Debezium connector with its default
modes (`decimal.handling.mode=precise`, `time.precision.mode=adaptive`), with JSON schemas off
and on: silver equals `SELECT` from PostgreSQL value for value. A source declared `string` over
this precise connector stores no wrong value: base64 is not a number, so the changes are
quarantined naming the columns (with schemas on, naming what the schema says was sent). The
other way round, a precise source over a string-mode connector, an integer's digits are valid
base64: only a record's schema can tell (`test_connect_schema`)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core.settings import Settings
from tests.bronze.helpers import new_source, run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import current, debezium_table, quarantine, run_refine, with_silver

COLUMNS = (
    "id int PRIMARY KEY, small int2, big int8, amount numeric(12,2), ratio numeric, r real, "
    "d double precision, flag bool, name varchar(20), body text, raw bytea, day date, "
    "at timestamp, at_tz timestamptz, uid uuid, doc jsonb, tags text[], nums int[], mood {mood}, "
    "clock time, clock_ms time(3), tz timetz, span interval, ip inet, mac macaddr, code char(3), "
    "js json, flags bit(12), range int4range, stamps timestamp[], cash money"
)
SCHEMA = (
    "id INT, small SMALLINT, big BIGINT, amount DECIMAL(12,2), ratio DECIMAL(30,10), r FLOAT, "
    "d DOUBLE, flag BOOLEAN, name STRING, body STRING, raw BINARY, day DATE, at TIMESTAMP, "
    "at_tz TIMESTAMP, uid STRING, doc STRING, tags ARRAY<STRING>, nums ARRAY<INT>, mood STRING, "
    "clock STRING, clock_ms STRING, tz STRING, span BIGINT, ip STRING, mac STRING, code STRING, "
    "js STRING, flags BINARY, range STRING, stamps ARRAY<TIMESTAMP>, cash DECIMAL(12,2)"
)
SELECT = (
    "id, small, big, amount, ratio, r, d, flag, name, body, raw, day, at, at_tz, uid::text, "
    "doc::text, tags, nums, mood::text, clock, clock_ms, "
    # Debezium sends a timetz in UTC, an interval as microseconds with 365.25/12-day months
    # (PostgreSQL's epoch counts 30), a bit string as its bytes (`plain` below).
    "(tz AT TIME ZONE 'UTC')::time::text || 'Z', "
    "((extract(epoch FROM span) + extract(month FROM span) * 0.4375 * 86400) * 1e6)::int8, "
    "abbrev(ip), mac::text, code, js::text, flags::text, range::text, stamps, cash::numeric"
)
ROWS = [
    "(1, 7, 9007199254740993, 1234.50, 3.1415926535, 1.5, 2.25, true, 'ø-name', 'body', "
    "'\\x00ff10'::bytea, '2024-01-05', '2024-01-05 10:00:00.123456', "
    "'2024-01-05 10:00:00.5+02', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
    "'{\"k\": [1, 2]}', ARRAY['x', 'y z'], ARRAY[1, -2], 'happy', '10:00:00.123456', "
    "'23:59:59.999', '10:00:00.5+02', '1 year 1 mon 2 days 03:04:05.5', '192.168.0.1/24', "
    "'08:00:2b:01:02:03', 'ab', '{\"a\":  [1, 2]}', B'100000000011', '[1,5)', "
    # Before 1582-10-15, sent in Java's calendar (`lakehouse.silver.temporal.gregorian_micros`).
    "ARRAY['2024-01-05 10:00:00.123456'::timestamp, NULL, '1582-10-04 12:00', '0044-03-15 "
    "12:00:00.5'], 12.34)",
    "(2, -32768, -1, -0.01, -12345678901234567890.0123456789, -0.25, -1e300, false, '', '', "
    "''::bytea, '1969-12-31', '1900-01-01 00:00:00', '1970-01-01 00:00:00+00', "
    "'00000000-0000-0000-0000-000000000000', '[]', ARRAY[]::text[], ARRAY[]::int[], 'sad', "
    "'00:00:00', '00:00:00', '00:00:00+00', '-3 days -00:00:01', '::1', '00:00:00:00:00:00', "
    "'', '[]', B'000000000000', 'empty', ARRAY[]::timestamp[], -0.01)",
    "(3, " + ", ".join(["NULL"] * 30) + ")",
    "(4, 1, 1, 9999999999.99, 0, 0, 0, true, 'v', 't', '\\x01'::bytea, '2262-04-11', "
    "'2038-01-19 03:14:08.000001', '2099-12-31 23:59:59.999999+00', "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12', 'null', ARRAY[NULL, 'n'], ARRAY[NULL, 3]::int[], "
    "'happy', '12:30:00.5', '12:30:00.5', '23:59:59.999999-05', '0', '10.0.0.0/8', "
    "'ff:ff:ff:ff:ff:ff', 'xyz', 'null', B'111111111111', '(,)', "
    "ARRAY['1970-01-01 00:00:00'::timestamp], 9999999999.99)",
]
CHANGES = [
    "UPDATE {t} SET amount = -9999999999.99, ratio = 0.0000000001, at = '2000-02-29 12:34:56.789',"
    " day = '2000-02-29', clock = '23:59:59.999999' WHERE id = 1",
    "UPDATE {t} SET small = NULL, amount = 0.10 WHERE id = 2",
    "DELETE FROM {t} WHERE id = 4",
]


def rows_of(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    """Silver's current rows, none of them with anything rescued."""
    live = current(spark, settings, name)
    assert live.where("_rescued_data IS NOT NULL").count() == 0, name
    return live.drop("_rescued_data")


def postgres_rows(spark: SparkSession, settings: Settings, table: str) -> DataFrame:
    """The table as PostgreSQL returns it (timestamptz as UTC wall time, like the session)."""
    with pg_connect(settings) as conn:
        rows = conn.execute(f"SELECT {SELECT} FROM public.{table}").fetchall()

    def plain(row: tuple[Any, ...]) -> tuple[Any, ...]:
        out = list(row)
        at_tz = out[13]
        out[13] = at_tz.astimezone(UTC).replace(tzinfo=None) if at_tz else None
        out[10] = bytes(out[10]) if out[10] is not None else None
        out[19:21] = [t.isoformat() if t is not None else None for t in out[19:21]]
        # Debezium's Bits (a Java BitSet's bytes): the bit string as a number, little-endian,
        # no high zero bytes (all zeros: no bytes at all).
        number = int(out[27], 2) if out[27] is not None else None
        out[27] = (
            number.to_bytes((number.bit_length() + 7) // 8, "little")
            if number is not None
            else None
        )
        return tuple(out)

    return spark.createDataFrame([plain(r) for r in rows], SCHEMA)


@pytest.mark.parametrize("schemas_enable", [False, True], ids=["schemas_off", "schemas_on"])
def test_every_common_postgres_type_reaches_silver_value_for_value(
    spark: SparkSession, kafka_up: Settings, schemas_enable: bool
) -> None:
    mood = f"mood_{uuid.uuid4().hex[:8]}"
    ddl = [
        f"CREATE TYPE {mood} AS ENUM ('happy', 'sad')",
        "CREATE TABLE public.{table} (" + COLUMNS.replace("{mood}", mood) + ")",
    ]

    def snapshot(table: str, _slot: str) -> None:
        with pg_connect(kafka_up) as conn:
            conn.execute(f"INSERT INTO public.{table} VALUES {', '.join(ROWS)}")

    # With schemas on, the connector's snapshot reads the rows (through JDBC, where the stream
    # decodes pgoutput's text): each path sends every type as PostgreSQL holds it.
    with debezium_table(
        kafka_up,
        ddl,
        schemas_enable,
        drop=[f"DROP TYPE IF EXISTS {mood}"],
        before_connector=snapshot if schemas_enable else None,
    ) as pg:
        table, topic, source, settings = pg.table, pg.topic, pg.source, pg.settings
        # PostgreSQL `time`: adaptive mode sends time(6) as MicroTime, time(3) as Time (ms).
        clocks = {"clock": "time_us", "clock_ms": "time_ms"}
        scd1, settings = with_silver(
            settings, source, mode="scd1", schema=SCHEMA, keys=("id",), encodings=clocks
        )
        scd2, settings = with_silver(
            settings, source, mode="scd2", schema=SCHEMA, keys=("id",), encodings=clocks
        )
        # The same topic read as if the connector used decimal.handling.mode=string.
        wrong, _, settings = new_source(settings, kind="cdc", decimal_handling_mode="string")
        settings = replace(
            settings,
            sources={**settings.sources, wrong: replace(settings.sources[wrong], topics=(topic,))},
        )
        misread, settings = with_silver(settings, wrong, mode="scd1", schema=SCHEMA, keys=("id",))

        def refine_and_compare() -> None:
            run_ingest(spark, settings, source, kind="cdc")
            for name in (scd1, scd2):
                assert run_refine(spark, settings, name).rows_quarantined == 0, name
                assert_df_equality(
                    rows_of(spark, settings, name),
                    postgres_rows(spark, settings, table),
                    ignore_row_order=True,
                    ignore_nullable=True,
                )

        if not schemas_enable:
            with pg_connect(settings) as conn:
                conn.execute(f"INSERT INTO public.{table} VALUES {', '.join(ROWS)}")
        wait_for_records(settings, topic, len(ROWS))
        refine_and_compare()

        with pg_connect(settings) as conn:
            for change in CHANGES:
                conn.execute(change.format(t=f"public.{table}"))
        wait_for_records(settings, topic, len(ROWS) + len(CHANGES) + 1)  # + the tombstone
        refine_and_compare()

        # Misdeclared: every change with a non-null numeric is quarantined, naming the columns.
        run_ingest(spark, settings, wrong, kind="cdc")
        result = run_refine(spark, settings, misread)
        errors = sorted(
            (r["offset"], r["parse_error"]) for r in quarantine(spark, settings, misread).collect()
        )
        # Inserts of ids 1, 2, 4 and both updates; id 3 is all NULL; a delete's key-only
        # image has no numeric to misread.
        reason = (
            "schema_mismatch: amount (org.apache.kafka.connect.data.Decimal, read as text), "
            "ratio (io.debezium.data.VariableScaleDecimal, read as text), "
            "cash (org.apache.kafka.connect.data.Decimal, read as text)"
            if schemas_enable
            else "undecodable: amount, ratio, cash"
        )
        assert errors == [(offset, reason) for offset in (0, 1, 3, 4, 5)]
        assert result.rows_quarantined == 5
        assert sorted(r["id"] for r in current(spark, settings, misread).collect()) == [3]
