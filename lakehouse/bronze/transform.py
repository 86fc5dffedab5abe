"""Bronze: the raw Kafka record, kept byte-for-byte, plus lineage and parse diagnostics.

Pure DataFrame -> DataFrame functions and the table's contract (schema, properties). Nothing
here reads or writes; `lakehouse.bronze.ingest` does the I/O. A record that does not parse is
never an exception and never dropped: `value_error` says what is wrong with it (null when
nothing is, the convention of Spark's `_corrupt_record` and Auto Loader's `_rescued_data`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.core.columns import named, sql_string

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

# Bronze is append-only and protected from resets; CDF feeds silver.
BRONZE_PROPERTIES: dict[str, str] = {
    "delta.appendOnly": "true",
    "delta.enableChangeDataFeed": "true",
    "pipelines.reset.allowed": "false",
}
# Delta file statistics (data skipping) only where they prune: Kafka lineage, event time,
# what failed to parse (a file whose `value_error` null count equals its row count holds no
# bad record); for CDC the source table and position. Delta's default, min/max/null
# counts of the first 32 columns, spent ~15% of ingest CPU mostly on the raw key/value bytes
# and headers, which no query prunes by. Not `topic` either (a file holds one Kafka partition
# of one topic, and string min/max cost ~4% of ingest CPU) nor `ingest_time` (the
# `ingest_date` partitions already prune by arrival); Parquet's own row-group statistics
# still cover both (bench/README.md).
STATS_COLUMNS = ("partition", "offset", "kafka_timestamp", "value_error")
# The CDC columns bronze adds to each Debezium record (silver orders and applies by them).
CDC_OP, CDC_KEY, CDC_LSN = "cdc_op", "cdc_key", "cdc_lsn"
CDC_SOURCE_TS_MS, CDC_TABLE, CDC_DELETED = "cdc_source_ts_ms", "cdc_table", "cdc_deleted"
CDC_STATS_COLUMNS = (CDC_TABLE, CDC_LSN)
# By source, then arrival date. `source` is one value per ingest query, so as a partition
# column it lives in the Delta log, not in every row of every file: as a stored string column
# it cost ~4% of the write stage's CPU (dictionary lookup, statistics, two row copies), and a
# table that several sources share (`bronze_table`) prunes by it (bench/README.md).
PARTITION_COLUMNS = ("source", "ingest_date")
# Parquet settings for bronze files, for the writing query only (Spark hands SQL settings to
# the Parquet writer). The raw key/value bytes and headers get no min/max statistics, for the
# same reason as STATS_COLUMNS: no query prunes by raw bytes, and each value costs two byte
# comparisons. `value` gets no dictionary either: payloads are unique, so Parquet hashed the
# first MB of them in every file only to fall back to plain encoding (bench/README.md).
# Column paths as Spark writes them (its standard, non-legacy Parquet list layout).
RAW_PARQUET_COLUMNS = ("key", "value", "headers.list.element.key", "headers.list.element.value")
PARQUET_CONF: dict[str, str] = {
    "parquet.enable.dictionary#value": "false",
    **{f"parquet.column.statistics.enabled#{c}": "false" for c in RAW_PARQUET_COLUMNS},
}

# value_error: null for a usable value, else one of this closed set (silver and quarantine
# filter on them). Null, not "ok", for the usual case: a stored string in every row cost ~8%
# of the ingest write's CPU (dictionary lookup, statistics, two row copies), a null only its
# definition level (bench/README.md).
NULL_VALUE = "null_value"  # a tombstone, or a producer that sent no value
EMPTY_VALUE = "empty_value"
INVALID_UTF8 = "invalid_utf8"
# events: not shaped like a JSON object/array (plain text, truncation, garbage); CDC: fails
# a full JSON parse
INVALID_JSON = "invalid_json"
OVERSIZE = "oversize"  # kept, but larger than the source's max_value_bytes: not parsed
TOMBSTONE = "tombstone"  # CDC: a key with a null (or JSON null) value after or for a delete
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
        StructField("value_error", StringType()),
        # Set for rows loaded by --historical: the snapshot's Delta version. Live rows do not
        # write it at all: Delta reads a table column missing from a file as null, and every
        # column a file carries costs Parquet work per row, even when null (bench/README.md).
        StructField("historical_version", LongType()),
    ]
    if kind == "cdc":
        fields += [
            StructField(CDC_OP, StringType()),
            StructField(CDC_KEY, StringType()),
            StructField(CDC_LSN, LongType()),
            StructField(CDC_SOURCE_TS_MS, LongType()),
            StructField(CDC_TABLE, StringType()),
            StructField(CDC_DELETED, StringType()),
        ]
    return StructType(fields)


# The bronze projection is SQL text, parsed and analysed in one call: built as ~100 Column
# objects over py4j it took 0.1 s more per job run (bench/README.md).

# The value's bytes as a string, without a UTF-8 check. Every mention of the column `value`
# in a projection copies its bytes again; this one expression, used throughout one test, is
# evaluated once per row (Spark's common subexpression elimination).
VALUE_TEXT = "CAST(value AS STRING)"
IS_UTF8 = f"is_valid_utf8({VALUE_TEXT})"


def size_checks(null_error: str, max_value_bytes: int) -> str:
    """The WHEN branches every value_error CASE has, in this order: no value, an empty one,
    or one too big to parse."""
    return (
        f"WHEN value IS NULL THEN '{null_error}' "
        f"WHEN length(value) = 0 THEN '{EMPTY_VALUE}' "
        f"WHEN length(value) > {max_value_bytes} THEN '{OVERSIZE}'"
    )


def _event_error(max_value_bytes: int) -> str:
    """Per-row diagnosis. A well-formed event is decided by the first test alone, which reads
    `value` once; the other tests run only for rows that failed it, the UTF-8 scan last."""
    return (
        f"CASE WHEN {_delimited_json(max_value_bytes)} THEN NULL "
        f"{size_checks(NULL_VALUE, max_value_bytes)} "
        f"WHEN {_padded_json()} THEN NULL "
        f"WHEN NOT {IS_UTF8} THEN '{INVALID_UTF8}' "
        f"ELSE '{INVALID_JSON}' END"
    )


def _delimited_json(max_value_bytes: int) -> str:
    """A cheap shape check: small enough to parse, and delimited like a JSON object or array.
    It catches plain text, truncation and garbage at a fraction of the cost of a full parse
    (measured in bench/README.md); silver parses strictly with the declared schema and
    quarantines what still fails. Null, empty and oversize values fail it."""

    def delimited(first: str, last: str) -> str:
        # startswith/endswith compare bytes in place; substring() would copy them per row.
        return f"(startswith({VALUE_TEXT}, '{first}') AND endswith({VALUE_TEXT}, '{last}'))"

    return (
        f"(octet_length({VALUE_TEXT}) <= {max_value_bytes} "
        f"AND ({delimited('{', '}')} OR {delimited('[', ']')}))"
    )


def _padded_json() -> str:
    """The same shape check after trimming JSON's whitespace (trim() alone strips only
    spaces), built with char() so it does not depend on
    spark.sql.parser.escapedStringLiterals. Only values that failed the plain check get here."""
    whitespace = "concat(' ', char(9), char(10), char(13))"
    text = f"trim(BOTH {whitespace} FROM {VALUE_TEXT})"
    return f"concat(substring({text}, 1, 1), substring({text}, -1, 1)) IN ('{{}}', '[]')"


def _batch_constant(now: str) -> str:
    """`current_timestamp()` or `current_date()`, kept out of the Java Spark generates.

    In a micro-batch Spark replaces them with the batch's time as a literal after optimizing,
    and the code generator pastes timestamp/date literals into the generated source. Every
    micro-batch then compiled its projection again and ran the new class cold in the JVM
    (2 compiles per batch, bench/README.md). An `aggregate` over an empty array returns its
    start value unchanged, and Spark evaluates higher-order functions without generating
    code, so the literal stays a reference and the class is reused."""
    return f"aggregate(CAST(array() AS ARRAY<INT>), {now}, (acc, x) -> acc)"


def _lineage(source: str) -> list[str]:
    return [
        "key",
        "value",
        "headers",
        "topic",
        "`partition`",
        "`offset`",
        "timestamp AS kafka_timestamp",
        "timestampType AS kafka_timestamp_type",
        f"{sql_string(source)} AS source",
        f"{_batch_constant('current_timestamp()')} AS ingest_time",
        # Not to_date(ingest_time), which would convert on every row: both come from the
        # same micro-batch timestamp.
        f"{_batch_constant('current_date()')} AS ingest_date",
    ]


def kafka_to_bronze(raw: DataFrame, source: str, kind: str, max_value_bytes: int) -> DataFrame:
    """Spark Kafka source rows -> bronze rows: the columns of `bronze_schema(kind)` but
    `historical_version`, which only historical loads write."""
    if kind == "cdc":
        # Imported here: envelope.py reads this module's vocabulary (error codes, columns).
        from lakehouse.bronze.envelope import with_cdc_columns

        return with_cdc_columns(raw.selectExpr(*_lineage(source)), max_value_bytes)
    return raw.selectExpr(*_lineage(source), f"{_event_error(max_value_bytes)} AS value_error")


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
        value = F.to_json(F.struct(*[named(c) for c in snapshot.columns])).cast("binary")

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
