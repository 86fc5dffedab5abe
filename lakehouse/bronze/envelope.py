"""Bronze's CDC columns (op, key, LSN, source timestamp, table, deleted) and a CDC record's
`value_error`, read from a Debezium record: the envelope (`op`, `source`) or the
ExtractNewRecordState-flattened row (`__op`, `__lsn`, ...), each bare or, with
schemas.enable=true, wrapped in `payload`. Pure DataFrame -> DataFrame, like
`lakehouse.bronze.transform`, whose vocabulary it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.bronze.transform import (
    CDC_DELETED,
    CDC_KEY,
    CDC_LSN,
    CDC_OP,
    CDC_SOURCE_TS_MS,
    CDC_TABLE,
    DEBEZIUM_OPS,
    INVALID_JSON,
    INVALID_UTF8,
    IS_UTF8,
    NOT_AN_ENVELOPE,
    TOMBSTONE,
    UNKNOWN_OP,
    VALUE_TEXT,
    size_checks,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import Column, DataFrame

    # A field of the record by its path under the envelope or `payload`, as a type ("string",
    # "long"): the narrow read's struct and the VARIANT are read by the same rules.
    FieldReader = Callable[[str, str], Column]

# CDC columns are read in two ways. First one narrow `from_json` of only the fields they come
# from (_FIELDS: Jackson skips the rest of the record, `before`/`after` and a schemas.enable
# `schema` included), which decides every ordinary record. That parse costs about what a
# VARIANT parse of the whole value does (bench/README.md, 2026-11-27: 3.7 s per million for
# such a from_json with the key cast, 3.8 s for the VARIANT); what it saves are the ~20
# `try_variant_get` lookups per row. Any other record (an unknown or missing op, a field of
# another JSON type, not JSON, JSON null, too big, not UTF-8) is parsed into a VARIANT and read
# by the general rules, which decide every error. Transient columns:
NARROW = "_narrow"  # the narrow read (null when the value is null or too big)
PLAIN = "_plain"  # whether the narrow read decides the row
ENVELOPE = "_envelope"  # the VARIANT, parsed only for the other rows
_CORRUPT = "_corrupt"  # Spark's JSON reader names a record it cannot read here
_FIELDS = (
    "op STRING, __op STRING, __lsn BIGINT, __source_ts_ms BIGINT, __table STRING, "
    "__deleted STRING, "
    "source STRUCT<`schema`: STRING, `table`: STRING, lsn: BIGINT, ts_ms: BIGINT>"
)
# Spark's JSON reader also takes single-quoted strings and NaN/Infinity by default; the
# VARIANT parser (the rules that decided before) takes neither, so neither does this read:
# such a value stays `invalid_json` instead of reaching silver.
_STRICT = {
    "columnNameOfCorruptRecord": _CORRUPT,
    "allowSingleQuotes": "false",
    "allowNonNumericNumbers": "false",
}
_PARSABLE = "value IS NOT NULL AND length(value) <= {max_value_bytes}"


def _narrow_read(max_value_bytes: int) -> str:
    schema = f"{_FIELDS}, payload STRUCT<{_FIELDS}>, {_CORRUPT} STRING"
    options = "map(" + ", ".join(f"'{k}', '{v}'" for k, v in _STRICT.items()) + ")"
    return (
        f"CASE WHEN {_PARSABLE.format(max_value_bytes=max_value_bytes)} "
        f"THEN from_json({VALUE_TEXT}, '{schema}', {options}) END AS {NARROW}"
    )


def _narrow_field(path: str) -> str:
    """A field as the VARIANT rules read it: under `payload` (schemas.enable=true) first."""
    return f"coalesce({NARROW}.payload.{path}, {NARROW}.{path})"


def _plain() -> Column:
    """The narrow read decides the row: it read every field as declared and found a known op
    (by `_columns`' rule), and the value is UTF-8 (the VARIANT rules' first test)."""
    from pyspark.sql import functions as F

    known_op = _narrow_columns()[CDC_OP].isin(*DEBEZIUM_OPS)
    read = F.expr(f"{NARROW} IS NOT NULL AND {NARROW}.{_CORRUPT} IS NULL AND {IS_UTF8}")
    return F.coalesce(read & known_op, F.lit(False)).alias(PLAIN)


def _parsed_envelope(max_value_bytes: int) -> str:
    return (
        f"CASE WHEN NOT {PLAIN} AND {_PARSABLE.format(max_value_bytes=max_value_bytes)} "
        f"THEN try_parse_json({VALUE_TEXT}) END AS {ENVELOPE}"
    )


def _columns(field: FieldReader) -> dict[str, Column]:
    """The CDC columns of a Debezium record, whichever way its fields are read: the envelope
    (`op`, `source`) or the ExtractNewRecordState-flattened row (`__op`, `__lsn`, ...)."""
    from pyspark.sql import functions as F

    # A flattened record carries `__op`; its table may have columns named `op` or `source`,
    # so then only the `__` fields count.
    flat_op = field("__op", "string")
    flattened = flat_op.isNotNull()

    def pick(envelope_path: str, flat_path: str, kind: str) -> Column:
        return F.when(flattened, field(flat_path, kind)).otherwise(field(envelope_path, kind))

    schema, table = field("source.schema", "string"), field("source.table", "string")
    return {
        CDC_OP: F.coalesce(flat_op, field("op", "string")),
        CDC_LSN: pick("source.lsn", "__lsn", "long"),
        CDC_SOURCE_TS_MS: pick("source.ts_ms", "__source_ts_ms", "long"),
        CDC_TABLE: F.when(flattened, field("__table", "string")).when(
            table.isNotNull(), F.concat_ws(".", schema, table)
        ),
        CDC_DELETED: field("__deleted", "string"),
    }


def _narrow_columns() -> dict[str, Column]:
    """The CDC columns of a plain row (no error), from the narrow read (already typed)."""
    from pyspark.sql import functions as F

    def field(path: str, kind: str) -> Column:
        return F.expr(_narrow_field(path))

    return {"value_error": F.lit(None).cast("string"), **_columns(field)}


def _variant_columns(max_value_bytes: int) -> dict[str, Column]:
    """The CDC columns and `value_error` of any other row, from the `_envelope` VARIANT
    (parsed once per row in the projection before this one)."""
    from pyspark.sql import functions as F

    variant = F.col(ENVELOPE)

    def field(path: str, kind: str) -> Column:
        def get(at: str) -> Column:
            return F.try_variant_get(variant, at, kind)

        return F.coalesce(get(f"$.payload.{path}"), get(f"$.{path}"))

    columns = _columns(field)
    op = columns[CDC_OP]
    # Null when the raw value passes, so the envelope checks decide (in this order).
    raw_error = F.expr(
        f"CASE {size_checks(TOMBSTONE, max_value_bytes)} "
        f"WHEN NOT {IS_UTF8} THEN '{INVALID_UTF8}' END"
    )
    # A JSON `null` value (or a schemas.enable=true wrapper around one) is a tombstone too:
    # Kafka Connect's JsonConverter writes one when a transform (ExtractNewRecordState's
    # default delete handling) leaves a record with a value schema but no value.
    # The wrapper is exactly {"schema": {"type": ...}, "payload": null}: a flattened row with
    # columns named `schema` and `payload` has its `__op`.
    wrapped = F.try_variant_get(variant, "$.payload", "variant")
    json_null = F.is_variant_null(variant) | (
        F.try_variant_get(variant, "$.schema.type", "string").isNotNull()
        & F.coalesce(F.is_variant_null(wrapped), F.lit(False))
        & F.try_variant_get(variant, "$.__op", "variant").isNull()
        & F.try_variant_get(variant, "$.op", "variant").isNull()
    )
    error = F.coalesce(
        raw_error,
        F.when(variant.isNull(), F.lit(INVALID_JSON))
        .when(json_null, F.lit(TOMBSTONE))
        .when(op.isNull(), F.lit(NOT_AN_ENVELOPE))
        .when(~op.isin(*DEBEZIUM_OPS), F.lit(UNKNOWN_OP)),
    )
    return {"value_error": error, **columns}


def _cdc_key() -> Column:
    from pyspark.sql import functions as F

    key_text = F.col("key").cast("string")
    key_payload = F.get_json_object(key_text, "$.payload")
    # With schemas.enable=true the key is {"schema":..,"payload":{..}}; keep the payload only,
    # so the same row has the same cdc_key whichever converter setting produced it. Each
    # get_json_object parses the key again (~1.6 s per million keys, bench/README.md), so
    # only keys that can be wrapped get there: without a backslash (an escape), a JSON name
    # `payload` appears as those letters in the text.
    wrapped = F.get_json_object(key_text, "$.schema").isNotNull() & key_payload.isNotNull()
    can_be_wrapped = key_text.contains("payload") | key_text.contains("\\")
    return F.when(can_be_wrapped & wrapped, key_payload).otherwise(key_text)


def _cdc_columns(max_value_bytes: int) -> list[Column]:
    """The CDC columns in bronze's order: the narrow read's where it decides the row, else
    the VARIANT's."""
    from pyspark.sql import functions as F

    narrow, variant = _narrow_columns(), _variant_columns(max_value_bytes)
    plain = F.col(PLAIN)

    def either(name: str) -> Column:
        return F.when(plain, narrow[name]).otherwise(variant[name]).alias(name)

    return [
        either("value_error"),
        either(CDC_OP),
        _cdc_key().alias(CDC_KEY),
        *[either(c) for c in (CDC_LSN, CDC_SOURCE_TS_MS, CDC_TABLE, CDC_DELETED)],
    ]


def with_cdc_columns(lineage: DataFrame, max_value_bytes: int) -> DataFrame:
    """Bronze's lineage rows (`key` and `value` among them) plus the CDC columns. One
    projection per step, so each parse happens once per row, not once per field read (Spark
    does not merge projections that would repeat a costly expression: each step's column is
    read more than once by the next)."""
    narrow = lineage.selectExpr("*", _narrow_read(max_value_bytes))
    plain = narrow.select("*", _plain())
    parsed = plain.selectExpr("*", _parsed_envelope(max_value_bytes))
    kept = [c for c in parsed.columns if c not in (NARROW, PLAIN, ENVELOPE)]
    return parsed.select(*kept, *_cdc_columns(max_value_bytes))
