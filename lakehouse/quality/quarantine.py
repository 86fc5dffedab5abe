"""The quarantine (`_system/quarantine`): records a `quarantine` rule rejected, kept with
their failed rule names, the parsed record (JSON, what a repair edits), the raw key and value
and their bronze lineage, so they can be repaired and replayed (`lakehouse replay`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakehouse.quality.expectations import Expectation, fails_any

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType

# A quarantined row's status: waiting for a repair, applied by a replay, or dropped by a
# `drop` rule on replay.
QUARANTINED, REPLAYED, DROPPED = "quarantined", "replayed", "dropped"
# When a row was quarantined (a replay of a batch is told from it by this time).
QUARANTINED_AT = "quarantined_at"


def quarantine_schema() -> StructType:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("id", StringType()),
            StructField("table", StringType()),
            StructField("run_id", StringType()),
            StructField("batch_id", LongType()),
            StructField(QUARANTINED_AT, TimestampType()),
            StructField("failed_rules", ArrayType(StringType())),
            StructField("parse_error", StringType()),
            StructField("record", StringType()),
            StructField("op", StringType()),
            StructField("seq", LongType()),
            StructField("raw_key", BinaryType()),
            StructField("raw_value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("status", StringType()),
            StructField("replayed_at", TimestampType()),
        ]
    )


def replay_status(expectations: Sequence[Expectation]) -> Column:
    """What a replay makes of a re-checked row: still quarantined, dropped, or replayed."""
    from pyspark.sql import functions as F

    return (
        F.when(fails_any(expectations, ("quarantine",)), F.lit(QUARANTINED))
        .when(fails_any(expectations, ("drop",)), F.lit(DROPPED))
        .otherwise(F.lit(REPLAYED))
    )
