"""BINARY values as feeds and Debezium send them (base64 text) through real Kafka, bronze and
refine_silver: stored exactly, or rescued; never NULL without a trace, never another value."""

from __future__ import annotations

import json

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from tests.silver.helpers import current, events_pipeline, run_refine


def rescued(field: str, text: str) -> str:
    return json.dumps({field: text}, separators=(",", ":"))


def test_binary_values_top_level_or_nested_decode_from_padded_base64_or_are_rescued(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """A nested value with a BINARY leaf kept Spark's JSON reading: a leaf that was not
    base64 (`!!`, a number, unpadded) became NULL in a stored value, and a field its struct did
    not declare was dropped, each without a trace. It now decodes leaf by leaf like any
    other nested value. A top-level BINARY took two padded texts run together as their joined
    bytes: base64 is padded once, at its end."""
    schema = "id INT, blob BINARY, doc STRUCT<kind: STRING, body: BINARY>, bins ARRAY<BINARY>"
    events: list[object] = [
        b'{"id": 1, "blob": "AP8Q", "doc": {"kind": "a", "body": "aGk="}, "bins": ["AP8Q", ""]}',
        b'{"id": 2, "doc": {"kind": "b", "body": "!!"}}',
        b'{"id": 3, "doc": {"kind": "c", "body": "aGk=", "extra": 1}}',
        b'{"id": 4, "bins": [1234]}',
        b'{"id": 5, "bins": ["aGk", null]}',
        b'{"id": 6, "blob": null, "doc": {"kind": "d", "body": null}, "bins": [null]}',
        b'{"id": 7, "blob": "aGk=aGk="}',
        b'{"id": 8, "blob": 1234}',
        b'{"id": 9, "blob": "aGk"}',
    ]
    _, _, name, settings = events_pipeline(spark, kafka_up, events, mode="append", schema=schema)
    run_refine(spark, settings, name)
    hi, none = bytearray(b"hi"), (None, None, None)
    expected = spark.createDataFrame(
        [
            (
                1,
                bytearray(b"\x00\xff\x10"),
                "a",
                hi,
                [bytearray(b"\x00\xff\x10"), bytearray()],
                None,
            ),
            (2, *none, None, rescued("doc", '{"kind":"b","body":"!!"}')),
            (3, None, "c", hi, None, rescued("doc", '{"kind":"c","body":"aGk=","extra":1}')),
            (4, *none, None, rescued("bins", "[1234]")),
            (5, *none, None, rescued("bins", '["aGk",null]')),
            (6, None, "d", None, [None], None),
            (7, *none, None, rescued("blob", "aGk=aGk=")),
            (8, *none, None, rescued("blob", "1234")),  # the text as sent, as any rescue
            (9, *none, None, rescued("blob", "aGk")),
        ],
        "id INT, blob BINARY, doc_kind STRING, doc_body BINARY, bins ARRAY<BINARY>, "
        "_rescued_data STRING",
    )
    actual = current(spark, settings, name)
    assert_df_equality(actual.orderBy("id"), expected, ignore_nullable=True)
