"""Nested values (STRUCT, ARRAY and MAP columns) decoded leaf by leaf as top-level values are
(`lakehouse.silver.decode`), from the record's VARIANT.

Spark's JSON reading rounded a nested decimal (13.299 into DECIMAL(12,2) was 13.30), made a
nested integer given "2" or 3.5, a timestamp given garbage and an element past its type's
range NULL, and a double past its range Infinity, each without a trace. Here a value whose
every leaf decodes is the column's value; any other is NULL, so `parse_records` rescues the
field (an event) or refuses the change (CDC): stored exactly or not at all.

A VARIANT keeps a number's digits (up to 38). In exponent form, or longer, it holds a double
whose digits cannot be told: such a number does not decode into an integer, decimal or
timestamp leaf, nor does one outside a double's range into a double leaf. Leaves take the
events encodings (ISO dates and timestamps, decimals as text). A nested string keeps the
VARIANT's text of a number (`1.5` for `1.50`). Unknown nested fields are ignored, as Spark
ignores them (the record is whole in bronze)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.silver import decode
from lakehouse.silver.exact_digits import variant_path

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType

# The encodings a nested leaf takes, by kind: an events feed's.
_LEAF_ENCODINGS = {"timestamp": "iso", "date": "iso", "decimal": "text"}


def supported(data_type: DataType) -> bool:
    """Whether `data_type` is nested and every leaf of it has a decoder (a MAP's keys are
    strings, a field's name has a VARIANT path): else it keeps Spark's JSON reading."""
    from pyspark.sql.types import ArrayType, MapType, StringType, StructType

    def leaves_ok(t: DataType) -> bool:
        if isinstance(t, StructType):
            return all(variant_path(f.name) is not None and leaves_ok(f.dataType) for f in t.fields)
        if isinstance(t, ArrayType):
            return leaves_ok(t.elementType)
        if isinstance(t, MapType):
            return isinstance(t.keyType, StringType) and leaves_ok(t.valueType)
        return decode.kind_of(t) is not None

    return isinstance(data_type, StructType | ArrayType | MapType) and leaves_ok(data_type)


def decoded(value: Column, data_type: DataType) -> Column:
    """`value` (a VARIANT, null when absent) as `data_type`: null when any leaf in it that is
    not JSON null does not decode."""
    from pyspark.sql import functions as F

    out, ok = _decode(value, data_type)
    return F.when(ok, out)


def field(value: Column, name: str) -> Column:
    """Field `name` of the VARIANT object `value` (null when absent)."""
    from pyspark.sql import functions as F

    path = variant_path(name)
    assert path is not None, "supported() refuses such names"
    return F.try_variant_get(value, path, "variant")


def _decode(v: Column, data_type: DataType) -> tuple[Column, Column]:
    """(the value, whether it decoded: absent, JSON null, or every leaf decoded)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    missing = v.isNull() | F.is_variant_null(v)
    if isinstance(data_type, StructType):
        # An object's fields as a map: null when `v` is not an object.
        is_object = F.try_variant_get(v, "$", "map<string,variant>").isNotNull()
        parts = [_decode(field(v, f.name), f.dataType) for f in data_type.fields]
        ok = is_object
        for _, part_ok in parts:
            ok = ok & part_ok
        value = F.struct(
            *[p.alias(f.name) for (p, _), f in zip(parts, data_type.fields, strict=True)]
        )
        return F.when(~missing, value), missing | ok
    if isinstance(data_type, ArrayType):
        elements = F.try_variant_get(v, "$", "array<variant>")
        pairs = F.transform(elements, lambda e: _pair(e, data_type.elementType))
        value = F.transform(pairs, lambda p: p["v"])
        ok = elements.isNotNull() & F.forall(pairs, lambda p: p["ok"])
        return F.when(~missing, value), missing | ok
    if isinstance(data_type, MapType):
        entries = F.try_variant_get(v, "$", "map<string,variant>")
        pairs = F.transform_values(entries, lambda _k, e: _pair(e, data_type.valueType))
        value = F.transform_values(pairs, lambda _k, p: p["v"])
        ok = entries.isNotNull() & F.forall(F.map_values(pairs), lambda p: p["ok"])
        return F.when(~missing, value), missing | ok
    value = _leaf(v, data_type)
    return value, missing | value.isNotNull()


def _pair(v: Column, data_type: DataType) -> Column:
    from pyspark.sql import functions as F

    value, ok = _decode(v, data_type)
    return F.struct(value.alias("v"), ok.alias("ok"))


def _leaf(v: Column, data_type: DataType) -> Column:
    """A leaf's VARIANT decoded from its text as a top-level value's is."""
    from pyspark.sql import functions as F

    kind = decode.kind_of(data_type) or ""
    variant_kind = F.schema_of_variant(v)
    text = F.try_variant_get(v, "$", "string")  # a number's digits, a string, an object's JSON
    composite = variant_kind.startswith("OBJECT") | variant_kind.startswith("ARRAY")
    # A VARIANT double: a number in exponent form or of more than 38 digits.
    double = variant_kind.isin("DOUBLE", "FLOAT")
    if kind == "string":
        leaf_text = text
    elif kind == "double":
        # 1e400 and 1e-400 are a VARIANT's Infinity and 0.0: neither is the value sent.
        outside = double & (text.isin("Infinity", "-Infinity") | (text.try_cast("double") == 0))
        leaf_text = F.when(~composite & ~outside, text)
    else:
        leaf_text = F.when(~composite & ~double, text)
    value = decode.decode(leaf_text, data_type, _LEAF_ENCODINGS.get(kind, ""))
    assert value is not None, "supported() refuses leaves without a decoder"
    return value
