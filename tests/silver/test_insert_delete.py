"""Feldera's insert_delete format through real Kafka into keyed silver tables: inserts upsert,
deletes delete, an update sent as a delete and an insert in one array keeps the insert,
changes apply in Kafka order (also several in one record, as an array or one per line);
whatever is not such a change is quarantined with the reason."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core import kafka
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.core.specs import SourceSettings
from lakehouse.silver.scd2 import history_rows
from tests.bronze.helpers import new_source, run_ingest
from tests.silver.helpers import current, quarantine, run_refine, silver_table, with_silver

SCHEMA = "id INT, name STRING, amount DECIMAL(10,2)"
Row = tuple[int, str, Decimal]


def row(i: int, name: str, amount: object) -> dict[str, object]:
    return {"id": i, "name": name, "amount": amount}


def expected(spark: SparkSession, rows: list[Row]) -> DataFrame:
    return spark.createDataFrame(rows, SCHEMA)


def test_inserts_and_deletes_apply_in_kafka_order_and_bad_changes_are_quarantined(
    spark: SparkSession, kafka_up: Settings
) -> None:
    source, topic, settings = new_source(kafka_up, format="insert_delete")
    scd1, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
    scd2, settings = with_silver(settings, source, mode="scd2", schema=SCHEMA, keys=("id",))

    def send(values: list[object]) -> None:
        encoded = [v if isinstance(v, bytes) else json.dumps(v).encode() for v in values]
        kafka.produce(settings.kafka, topic, [(None, v, 0) for v in encoded])
        run_ingest(spark, settings, source)

    send(
        [
            {"insert": row(1, "a", "1.50")},
            [{"insert": row(2, "b", 2)}, {"insert": row(3, "c", 3)}],
            [{"delete": row(1, "a", "1.50")}, {"insert": row(1, "a2", "1.75")}],
            {"delete": row(2, "b", 2)},
            {"upsert": row(9, "x", 1)},  # not a change of this format
            {"insert": row(4, "d", "x")},  # an amount that is not a number
            [],  # no change at all
            b"not json",
            {"insert": row(5, "e", 1), "delete": row(5, "e", 1)},
            b'[{"insert": {"id": 6, "name": "f", "amount": 1}},]',  # not JSON
        ]
    )
    first: list[Row] = [(1, "a2", Decimal("1.75")), (3, "c", Decimal("3.00"))]
    for name in (scd1, scd2):
        result = run_refine(spark, settings, name)
        assert (result.rows_written, result.rows_quarantined) == (6, 5), name
        assert_df_equality(
            current(spark, settings, name).drop("_rescued_data"),
            expected(spark, first),
            ignore_row_order=True,
            ignore_nullable=True,
        )
    reasons = sorted(
        (r["offset"], r["parse_error"]) for r in quarantine(spark, settings, scd1).collect()
    )
    assert reasons == [
        (4, "not_an_insert_delete_change"),
        (5, "undecodable: amount"),
        (7, "invalid_json"),
        (8, "not_an_insert_delete_change"),
        (9, "invalid_json"),
    ]

    send(
        [
            # Feldera's buffered output: one change per line.
            b'{"delete": {"id": 3, "name": "c", "amount": 3}}\n'
            b'{"insert": {"id": 3, "name": "c2", "amount": 3}}\n',
            {"insert": row(2, "b2", "2.5")},  # back after its delete
        ]
    )
    second: list[Row] = [*first[:1], (2, "b2", Decimal("2.50")), (3, "c2", Decimal("3.00"))]
    for name in (scd1, scd2):
        run_refine(spark, settings, name)
        assert_df_equality(
            current(spark, settings, name).drop("_rescued_data"),
            expected(spark, second),
            ignore_row_order=True,
            ignore_nullable=True,
        )
    versions = history_rows(silver_table(spark, settings, scd2)).collect()
    assert sorted((r["id"], r["name"], r["__end_seq"] is None) for r in versions) == [
        (1, "a", False),
        (1, "a2", True),
        (2, "b", False),
        (2, "b2", True),
        (3, "c", False),
        (3, "c2", True),
    ]


def test_an_insert_delete_source_needs_a_keyed_change_table(
    spark: SparkSession, kafka_up: Settings
) -> None:
    source, _, settings = new_source(kafka_up, format="insert_delete")
    name, settings = with_silver(
        settings, source, mode="upsert", schema=SCHEMA, keys=("id",), sequence_by="id"
    )
    with pytest.raises(SettingsError, match=r"insert_delete.*scd1 or scd2"):
        run_refine(spark, settings, name)


def test_a_format_the_kind_of_source_cannot_have_is_refused() -> None:
    refused = "'format' must be one of json, insert_delete for a events source"
    with pytest.raises(ValueError, match=refused):
        SourceSettings(kind="events", topics=("t",), format="debezium")


def test_changes_from_a_second_partition_are_quarantined_not_misordered(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Feldera's producer sends no key, so a key's changes spread over the partitions and
    offsets of two partitions say nothing about which came first."""
    source, topic, settings = new_source(kafka_up, partitions=2, format="insert_delete")
    name, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
    kafka.produce(
        settings.kafka,
        topic,
        [
            (None, json.dumps({"insert": row(1, "a", 1)}).encode(), 0),
            (None, json.dumps({"delete": row(1, "a", 1)}).encode(), 1),
        ],
    )
    run_ingest(spark, settings, source)
    result = run_refine(spark, settings, name)
    assert (result.rows_written, result.rows_quarantined) == (1, 1)
    rejected = quarantine(spark, settings, name).select("partition", "parse_error").collect()
    assert [tuple(r) for r in rejected] == [(1, "insert_delete_needs_a_one_partition_topic")]


def test_an_insert_delete_source_reads_exactly_one_topic() -> None:
    with pytest.raises(ValueError, match="read exactly one topic"):
        SourceSettings(kind="events", topic_pattern="orders.*", format="insert_delete")
