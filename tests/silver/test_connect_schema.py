"""A CDC record's Kafka Connect schema (`schemas.enable=true`) against the encodings its source
declares. A connector run with other modes than the source says can send text that decodes to
another value: `decimal.handling.mode=string` sends a `numeric(10,0)` as `"1234"`, which is
valid base64 (precise: -2658824), and adaptive mode sends a `timestamp(3)` (and a
`timestamp(0)`) in milliseconds, which read as the default microseconds is a date in January
1970. When the record carries its schema, such a change is quarantined naming each column, what
the schema says was sent and how silver would have read it; a source declared to match stores
every value."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from decimal import Decimal

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from lakehouse.silver.replay import replay_quarantine
from tests.bronze.helpers import new_source, run_ingest, wait_for_records
from tests.conftest import pg_connect
from tests.silver.helpers import current, debezium_table, quarantine, run_refine, with_silver

SCHEMA = "id INT, whole DECIMAL(10,0), at3 TIMESTAMP, at0 TIMESTAMP, note STRING"
ROWS = [
    "(1, 1234, '2024-01-05 10:00:00.123', NULL, 'both')",
    "(2, 12345678, NULL, NULL, 'whole')",
    "(3, NULL, '2024-01-05 10:00:00', '2024-01-05 10:00:01', 'at3')",
    "(4, NULL, NULL, NULL, 'neither')",
    "(5, -7, NULL, NULL, 'signed')",
]
STORED = [
    (1, Decimal("1234"), datetime(2024, 1, 5, 10, 0, 0, 123000), None, "both"),
    (2, Decimal("12345678"), None, None, "whole"),
    (3, None, datetime(2024, 1, 5, 10, 0, 0), datetime(2024, 1, 5, 10, 0, 1), "at3"),
    (4, None, None, None, "neither"),
    (5, Decimal("-7"), None, None, "signed"),
]
WHOLE = "whole (string, read as base64)"
AT3 = "at3 (io.debezium.time.Timestamp, read as epoch_us)"
AT0 = "at0 (io.debezium.time.Timestamp, read as epoch_us)"


def test_a_change_whose_schema_contradicts_the_declared_modes_is_quarantined_not_misread(
    spark: SparkSession, kafka_up: Settings
) -> None:
    ddl = [
        "CREATE TABLE public.{table} (id int PRIMARY KEY, whole numeric(10,0), "
        "at3 timestamp(3), at0 timestamp(0), note text)"
    ]
    # The connector runs in string mode; its source says precise (the default), as a source
    # over a connector run outside the product can.
    string_mode = {"decimal.handling.mode": "string"}
    with debezium_table(kafka_up, ddl, True, connector_config=string_mode) as pg:
        misread, settings = with_silver(
            pg.settings, pg.source, mode="scd1", schema=SCHEMA, keys=("id",)
        )
        # The same topic read by a source declared as the connector runs.
        right, _, settings = new_source(settings, kind="cdc", decimal_handling_mode="string")
        settings = replace(
            settings,
            sources={
                **settings.sources,
                right: replace(settings.sources[right], topics=(pg.topic,)),
            },
        )
        matched, settings = with_silver(
            settings,
            right,
            mode="scd1",
            schema=SCHEMA,
            keys=("id",),
            encodings={"at3": "epoch_ms", "at0": "epoch_ms"},
        )
        with pg_connect(settings) as conn:
            conn.execute(f"INSERT INTO public.{pg.table} VALUES {', '.join(ROWS)}")
        wait_for_records(settings, pg.topic, len(ROWS))
        run_ingest(spark, settings, pg.source, kind="cdc")
        run_ingest(spark, settings, right, kind="cdc")

        result = run_refine(spark, settings, misread)
        errors = sorted(
            (r["offset"], r["parse_error"]) for r in quarantine(spark, settings, misread).collect()
        )
        assert errors == [
            (0, f"schema_mismatch: {WHOLE}, {AT3}"),
            (1, f"schema_mismatch: {WHOLE}"),
            (2, f"schema_mismatch: {AT3}, {AT0}"),
            # -7 is not base64: it did not decode, and the schema says why.
            (4, f"schema_mismatch: {WHOLE}"),
        ]
        assert result.rows_quarantined == 4
        expected_left = spark.createDataFrame([STORED[3]], SCHEMA)
        assert_df_equality(
            current(spark, settings, misread).drop("_rescued_data"),
            expected_left,
            ignore_nullable=True,
        )

        # The misread value is not in the quarantined record (NULL there): a replay leaves the
        # change quarantined until an operator writes the column in.
        unfixed = replay_quarantine(spark, settings, misread, where="offset IN (0, 1)")
        assert (unfixed.considered, unfixed.replayed, unfixed.still_quarantined) == (2, 0, 2)
        records = quarantine(spark, settings, misread).where("offset = 0").collect()
        assert [json.loads(r["record"]) for r in records] == [{"id": 1, "note": "both"}]
        fixed = replay_quarantine(
            spark, settings, misread, fixes=[("whole", "12345678")], where="offset = 1"
        )
        assert (fixed.considered, fixed.replayed, fixed.still_quarantined) == (1, 1, 0)
        assert_df_equality(
            current(spark, settings, misread).drop("_rescued_data"),
            spark.createDataFrame([STORED[1], STORED[3]], SCHEMA),
            ignore_row_order=True,
            ignore_nullable=True,
        )

        assert run_refine(spark, settings, matched).rows_quarantined == 0
        assert_df_equality(
            current(spark, settings, matched).drop("_rescued_data"),
            spark.createDataFrame(STORED, SCHEMA),
            ignore_row_order=True,
            ignore_nullable=True,
        )


SCALED = (
    "id INT, amount DECIMAL(12,2), cash DECIMAL(12,3), nums ARRAY<DECIMAL(12,2)>, "
    "stamps ARRAY<TIMESTAMP>, note STRING"
)
SCALED_RIGHT = (
    "id INT, amount DECIMAL(12,3), cash DECIMAL(12,2), nums ARRAY<DECIMAL(12,3)>, "
    "stamps ARRAY<TIMESTAMP>, note STRING"
)


def test_a_decimal_sent_at_another_scale_than_declared_is_quarantined_not_misread(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Precise mode sends a `numeric(12,3)` (a `money`, scale 2; each element of a
    `numeric(12,3)[]`) as unscaled bytes: read at another scale every value is off by a power
    of ten (13.299 as 132.99), and adaptive mode a `timestamp(3)[]`'s elements in milliseconds.
    The record's schema says so; a connector run outside the product is not checked before it
    streams."""
    ddl = [
        "CREATE TABLE public.{table} (id int PRIMARY KEY, amount numeric(12,3), cash money, "
        "nums numeric(12,3)[], stamps timestamp(3)[], note text)"
    ]
    with debezium_table(kafka_up, ddl, True) as pg:
        misread, settings = with_silver(
            pg.settings, pg.source, mode="scd1", schema=SCALED, keys=("id",)
        )
        matched, settings = with_silver(
            settings,
            pg.source,
            mode="scd1",
            schema=SCALED_RIGHT,
            keys=("id",),
            encodings={"stamps": "epoch_ms"},
        )
        rows = (
            "(1, 13.299, 12.5, ARRAY[13.299], ARRAY['2024-01-05 10:00:00.123'::timestamp], "
            "'all'), (2, NULL, NULL, NULL, ARRAY[]::timestamp[], 'neither'), "
            "(3, -0.001, NULL, NULL, NULL, 'amount'), (4, NULL, NULL, ARRAY[1.5, -0.25], NULL, "
            "'nums'), (5, NULL, NULL, NULL, ARRAY['2024-01-05 10:00:01'::timestamp], 'stamps')"
        )
        with pg_connect(settings) as conn:
            conn.execute(f"INSERT INTO public.{pg.table} VALUES {rows}")
        wait_for_records(settings, pg.topic, 5)
        run_ingest(spark, settings, pg.source, kind="cdc")

        assert run_refine(spark, settings, misread).rows_quarantined == 4
        amount = "amount (org.apache.kafka.connect.data.Decimal scale 3, read at scale 2)"
        cash = "cash (org.apache.kafka.connect.data.Decimal scale 2, read at scale 3)"
        nums = "nums (org.apache.kafka.connect.data.Decimal scale 3, read at scale 2)"
        stamps = "stamps (io.debezium.time.Timestamp, read as epoch_us)"
        errors = sorted(
            (r["offset"], r["parse_error"]) for r in quarantine(spark, settings, misread).collect()
        )
        assert errors == [
            (0, f"schema_mismatch: {amount}, {cash}, {nums}, {stamps}"),
            (2, f"schema_mismatch: {amount}"),
            (3, f"schema_mismatch: {nums}"),
            (4, f"schema_mismatch: {stamps}"),
        ]
        assert_df_equality(
            current(spark, settings, misread).drop("_rescued_data"),
            spark.createDataFrame([(2, None, None, None, [], "neither")], SCALED),
            ignore_nullable=True,
        )

        assert run_refine(spark, settings, matched).rows_quarantined == 0
        stored = [
            (
                1,
                Decimal("13.299"),
                Decimal("12.50"),
                [Decimal("13.299")],
                [datetime(2024, 1, 5, 10, 0, 0, 123000)],
                "all",
            ),
            (2, None, None, None, [], "neither"),
            (3, Decimal("-0.001"), None, None, None, "amount"),
            (4, None, None, [Decimal("1.500"), Decimal("-0.250")], None, "nums"),
            (5, None, None, None, [datetime(2024, 1, 5, 10, 0, 1)], "stamps"),
        ]
        assert_df_equality(
            current(spark, settings, matched).drop("_rescued_data"),
            spark.createDataFrame(stored, SCALED_RIGHT),
            ignore_row_order=True,
            ignore_nullable=True,
        )
