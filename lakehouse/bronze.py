"""Bronze: the raw Kafka record, kept byte-for-byte, plus lineage and parse diagnostics.

Pure DataFrame -> DataFrame functions and the table's contract (schema, properties). Nothing
here reads or writes; `lakehouse.ingest` does the I/O. A record that does not parse is never an
exception and never dropped: `value_status` says what is wrong with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

# Bronze is append-only and protected from resets; CDF feeds silver.
BRONZE_PROPERTIES: dict[str, str] = {
    "delta.appendOnly": "true",
    "delta.enableChangeDataFeed": "true",
    "pipelines.reset.allowed": "false",
}
# File statistics only on the columns bronze is searched by (lineage, arrival time, what
# failed to parse; for CDC the source table and position). Delta's default, min/max/null
# counts of the first 32 columns, spends ~15% of ingest CPU mostly on the raw key/value
# bytes and headers, which no query prunes by (bench/README.md).
STATS_COLUMNS = ("topic", "partition", "offset", "kafka_timestamp", "ingest_time", "value_status")
CDC_STATS_COLUMNS = ("cdc_table", "cdc_lsn")
PARTITION_COLUMNS = ("ingest_date",)

# value_status values (a closed set: silver and quarantine filter on them).
OK = "ok"
NULL_VALUE = "null_value"  # a tombstone, or a producer that sent no value
EMPTY_VALUE = "empty_value"
INVALID_UTF8 = "invalid_utf8"
# events: not shaped like a JSON object/array (plain text, truncation, garbage); CDC: fails
# a full JSON parse
INVALID_JSON = "invalid_json"
OVERSIZE = "oversize"  # kept, but larger than the source's max_value_bytes: not parsed
TOMBSTONE = "tombstone"  # CDC: Debezium's null-value record after a delete
UNKNOWN_OP = "unknown_op"  # CDC: an envelope whose op we do not know
NOT_AN_ENVELOPE = "not_an_envelope"  # CDC: JSON, but neither a Debezium envelope nor flattened

DEBEZIUM_OPS = ("c", "u", "d", "r", "t", "m")


def bronze_properties(kind: str) -> dict[str, str]:
    """The table properties a new bronze table of `kind` (events | cdc) is created with."""
    stats = STATS_COLUMNS + (CDC_STATS_COLUMNS if kind == "cdc" else ())
    return {**BRONZE_PROPERTIES, "delta.dataSkippingStatsColumns": ",".join(stats)}


def bronze_schema(kind: str) -> StructType:
    """The explicit schema bronze tables are created with (events, plus CDC columns)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DateType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("kafka_timestamp", TimestampType()),
        StructField("kafka_timestamp_type", IntegerType()),
        StructField("source", StringType()),
        StructField("ingest_time", TimestampType()),
        StructField("ingest_date", DateType()),
        StructField("value_size", IntegerType()),
        StructField("value_status", StringType()),
        # Set for rows loaded by --historical: the snapshot's Delta version (else null).
        StructField("historical_version", LongType()),
    ]
    if kind == "cdc":
        fields += [
            StructField("cdc_op", StringType()),
            StructField("cdc_key", StringType()),
            StructField("cdc_lsn", LongType()),
            StructField("cdc_source_ts_ms", LongType()),
            StructField("cdc_table", StringType()),
            StructField("cdc_deleted", StringType()),
        ]
    return StructType(fields)


def _event_status(max_value_bytes: int) -> Column:
    """Per-row diagnosis, cheapest test first: a well-formed event pays only for a length and
    two byte comparisons; the UTF-8 scan runs only for rows that already failed."""
    from pyspark.sql import functions as F

    return (
        _size_status(NULL_VALUE, max_value_bytes)
        .when(_looks_like_json_document(), F.lit(OK))
        .when(~_is_utf8(), F.lit(INVALID_UTF8))
        .otherwise(F.lit(INVALID_JSON))
    )


def _size_status(null_status: str, max_value_bytes: int) -> Column:
    """The start of every value_status chain: no value, an empty one, or one too big to parse."""
    from pyspark.sql import functions as F

    value = F.col("value")
    return (
        F.when(value.isNull(), F.lit(null_status))
        .when(F.length(value) == 0, F.lit(EMPTY_VALUE))
        .when(F.length(value) > max_value_bytes, F.lit(OVERSIZE))
    )


def _is_utf8() -> Column:
    from pyspark.sql import functions as F

    return F.expr("is_valid_utf8(CAST(value AS STRING))")


def _looks_like_json_document() -> Column:
    """A cheap shape check: the value is delimited like a JSON object or array. It catches
    plain text, truncation and garbage at a fraction of the cost of a full parse (measured in
    bench/README.md); silver parses strictly with the declared schema and quarantines what
    still fails. Leading/trailing whitespace falls back to a trimmed text comparison."""
    from pyspark.sql import functions as F

    value = F.col("value")
    first, last = F.substring(value, 1, 1), F.substring(value, -1, 1)

    def is_byte(column: Column, char: bytes) -> Column:
        return column == F.lit(bytearray(char))

    compact = (is_byte(first, b"{") & is_byte(last, b"}")) | (
        is_byte(first, b"[") & is_byte(last, b"]")
    )
    text = F.trim(value.cast("string"))
    padded = F.concat(F.substring(text, 1, 1), F.substring(text, -1, 1)).isin("{}", "[]")
    # CASE short-circuits: the trimmed copy is only made for values that failed `compact`.
    return F.when(compact, F.lit(True)).otherwise(padded)


ENVELOPE = "_envelope"  # transient: the value parsed once into a VARIANT


def _parsed_envelope(max_value_bytes: int) -> Column:
    from pyspark.sql import functions as F

    value = F.col("value")
    parsable = value.isNotNull() & (F.length(value) <= max_value_bytes)
    return F.when(parsable, F.expr("try_parse_json(CAST(value AS STRING))")).alias(ENVELOPE)


def _cdc_columns(max_value_bytes: int) -> list[Column]:
    """CDC convenience columns, read from the `_envelope` VARIANT (parsed once per row in the
    projection before this one). A Debezium record is the envelope (`op`, `source`), or the
    ExtractNewRecordState-flattened row (`__op`, `__lsn`, ...), each bare or, with
    schemas.enable=true, wrapped in `payload`."""
    from pyspark.sql import functions as F

    variant = F.col(ENVELOPE)

    def field(path: str, kind: str) -> Column:
        def get(at: str) -> Column:
            return F.try_variant_get(variant, at, kind)

        return F.coalesce(get(f"$.payload.{path}"), get(f"$.{path}"))

    op = F.coalesce(field("op", "string"), field("__op", "string"))
    key_text = F.col("key").cast("string")
    key_payload = F.get_json_object(key_text, "$.payload")
    # With schemas.enable=true the key is {"schema":..,"payload":{..}}; keep the payload only,
    # so the same row has the same cdc_key whichever converter setting produced it.
    cdc_key = F.when(
        F.get_json_object(key_text, "$.schema").isNotNull() & key_payload.isNotNull(),
        key_payload,
    ).otherwise(key_text)
    schema, table = field("source.schema", "string"), field("source.table", "string")
    status = (
        _size_status(TOMBSTONE, max_value_bytes)
        .when(~_is_utf8(), F.lit(INVALID_UTF8))
        .when(variant.isNull(), F.lit(INVALID_JSON))
        .when(op.isNull(), F.lit(NOT_AN_ENVELOPE))
        .when(~op.isin(*DEBEZIUM_OPS), F.lit(UNKNOWN_OP))
        .otherwise(F.lit(OK))
    )
    return [
        status.alias("value_status"),
        F.lit(None).cast("long").alias("historical_version"),
        op.alias("cdc_op"),
        cdc_key.alias("cdc_key"),
        F.coalesce(field("source.lsn", "long"), field("__lsn", "long")).alias("cdc_lsn"),
        F.coalesce(field("source.ts_ms", "long"), field("__source_ts_ms", "long")).alias(
            "cdc_source_ts_ms"
        ),
        F.when(table.isNotNull(), F.concat_ws(".", schema, table))
        .otherwise(field("__table", "string"))
        .alias("cdc_table"),
        field("__deleted", "string").alias("cdc_deleted"),
    ]


def kafka_to_bronze(raw: DataFrame, source: str, kind: str, max_value_bytes: int) -> DataFrame:
    """Spark Kafka source rows -> bronze rows (schema `bronze_schema(kind)`)."""
    from pyspark.sql import functions as F

    ingest_time = F.current_timestamp()
    lineage = [
        F.col("key"),
        F.col("value"),
        F.col("headers"),
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("timestampType").alias("kafka_timestamp_type"),
        F.lit(source).alias("source"),
        ingest_time.alias("ingest_time"),
        F.to_date(ingest_time).alias("ingest_date"),
        F.length(F.col("value")).cast("int").alias("value_size"),
    ]
    if kind == "cdc":
        # Two projections, so the JSON parse happens once per row, not once per field read.
        with_envelope = raw.select(*lineage, _parsed_envelope(max_value_bytes))
        kept = [c for c in with_envelope.columns if c != ENVELOPE]
        return with_envelope.select(*kept, *_cdc_columns(max_value_bytes))
    return raw.select(
        *lineage,
        _event_status(max_value_bytes).alias("value_status"),
        F.lit(None).cast("long").alias("historical_version"),
    )


def historical_to_bronze(
    snapshot: DataFrame, source: str, kind: str, version: int, max_value_bytes: int
) -> DataFrame:
    """A Delta snapshot -> bronze rows. Kafka-shaped snapshots (with `value`, and optionally
    key/topic/partition/offset/timestamp) keep those columns; any other table is serialized
    row by row to JSON as the value, so bronze always holds the record as a consumer saw it."""
    from pyspark.sql import functions as F

    names = set(snapshot.columns)
    if "value" in names:
        value = F.col("value").cast("binary")
    else:
        value = F.to_json(F.struct(*[F.col(c) for c in snapshot.columns])).cast("binary")

    def pick(name: str, cast: str) -> Column:
        return F.col(name).cast(cast) if name in names else F.lit(None).cast(cast)

    raw = snapshot.select(
        pick("key", "binary").alias("key"),
        value.alias("value"),
        F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
        pick("topic", "string").alias("topic"),
        pick("partition", "int").alias("partition"),
        pick("offset", "long").alias("offset"),
        pick("timestamp", "timestamp").alias("timestamp"),
        pick("timestampType", "int").alias("timestampType"),
    )
    bronze = kafka_to_bronze(raw, source, kind, max_value_bytes)
    return bronze.withColumn("historical_version", F.lit(version).cast("long"))
