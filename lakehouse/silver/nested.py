"""Nested values (STRUCT, ARRAY and MAP columns) decoded leaf by leaf as top-level values are
(`lakehouse.silver.decode`), from the record's VARIANT.

Spark's JSON reading rounded a nested decimal (13.299 into DECIMAL(12,2) was 13.30), made a
nested integer given "2" or 3.5, a timestamp given garbage and an element past its type's
range NULL, and a double past its range Infinity, each without a trace. Here a value whose
every leaf decodes is the column's value; any other is NULL, so `parse_records` rescues the
field (an event) or refuses the change (CDC): stored exactly or not at all.

A VARIANT keeps a number's digits (up to 38). In exponent form, or longer, it holds a double
whose digits cannot be told: such a number does not decode into an integer, decimal, timestamp
or string leaf, nor does one outside a double's range (or `0e0`) into a double leaf. A leaf
takes the encoding its column declares, where its kind takes it, else its source's default for
its kind (an events feed's ISO dates and timestamps and text decimals; a CDC source's epoch
days, epoch microseconds, or milliseconds in `connect` mode, and with `decimal_handling_mode:
precise` base64 decimals: a PostgreSQL `timestamp(3)[]` under `adaptive` sends milliseconds, so
its column declares `epoch_ms`). A nested string keeps the VARIANT's text of a number (`1.5`
for `1.50`) or of an object (its keys in order) that holds no such double, and a DOUBLE leaf's
`-0.0` is `0.0`. A record with a duplicate key has no VARIANT: its nested values do not decode.
A value holding a field its struct does not declare, at any depth, is still the column's value
when every declared leaf decodes, and the whole field is rescued as well (the record's
`_rescued_data`), so the unknown field is kept, not dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.core import instants
from lakehouse.silver import decode, precise, temporal
from lakehouse.silver.exact_digits import variant_path

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import Column
    from pyspark.sql.types import DataType, StructType

# What Java's Object.toString prints for an array: `[` per dimension, the element type, `@`,
# the identity hash in hex.
JAVA_ARRAY_NAME = r"^\[+(?:[BCDFIJSZ]|L[\w.$]+;)@[0-9a-f]{1,8}$"

# + column position: struct(v: the value, ok: whether every leaf decoded, extra: whether an
# object in it holds a field its struct does not declare)
PAIR = "_lh_nested"


def columns(struct: StructType) -> list[str]:
    """The top-level columns decoded here (the others keep Spark's JSON reading)."""
    return [f.name for f in struct.fields if supported(f.dataType) and variant_path(f.name)]


def supported(data_type: DataType) -> bool:
    """Whether `data_type` is nested and every leaf of it has a decoder (a MAP's keys are
    strings, a field's name has a VARIANT path): else it keeps Spark's JSON reading."""
    from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType, StructType

    def leaves_ok(t: DataType) -> bool:
        if isinstance(t, StructType):
            return all(variant_path(f.name) is not None and leaves_ok(f.dataType) for f in t.fields)
        if isinstance(t, ArrayType):
            return leaves_ok(t.elementType)
        if isinstance(t, MapType):
            return isinstance(t.keyType, StringType) and leaves_ok(t.valueType)
        return decode.kind_of(t) is not None or isinstance(t, BinaryType)

    return isinstance(data_type, StructType | ArrayType | MapType) and leaves_ok(data_type)


def pair(value: Column, data_type: DataType, encodings: Mapping[str, str] | None = None) -> Column:
    """struct(v, ok, extra) of `value` (a VARIANT, null when absent) as `data_type`: `v` is
    null when any leaf in it that is not JSON null does not decode (read through `value_of`);
    projected once, as its fields are read apart. `encodings`: kind -> a leaf's encoding."""
    return _pair(value, data_type, encodings or decode.kind_encodings("events"))


def value_of(pair: Column) -> Column:
    from pyspark.sql import functions as F

    return F.when(pair["ok"], pair["v"])


def has_extra(pair: Column) -> Column:
    """Whether the value holds an undeclared field (it is then rescued too)."""
    return pair["extra"]


def kept_with_extra(pair: Column) -> Column:
    """Whether the value is stored (every leaf decoded) and holds an undeclared field."""
    return pair["ok"] & pair["extra"]


def field(value: Column, name: str) -> Column:
    """Field `name` of the VARIANT object `value` (null when absent)."""
    from pyspark.sql import functions as F

    path = variant_path(name)
    assert path is not None, "columns() and supported() leave such names out"
    return F.try_variant_get(value, path, "variant")


def _decode(
    v: Column, data_type: DataType, enc: Mapping[str, str]
) -> tuple[Column, Column, Column]:
    """(the value, whether it decoded: absent, JSON null, or every leaf decoded, whether an
    object in it holds an undeclared field)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    missing = v.isNull() | F.is_variant_null(v)
    if isinstance(data_type, StructType):
        # An object's fields as a map: null when `v` is not an object.
        fields = F.try_variant_get(v, "$", "map<string,variant>")
        parts = [_decode(field(v, f.name), f.dataType, enc) for f in data_type.fields]
        names = [f.name for f in data_type.fields]
        # An object's keys are unique: more of them than declared fields present means an
        # undeclared one (no lambda: they run interpreted, per element inside an array).
        present = sum((field(v, n).isNotNull().cast("int") for n in names), start=F.lit(0))
        ok, extra = fields.isNotNull(), F.size(fields) > present
        for _, part_ok, part_extra in parts:
            ok, extra = ok & part_ok, extra | part_extra
        value = F.struct(*[p.alias(n) for (p, _, _), n in zip(parts, names, strict=True)])
        return F.when(~missing, value), ok | missing, F.coalesce(extra, F.lit(False))
    if isinstance(data_type, ArrayType):
        elements = F.try_variant_get(v, "$", "array<variant>")
        pairs = F.transform(elements, lambda e: _pair(e, data_type.elementType, enc))
        # A field of an array of structs is an array: read without lambdas, which run
        # interpreted per element (an element's `ok` is never null).
        value = pairs["v"]
        ok = elements.isNotNull() & ~F.array_contains(pairs["ok"], False)
        extra = F.coalesce(F.array_contains(pairs["extra"], True), F.lit(False))
        return F.when(~missing, value), ok | missing, extra
    if isinstance(data_type, MapType):
        entries = F.try_variant_get(v, "$", "map<string,variant>")
        pairs = F.transform_values(entries, lambda _k, e: _pair(e, data_type.valueType, enc))
        value = F.transform_values(pairs, lambda _k, p: p["v"])
        ok = entries.isNotNull() & ~F.array_contains(F.map_values(pairs)["ok"], False)
        extra = F.coalesce(F.array_contains(F.map_values(pairs)["extra"], True), F.lit(False))
        return F.when(~missing, value), ok | missing, extra
    value = _leaf(v, data_type, enc)
    # The value first: an `or`'s right side is evaluated only sometimes, so Spark would not
    # share the decoding with the struct's `v` (it is decoded once per row).
    return value, value.isNotNull() | missing, F.lit(False)


def _pair(v: Column, data_type: DataType, enc: Mapping[str, str]) -> Column:
    from pyspark.sql import functions as F

    value, ok, extra = _decode(v, data_type, enc)
    return F.struct(value.alias("v"), ok.alias("ok"), extra.alias("extra"))


def _leaf(v: Column, data_type: DataType, enc: Mapping[str, str]) -> Column:
    """A leaf's VARIANT decoded from its text as a top-level value's is."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    kind = decode.kind_of(data_type) or ""
    encoding = enc.get(kind, "")
    variant_kind = F.schema_of_variant(v)
    text = F.try_variant_get(v, "$", "string")  # a number's digits, a string, an object's JSON
    if isinstance(data_type, BinaryType):
        # Base64 in a JSON string, padded, as Spark's reading takes a top-level BINARY (and
        # Debezium sends a bytea[]'s elements): a number's digits are not bytes.
        return F.when(variant_kind == "STRING", precise.base64_bytes(text))
    composite = variant_kind.startswith("OBJECT") | variant_kind.startswith("ARRAY")
    # A VARIANT double: a number in exponent form or of more than 38 digits, its digits lost
    # (a string would hold `100.0` for 1e2, `Infinity` for 1e400).
    double = variant_kind.isin("DOUBLE", "FLOAT")
    if kind == "double":
        # 1e400 and 1e-400 are a VARIANT's Infinity and 0.0: neither is the value sent (so
        # neither is 0e0, which cannot be told from 1e-400).
        outside = double & (text.isin("Infinity", "-Infinity") | (text.try_cast("double") == 0))
        leaf_text = F.when(~composite & ~outside, text)
    elif kind == "decimal" and encoding == "base64":
        # Base64 text, or Debezium's variable-scale {scale, value}: a JSON number read as
        # base64 would be another number.
        leaf_text = F.when(variant_kind.isin("STRING") | variant_kind.startswith("OBJECT"), text)
    elif kind == "string":
        # An object or array holding a VARIANT double holds a number whose digits are lost
        # (`{"a": 1.2345678901234567891e3}`): its text would hold another number.
        lost = composite & (variant_kind.contains("DOUBLE") | variant_kind.contains("FLOAT"))
        if enc.get(decode.SENDER) == decode.DEBEZIUM:
            # Debezium 3.7 sends the rows of a text array of two dimensions as their Java
            # object names (`[Ljava.lang.String;@4f0a4b4b`), the values gone (probed).
            lost = lost | text.rlike(JAVA_ARRAY_NAME)
        leaf_text = F.when(~double & ~lost, text)
    else:
        leaf_text = F.when(~composite & ~double, text)
    value = decode.decode(leaf_text, data_type, encoding)
    assert value is not None, "supported() refuses leaves without a decoder"
    # Debezium's `timestamp[]` elements: counts in Java's calendar (the ISO texts of a
    # `timestamptz[]` are not).
    unit = {"epoch_ms": "ms", "epoch_us": "us"}.get(encoding) if kind == "timestamp" else None
    if unit and enc.get(decode.CALENDAR) == decode.HYBRID:
        hybrid = _gregorian(leaf_text, unit, data_type)
        value = F.when(leaf_text.rlike(precise.INTEGER), hybrid).otherwise(value)
    if kind in ("date", "timestamp") and enc.get(decode.INFINITE) == decode.CLAMP:
        value = decode.clamped(value, leaf_text, data_type)
    return value


def _gregorian(count: Column, unit: str, data_type: DataType) -> Column:
    """An epoch count in Java's calendar (`temporal.gregorian_micros`) as a timestamp."""
    from pyspark.sql import functions as F

    micros = F.try_multiply(count.try_cast("long"), F.lit(instants.MICROS_PER[unit]))
    return instants.epoch_timestamp(temporal.gregorian_micros(micros), "us").cast(data_type)
