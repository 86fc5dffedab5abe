"""Feldera's `insert_delete` JSON format: a Kafka record holds one change, `{"insert": row}`
or `{"delete": row}`, or a JSON array of them. Bronze rows of such a source -> normalized
changes (`lakehouse.silver.changes`) for a keyed (scd1/scd2) silver table: an insert is an
upsert (`c`), a delete a delete (`d`).

Feldera buffers several changes in one record as newline-delimited JSON, which is read too.

The format carries no source position, so changes are ordered by where they sit in Kafka: the
record's offset, then the change's place in it (`_lh_seq` = offset * 100,000 + index). Offsets
order only the records of one partition, and Feldera's producer sends no key (a key's changes
spread over the partitions), so the source reads one topic (checked at load) of one partition:
a record from another partition is quarantined. A record that is not such a change, or a row
that does not decode, goes to quarantine with the reason. Pure DataFrame -> DataFrame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.silver.changes import DELETE, OP, SEQ, TS
from lakehouse.silver.exact_digits import Cut, present
from lakehouse.silver.shape import flatten
from lakehouse.silver.transform import (
    CHECKED,
    ERROR,
    OFFSET,
    PARTITION,
    TRANSIENT,
    VALUE_ERROR,
    ParsedSchema,
    lineage,
    parse_records,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from lakehouse.core.specs import SilverTableSettings

PER_RECORD = 100_000  # at most this many changes in one record's array
INSERT = "c"


def insert_delete_changes(
    bronze: DataFrame, table: SilverTableSettings, schema: ParsedSchema
) -> DataFrame:
    """Bronze rows of an insert_delete source -> one change per insert or delete."""
    from pyspark.sql import functions as F

    blank = "concat(' ', char(9), char(10), char(13))"
    text = F.expr(f"trim(BOTH {blank} FROM CAST(value AS STRING))")
    # Each array element as its JSON text, else one change per non-blank line (Feldera
    # buffers several changes in one record, newline-delimited). Read through VARIANT, which
    # keeps a number's digits (Spark's JSON functions re-render decimals through a double).
    lines = F.filter(F.split(text, r"\r?\n"), lambda line: F.trim(line) != "")
    array = F.try_variant_get(F.try_parse_json(text), "$", "array<string>")
    elements = F.when(text.startswith("["), array).otherwise(lines)
    staged = bronze.select(
        *lineage(),
        F.col("kafka_timestamp").alias(TS),
        elements.alias("_lh_elements"),
        F.when(text.startswith("["), text).alias("_lh_array"),
    )
    # An empty array holds no change: nothing to keep. A value that does not parse keeps one
    # row (a null element) that carries its error.
    listed = F.col("_lh_elements")
    staged = staged.where(listed.isNull() | (F.size(listed) > 0)).select(
        "*", F.posexplode_outer("_lh_elements").alias("_lh_pos", "_lh_change")
    )
    change = F.try_parse_json(F.col("_lh_change"))
    inserted = F.try_variant_get(change, "$.insert", "string")
    deleted = F.try_variant_get(change, "$.delete", "string")
    op = F.when(inserted.isNotNull() & deleted.isNull(), F.lit(INSERT)).when(
        deleted.isNotNull() & inserted.isNull(), F.lit(DELETE)
    )
    pos = F.coalesce(F.col("_lh_pos"), F.lit(0))
    error = (
        F.when(F.col(VALUE_ERROR).isNotNull(), F.col(VALUE_ERROR))
        # Offsets order one partition's records only.
        .when(F.col(PARTITION) != 0, F.lit("insert_delete_needs_a_one_partition_topic"))
        .when(change.isNull(), F.lit("invalid_json"))
        .when(op.isNull(), F.lit("not_an_insert_delete_change"))
        .when(pos >= PER_RECORD, F.lit(f"over_{PER_RECORD}_changes_in_one_record"))
    )
    spent = ("_lh_elements", "_lh_pos", "_lh_change", "_lh_array")
    changes = staged.select(
        *[c for c in staged.columns if c not in spent],
        op.alias(OP),
        (F.col(OFFSET) * PER_RECORD + pos).alias(SEQ),
        F.coalesce(inserted, deleted).alias("_lh_image"),
        error.alias("_lh_error_in"),
        F.coalesce("_lh_array", "_lh_change").alias("_lh_whole"),
        F.when(F.col("_lh_array").isNotNull(), pos).alias("_lh_at"),
    )
    parsed = parse_records(
        changes, F.col("_lh_image"), schema, F.col("_lh_error_in"), strict=True, cut=_cut()
    ).drop("_lh_image", "_lh_error_in", "_lh_whole", "_lh_at")
    parsed = parsed.withColumn(CHECKED, F.col(ERROR).isNull() & (F.col(OP) == INSERT))
    return flatten(parsed, keep=TRANSIENT)


def _cut() -> Cut:
    """A change's image is a VARIANT's text, which prints an exponent form through a double:
    its digits are read in the record, or the line, it came from (`_lh_whole`), the change
    at `_lh_at` of an array."""
    from pyspark.sql import functions as F

    def image_in(whole: Column) -> Column:
        elements = F.try_variant_get(whole, "$", "array<variant>")
        change = F.when(F.col("_lh_at").isNull(), whole).otherwise(F.get(elements, F.col("_lh_at")))
        return F.coalesce(
            present(F.try_variant_get(change, "$.insert", "variant")),
            present(F.try_variant_get(change, "$.delete", "variant")),
        )

    return Cut(F.col("_lh_whole"), image_in)
