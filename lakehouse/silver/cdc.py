"""Bronze CDC rows -> normalized changes: the row image cut out of each Debezium record (plain,
schemas.enable=true or ExtractNewRecordState-flattened; a tombstone's key), parsed as
`lakehouse.silver.transform` parses event records, plus the change's op, position and time.
Pure DataFrame -> DataFrame; `lakehouse.silver.batch` applies the changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.bronze.transform import CDC_KEY, CDC_LSN, CDC_OP, CDC_SOURCE_TS_MS, TOMBSTONE
from lakehouse.core import instants
from lakehouse.silver import connect_schema, exact_digits
from lakehouse.silver.changes import DELETE, OP, SEQ, TRUNCATE, TS, UPSERT_OPS
from lakehouse.silver.shape import flatten
from lakehouse.silver.transform import (
    CHECKED,
    ERROR,
    RAW_KEY,
    RAW_VALUE,
    TOMBSTONE_ROW,
    TRANSIENT,
    VALUE_ERROR,
    ParsedSchema,
    lineage,
    parse_records,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from lakehouse.core.specs import SilverTableSettings


_SENT = "_lh_sent"  # the row image's Connect schema (`connect_schema.image_fields`)


def cdc_changes(bronze: DataFrame, table: SilverTableSettings, schema: ParsedSchema) -> DataFrame:
    """Bronze CDC rows -> normalized changes: the row image's columns plus `_lh_op`, `_lh_seq` (the
    connector's position, PostgreSQL LSN) and `_lh_ts` (source commit time), with `_lh_*` columns.

    The image is `after` for c/u/r and `before` for d (under REPLICA IDENTITY DEFAULT only the
    key), from the plain envelope, the `payload` of a schemas.enable=true record, or the
    ExtractNewRecordState-flattened row itself. A tombstone (a key with no value) becomes a
    delete of its key (`_lh_tombstone`) with no position yet and Kafka's timestamp as its time:
    after a Debezium delete it repeats it, but under the SMT's default delete handling it is
    the only trace of the delete; `lakehouse.silver.tombstones` decides which."""
    from pyspark.sql import functions as F

    value = F.col(RAW_VALUE).cast("string")
    op = F.col(OP)
    tombstone = F.col(TOMBSTONE_ROW)

    # Each get_json_object parses the whole record (~1.5 s per million envelopes): a lookup
    # that cannot succeed is skipped. Without a backslash (an escape could spell a name
    # otherwise), a name appears as those letters in the text.
    escaped = value.contains("\\")
    can_be_wrapped = value.contains("payload") | escaped

    def pick(path: str) -> Column:
        wrapped = F.when(can_be_wrapped, F.get_json_object(value, f"$.payload.{path}"))
        return F.coalesce(wrapped, F.get_json_object(value, f"$.{path}"))

    flattened = (value.contains("__op") | escaped) & pick("__op").isNotNull()
    payload = F.when(can_be_wrapped, F.get_json_object(value, "$.payload"))
    root_row = F.when(
        payload.isNotNull() & F.get_json_object(value, "$.schema").isNotNull(), payload
    )
    image = (
        F.when(tombstone, F.col(CDC_KEY))
        .when(flattened, F.coalesce(root_row, value))
        .when(op == DELETE, pick("before"))
        .otherwise(pick("after"))
    )
    is_tombstone = F.col("value_error").eqNullSafe(TOMBSTONE)
    staged = bronze.select(
        *lineage(),
        CDC_KEY,
        is_tombstone.alias(TOMBSTONE_ROW),
        F.when(is_tombstone, F.lit(DELETE)).otherwise(F.col(CDC_OP)).alias(OP),
        F.col(CDC_LSN).alias(SEQ),
        F.when(is_tombstone, F.col("kafka_timestamp"))
        .otherwise(instants.epoch_timestamp(F.col(CDC_SOURCE_TS_MS), "ms"))
        .alias(TS),
    )
    # The image is computed once, in its own column, and only read after.
    cut_image = F.col("_lh_image")
    error = (
        F.when(tombstone & cut_image.isNull(), F.lit("tombstone_without_key"))
        .when(tombstone, F.lit(None))
        .when(F.col(VALUE_ERROR).isNotNull(), F.col(VALUE_ERROR))
        .when(~op.isin(*UPSERT_OPS, DELETE, TRUNCATE), F.concat(F.lit("unsupported_op:"), op))
        .when(F.col(SEQ).isNull(), F.lit("no_source_position"))
        .when((op != TRUNCATE) & cut_image.isNull(), F.lit("no_row_image"))
    )
    with_image = staged.withColumn("_lh_image", F.when(op != TRUNCATE, image))

    # get_json_object prints the image's numbers through a double: their digits are read in
    # the record (a tombstone's key) itself, its VARIANT's image chosen as `image` chooses.
    def image_in(whole: Column) -> Column:
        def at(path: str) -> Column:
            return exact_digits.present(F.try_variant_get(whole, path, "variant"))

        def pick_in(path: str) -> Column:
            return F.coalesce(at(f"$.payload.{path}"), at(f"$.{path}"))

        root = F.coalesce(F.when(at("$.schema").isNotNull(), at("$.payload")), whole)
        return (
            F.when(tombstone | flattened, root)
            .when(op == DELETE, pick_in("before"))
            .otherwise(pick_in("after"))
        )

    whole = F.when(tombstone, F.col(RAW_KEY)).otherwise(F.col(RAW_VALUE)).cast("string")
    # What the record's schema (if it carries one) says each decoded column was sent as.
    checked = connect_schema.checked(schema.struct, schema.encodings, schema.nested_encodings)
    if checked:
        sent = connect_schema.image_fields(whole, tombstone | flattened)
        with_image = with_image.withColumn(_SENT, sent)
    cut = exact_digits.Cut(whole, image_in)
    changes = parse_records(
        with_image, F.col("_lh_image"), schema, error, "__", strict=True, cut=cut
    ).drop("_lh_image", CDC_KEY)
    if checked:
        changes = connect_schema.contradicted(changes, checked, F.col(_SENT)).drop(_SENT)
    # A truncate has no image: not an error, and not checked against row rules.
    changes = changes.withColumn(
        ERROR, F.when(op == TRUNCATE, F.lit(None).cast("string")).otherwise(F.col(ERROR))
    )
    changes = changes.withColumn(CHECKED, F.col(ERROR).isNull() & op.isin(*UPSERT_OPS))
    return flatten(changes, keep=TRANSIENT)
