"""A Debezium record's Kafka Connect schema (`schemas.enable=true`) against the encodings silver
decodes its columns by (`lakehouse.silver.decode`).

A source declares its connector's modes, and silver decodes by them. A connector run with other
modes sends text that can decode to another value: `decimal.handling.mode=string` sends a
`numeric(10,0)` as `"1234"`, which is valid base64 (read as precise, -2658824), and adaptive
mode sends a `timestamp(3)` as epoch milliseconds (read as the default microseconds, a day in
January 1970). The value alone cannot tell; the schema a record carries names what was sent
(`io.debezium.time.Timestamp`, a plain `string`). A column whose schema contradicts its
declared encoding is named here, and its change is quarantined instead of stored. Without
schemas nothing can be checked: the source's modes must match its connector (managed
connectors get them from the source). Pure Column expressions; `lakehouse.silver.cdc` uses
them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakehouse.core.columns import named
from lakehouse.silver import decode
from lakehouse.silver.precise import let
from lakehouse.silver.transform import ERROR, MISTYPED, UNDECODABLE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

# The encoding each Connect logical type (a field schema's `name`) is sent in.
SENT_AS = {
    "org.apache.kafka.connect.data.Decimal": "base64",
    "io.debezium.data.VariableScaleDecimal": "base64",
    "io.debezium.time.Timestamp": "epoch_ms",
    "org.apache.kafka.connect.data.Timestamp": "epoch_ms",
    "io.debezium.time.MicroTimestamp": "epoch_us",
    "io.debezium.time.NanoTimestamp": "epoch_ns",
    "io.debezium.time.Date": "epoch_days",
    "org.apache.kafka.connect.data.Date": "epoch_days",
    "io.debezium.time.Time": "time_ms",
    "org.apache.kafka.connect.data.Time": "time_ms",
    "io.debezium.time.MicroTime": "time_us",
    "io.debezium.time.NanoTime": "time_ns",
}
PREFIX = "schema_mismatch: "
_DECIMAL = "org.apache.kafka.connect.data.Decimal"  # the one whose scale is in its schema
# Only what the check reads: the image's field names, Connect types, logical names and their
# parameters (a Decimal's scale), and the same of an array's elements (`items`).
_TYPE = "type:string,name:string,parameters:map<string,string>"
_FIELD = f"struct<field:string,{_TYPE},items:struct<{_TYPE}>"
_PARTS = ("field", "type", "name", "parameters", "items")
_SCHEMA = f"struct<schema:struct<fields:array<{_FIELD},fields:array<{_FIELD}>>>>>>"


def checked(
    struct: StructType, encodings: Mapping[str, str], nested: Mapping[str, str]
) -> dict[str, str]:
    """The top-level columns a record's schema can contradict, with the encoding each is read
    by ("bytes" for a BINARY); an ARRAY of such values with its elements' encoding (`nested`:
    the source's defaults for a leaf). A STRING read as text keeps whatever was sent, as
    documented."""
    from pyspark.sql.types import ArrayType, BinaryType

    out = {}
    for f in struct.fields:
        kind, encoding = decode.kind_of(f.dataType), encodings.get(f.name, "")
        if isinstance(f.dataType, ArrayType):
            kind = decode.kind_of(f.dataType.elementType)
            leaves = decode.leaf_encodings(nested, encoding)
            encoding = leaves.get(kind or "", "")
            if isinstance(f.dataType.elementType, BinaryType):
                kind = "binary"
        elif isinstance(f.dataType, BinaryType):
            kind = "binary"
        if kind == "binary":
            out[f.name] = "bytes"
        elif kind in ("decimal", "timestamp", "date") or encoding.startswith("time_"):
            out[f.name] = encoding
    return out


def image_fields(record: Column, image_is_root: Column) -> Column:
    """The Connect schema of a record's row image, as a struct of parallel arrays (`field`,
    `type`, `name`, `parameters`, `items`: an array's element schema), null when the record
    carries no schema: the envelope's `after` (the same schema as `before`), or the whole
    record's (a flattened record, a tombstone's key)."""
    from pyspark.sql import functions as F

    def of(top: Column) -> Column:
        position = F.array_position(top["field"], "after").cast("int")
        after = F.when(position > 0, F.element_at(top, position))["fields"]
        return F.struct(
            *[F.when(image_is_root, top[p]).otherwise(after[p]).alias(p) for p in _PARTS]
        )

    # Parsed once, and only for a record that starts with one, as Kafka's JsonConverter writes
    # it: without schemas every Debezium record still holds `"schema"` (its source's).
    top = F.from_json(record, _SCHEMA)["schema"]["fields"]
    return F.when(record.startswith('{"schema":{'), let(top, of))


def contradicted(changes: DataFrame, columns: Mapping[str, str], schema: Column) -> DataFrame:
    """`changes` (parsed, `lakehouse.silver.transform.parse_records`) with each of `columns`
    (name -> the encoding it was read by, `checked`) whose value was in the record while the
    record's `schema` (`image_fields`) says it was sent otherwise set to NULL (what it decoded
    to is not the value sent, so a replay cannot apply it), and the change's error saying so:
    `schema_mismatch: name (what was sent, read as encoding), ...`. It outranks `undecodable`
    (it says why) but not an error found before parsing."""
    from pyspark.sql import functions as F

    reasons = {
        c: _reason(schema, c, e, changes.schema[c].dataType).alias(f"_lh_mismatch{i}")
        for i, (c, e) in enumerate(columns.items())
    }
    staged = changes.select("*", *reasons.values())
    found = {c: F.col(f"_lh_mismatch{i}") for i, c in enumerate(columns)}
    listed = F.array_compact(F.array(*found.values()))
    mismatch = F.when(F.size(listed) > 0, F.concat(F.lit(PREFIX), F.array_join(listed, ", ")))
    error = F.col(ERROR)
    replaced = {
        **{c: F.when(r.isNull(), named(c)).alias(c) for c, r in found.items()},
        ERROR: F.when(error.isNull() | error.startswith(UNDECODABLE), F.coalesce(mismatch, error))
        .otherwise(error)
        .alias(ERROR),
    }
    return staged.select(*[replaced.get(c, named(c)) for c in changes.columns])


def _reason(schema: Column, column: str, encoding: str, kind: DataType) -> Column:
    """`column (what was sent, read as encoding)` when the record holds a value for `column`
    (of `kind`; an ARRAY: its elements) and its `schema` says it was sent otherwise (or, for
    a precise decimal, `column (its logical type scale s, read at scale t)`: unscaled bytes
    read at another scale are off by a power of ten); else null."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DecimalType

    position = F.array_position(schema["field"], column).cast("int")
    array = isinstance(kind, ArrayType)
    element = kind.elementType if isinstance(kind, ArrayType) else kind
    scale = element.scale if isinstance(element, DecimalType) else None

    def at(part: str) -> Column:
        found = F.when(position > 0, F.element_at(schema["items" if array else part], position))
        return found[part] if array else found

    sent_type, sent_name = at("type"), at("name")
    if encoding == "bytes":
        wrong = sent_type != "bytes"
    elif encoding == "base64":
        wrong = ~F.coalesce(sent_name.isin(*_names("base64")), F.lit(False))
    else:
        wrong = F.coalesce(
            sent_name.isin(*[n for n, e in SENT_AS.items() if e != encoding]), F.lit(False)
        )
    # Present: decoded, or there and not decoded. A NULL (or no element) is stored right
    # whatever was sent.
    value = named(column)
    decoded = (F.size(value) > 0) if array else value.isNotNull()
    present = decoded | F.array_contains(F.col(MISTYPED), column)
    found = present & (position > 0)
    sent = F.coalesce(sent_name, sent_type)
    reason = F.when(
        found & wrong, F.concat(F.lit(f"{column} ("), sent, F.lit(f", read as {encoding})"))
    )
    if encoding != "base64":
        return reason
    sent_scale = at("parameters")["scale"]
    rescaled = (sent_name == _DECIMAL) & (sent_scale != str(scale))
    at_scale = F.lit(" scale "), sent_scale, F.lit(f", read at scale {scale})")
    return reason.when(found & rescaled, F.concat(F.lit(f"{column} ("), sent, *at_scale))


def _names(encoding: str) -> list[str]:
    return [n for n, e in SENT_AS.items() if e == encoding]
