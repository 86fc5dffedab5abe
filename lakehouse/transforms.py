"""Pure DataFrame -> DataFrame transformations. No I/O, no session, easy to test."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


def decode_json_value(raw: DataFrame, schema: StructType) -> DataFrame:
    """Kafka rows -> lineage columns plus the value parsed with `schema`.

    A value that does not parse keeps its lineage and raw text with null fields, so nothing
    is lost; `_parse_ok` says which rows parsed."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    parsed = F.from_json(text, schema, {"mode": "PERMISSIVE"})
    return raw.select(
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        text.alias("raw_value"),
        parsed.alias("_event"),
    ).select(
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
        "raw_value",
        *[F.col(f"_event.{name}").alias(name) for name in schema.fieldNames()],
        F.col("_event").isNotNull().alias("_parse_ok"),
    )
