"""The real broker: records produced with the Python client come back through Spark's Kafka
source with their topic, partition, offset, key and value intact."""

from __future__ import annotations

import json
import uuid

from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from lakehouse.core import kafka
from lakehouse.core.settings import Settings

SCHEMA = StructType(
    [
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
    ]
)


def test_produced_records_read_back_by_spark_with_offsets(
    spark: SparkSession, kafka_up: Settings
) -> None:
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    kafka.ensure_topic(kafka_up.kafka, topic, partitions=3)
    delivered = kafka.produce(
        kafka_up.kafka,
        topic,
        [
            (b"k0", b'{"n":0}', 0),
            (b"k1", b'{"n":1}', 1),
            (b"k2", b'{"n":2}', 1),
            (None, b"not json", 2),
            (b"k4", None, 2),  # a tombstone: key with a null value
        ],
    )
    assert sorted(delivered) == [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert kafka.end_offsets(kafka_up.kafka, topic) == {0: 1, 1: 2, 2: 2}

    read = (
        spark.read.format("kafka")
        .options(**kafka.spark_options(kafka_up.kafka))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", json.dumps({topic: {"0": 1, "1": 2, "2": 2}}))
        .load()
        .select("topic", "partition", "offset", "key", "value")
    )
    expected = spark.createDataFrame(
        [
            (topic, 0, 0, bytearray(b"k0"), bytearray(b'{"n":0}')),
            (topic, 1, 0, bytearray(b"k1"), bytearray(b'{"n":1}')),
            (topic, 1, 1, bytearray(b"k2"), bytearray(b'{"n":2}')),
            (topic, 2, 0, None, bytearray(b"not json")),
            (topic, 2, 1, bytearray(b"k4"), None),
        ],
        SCHEMA,
    )
    assert_df_equality(read, expected, ignore_row_order=True, ignore_nullable=True)
    kafka.delete_topics(kafka_up.kafka, [topic])


def test_spark_resumes_from_explicit_offsets(spark: SparkSession, kafka_up: Settings) -> None:
    """Explicit per-partition starting offsets: the basis of `--start-from offsets=` later."""
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    kafka.ensure_topic(kafka_up.kafka, topic, partitions=1)
    kafka.produce(kafka_up.kafka, topic, [(None, f"v{i}".encode(), 0) for i in range(6)])
    read = (
        spark.read.format("kafka")
        .options(**kafka.spark_options(kafka_up.kafka))
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": 4}}))
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("offset", "CAST(value AS STRING) AS value")
    )
    expected = spark.createDataFrame(
        [(4, "v4"), (5, "v5")],
        StructType([StructField("offset", LongType()), StructField("value", StringType())]),
    )
    assert_df_equality(read, expected, ignore_row_order=True, ignore_nullable=True)
    kafka.delete_topics(kafka_up.kafka, [topic])
