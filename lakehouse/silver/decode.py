"""Decoding a record's top-level values into their declared Spark types, losslessly.

Spark's JSON reader takes a value only in its own JSON type: `"13.29"` is not a DECIMAL, a
number in a TIMESTAMP column is read as epoch seconds, and Debezium's encodings (a `numeric` as
the base64 of its unscaled bytes, a `timestamp` as epoch microseconds, a `date` as epoch days)
come out NULL or silently wrong. Here every scalar column is decoded from the field's JSON text
instead, by its declared type and encoding:

    integral   an integer, as a number or a string ("42", 42, 42.0, 1.5E1); nothing fractional
    decimal    `text`: a number or a numeric string that fits the precision and scale exactly
               (13.290 fits DECIMAL(12,2); 13.299 does not: it is not rounded);
               `base64`: Debezium's precise mode, big-endian two's complement unscaled bytes
               at the declared scale, or its variable-scale `{"scale": s, "value": b64}`
    double     a JSON number or a numeric string (also NaN, Infinity) within the type's
               range (`1e400`, or `3.4e39` for a FLOAT, is not Infinity; `1e-400` not 0.0:
               see `exact_digits` for the JSON number)
    boolean    true / false, as a JSON boolean or a string (any case), 1 / 0 (MySQL's
               TINYINT(1)) or t / f (PostgreSQL's text); never yes / no, 2 or 1.0
    date       `iso`: "2024-01-05"; `epoch_days`: an integer (ISO strings are accepted too)
    timestamp  `iso`: an ISO-8601 string (with a zone or offset, else UTC; also RFC 3339's
               lowercase `t`/`z`, Java's `2024-01-05T10:00+01:00[Europe/Paris]`, `,5`);
               `epoch_s|epoch_ms|epoch_us|epoch_ns`: an integer in that unit (ISO strings
               are accepted too: a string with a date in it is never mistaken for a number)
    string     the text as sent (a nested value as its JSON text); `time_ms|time_us|time_ns`:
               a time of day (PostgreSQL `time`: Debezium's Time, MicroTime, NanoTime) from
               an integer count since midnight, as `HH:MM:SS[.ffffff]` (a clock text
               within a day is kept: `temporal`)

Structs, arrays and maps decode leaf by leaf by these same rules (`lakehouse.silver.nested`).
A top-level binary keeps Spark's JSON reading (padded base64 in a JSON string, as Debezium
sends bytea); a nested one is read the same way (`precise.base64_bytes`). A nested value with a leaf
of another type without a decoder here (an interval) keeps Spark's reading. A value that
does not decode is NULL here and its column is named in `_lh_mistyped`; events rescue it
(`_rescued_data`), CDC changes go to quarantine (see `transform`).

Defaults: events read timestamps and dates as ISO and decimals as text; a CDC source follows
its Debezium connector's modes (`decimal_handling_mode`, `time_precision_mode` on the source):
precise -> base64, adaptive -> epoch_us timestamps (PostgreSQL's default precision 6), connect
-> epoch_ms; dates are epoch days. `encodings` on a silver table overrides any column.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakehouse.core.columns import named
from lakehouse.silver import precise, temporal
from lakehouse.silver.precise import INTEGER, PLAIN_NUMBER, let

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType, DecimalType, StructType

TIMESTAMP_ENCODINGS = ("iso", "epoch_s", "epoch_ms", "epoch_us", "epoch_ns")
DATE_ENCODINGS = ("iso", "epoch_days")
DECIMAL_ENCODINGS = ("text", "base64")
STRING_ENCODINGS = ("text", "time_ms", "time_us", "time_ns")

_EXPONENT_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$"
_MANTISSA = r"^[+-]?(\d*)\.?(\d*)[eE]"
_NUMBER = r"(?i)^\s*[+-]?((\d+\.?\d*|\.\d+)(e[+-]?\d+)?|inf|infinity|nan)\s*$"


def kind_of(data_type: DataType) -> str | None:
    """Which decoder a type takes (None: Spark's JSON reading)."""
    from pyspark.sql import types as T

    kinds: list[tuple[type, str]] = [
        (T.BooleanType, "boolean"),
        (T.ByteType, "integral"),
        (T.ShortType, "integral"),
        (T.IntegerType, "integral"),
        (T.LongType, "integral"),
        (T.DecimalType, "decimal"),
        (T.FloatType, "double"),
        (T.DoubleType, "double"),
        (T.DateType, "date"),
        (T.TimestampType, "timestamp"),
        (T.TimestampNTZType, "timestamp"),
        (T.StringType, "string"),
    ]
    for cls, kind in kinds:
        if isinstance(data_type, cls):
            return kind
    return None


def allowed(kind: str | None) -> tuple[str, ...]:
    """The encodings a column of this kind may declare (none: it takes no encoding)."""
    return {
        "timestamp": TIMESTAMP_ENCODINGS,
        "date": DATE_ENCODINGS,
        "decimal": DECIMAL_ENCODINGS,
        "string": STRING_ENCODINGS,
    }.get(kind or "", ())


def column_allows(data_type: DataType) -> tuple[str, ...]:
    """The encodings a column may declare: its kind's, or for a nested column those of its
    leaves' kinds (the declared one applies to every leaf that takes it)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    def kinds(t: DataType) -> list[str | None]:
        if isinstance(t, StructType):
            return [k for f in t.fields for k in kinds(f.dataType)]
        if isinstance(t, ArrayType):
            return kinds(t.elementType)
        if isinstance(t, MapType):
            return kinds(t.valueType)
        return [kind_of(t)]

    return tuple(dict.fromkeys(e for k in kinds(data_type) for e in allowed(k)))


# Beside the kinds, how a nested leaf is read: CALENDAR: HYBRID, an epoch count's date is in
# Java's calendar (Julian before 1582-10-15: a Debezium `timestamp[]`'s elements); SENDER:
# DEBEZIUM, Debezium sent the leaves (with its known losses: `nested.JAVA_ARRAY_NAME`); and
# INFINITE: CLAMP, PostgreSQL's infinities clamped (`infinite_times: clamp`).
CALENDAR, HYBRID, INFINITE, CLAMP = "calendar", "hybrid", "infinite", "clamp"
SENDER, DEBEZIUM = "sender", "debezium"


def leaf_encodings(
    by_kind: Mapping[str, str], declared: str, clamp_infinite: bool = False
) -> dict[str, str]:
    """A nested column's leaf encodings: `by_kind` (its source's defaults), with `declared`
    (the column's own, if any) for every kind that takes it, and INFINITE: CLAMP when asked."""
    out = dict(by_kind)
    for kind in ("timestamp", "date", "decimal", "string"):
        if declared and declared in allowed(kind):
            out[kind] = declared
    return {**out, INFINITE: CLAMP} if clamp_infinite else out


def kind_encodings(
    source_kind: str, decimal_mode: str = "precise", time_mode: str = "adaptive"
) -> dict[str, str]:
    """The encoding each kind that takes one defaults to for a source of `source_kind` (a
    nested leaf always takes it)."""
    cdc = source_kind == "cdc"
    out = {
        "timestamp": ("epoch_ms" if time_mode == "connect" else "epoch_us") if cdc else "iso",
        "date": "epoch_days" if cdc else "iso",
        "decimal": "base64" if cdc and decimal_mode == "precise" else "text",
    }
    return {**out, CALENDAR: HYBRID, SENDER: DEBEZIUM} if cdc else out


def default_encodings(
    struct: StructType, source_kind: str, decimal_mode: str = "precise", time_mode: str = "adaptive"
) -> dict[str, str]:
    """Each top-level column's encoding before a table's `encodings` override it."""
    by_kind = kind_encodings(source_kind, decimal_mode, time_mode)
    out = {}
    for f in struct.fields:
        kind = kind_of(f.dataType)
        if kind in by_kind:
            out[f.name] = by_kind[kind]
    return out


def decode(
    text: Column, data_type: DataType, encoding: str = "", clamp_infinite: bool = False
) -> Column | None:
    """`text` (a field's JSON text, null when absent) as `data_type`; null when it does not
    decode. None when the type keeps Spark's JSON reading. `clamp_infinite`: a PostgreSQL
    infinite date or timestamp decodes to Spark's latest or earliest (`temporal.infinite`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType

    kind = kind_of(data_type)
    t = F.trim(text)
    if kind == "string":
        return temporal.time_of_day(t, encoding) if encoding.startswith("time_") else text
    if kind == "boolean":
        # The forms systems print: JSON, MySQL's TINYINT(1), PostgreSQL's text output. Not
        # Spark's cast, which also guesses at yes/no/y/n.
        low = F.lower(t)
        return F.when(low.isin("true", "t", "1"), True).when(low.isin("false", "f", "0"), False)
    if kind == "integral":
        whole = F.regexp_replace(t, r"\.0*$", "")
        # A number in exponent form (`1.5E1`, digits as written: `exact_digits`) goes through
        # a whole DECIMAL's exact test; in a lambda, since inline its code made every row of
        # a batch with three integer columns ~15% slower to parse (bench/README).
        exponent = let(t, lambda s: _decimal_of(s, DecimalType(38, 0))).try_cast(data_type)
        return F.when(whole.rlike(INTEGER), whole.try_cast(data_type)).when(
            t.rlike("[eE]"), exponent
        )
    if kind == "double":
        # Spark's cast takes Java's syntax too (`1.5d`, `0x1p3`): only JSON's numbers here.
        number = F.when(t.rlike(_NUMBER), t.try_cast(data_type))
        # A cast makes a finite number past the type's range Infinity, and a non-zero one
        # below it 0.0: neither is the value sent.
        infinite = number.isin(F.lit(float("inf")), F.lit(float("-inf")))
        overflow = infinite & ~F.lower(t).contains("inf")
        underflow = (number == 0) & F.regexp_extract(t, r"^\s*[+-]?([0-9.]*)", 1).rlike("[1-9]")
        return F.when(~(overflow | underflow), number)
    if kind == "decimal":
        assert isinstance(data_type, DecimalType)
        if encoding == "base64":
            t = F.when(t.startswith("{"), precise.variable_scale(t)).otherwise(
                precise.unscaled_text(t, F.lit(data_type.scale))
            )
            # The decoded text is a long expression, read three times by _decimal_of: `let`
            # computes it once per row.
            return let(t, lambda s: _decimal_of(s, data_type))
        # A field's trimmed text is small: repeated, it costs less than `let`'s interpreted
        # lambda on every row (bench/README, silver throughput).
        return _decimal_of(t, data_type)
    if kind == "date":
        day = temporal.date(t, encoding)
        return clamped(day, text, data_type) if clamp_infinite else day
    if kind == "timestamp":
        at = temporal.timestamp(t, encoding).cast(data_type)
        return clamped(at, text, data_type) if clamp_infinite else at
    return None


def clamped(value: Column, text: Column, data_type: DataType) -> Column:
    """A date or timestamp `value` decoded from `text`, or when it did not decode and the text
    is PostgreSQL's infinity, Spark's latest or earliest value (`temporal.infinite`)."""
    from pyspark.sql import functions as F

    infinite = temporal.infinite(F.trim(text), kind_of(data_type) or "")
    return F.coalesce(value, infinite.cast(data_type))


def _decimal_of(t: Column, data_type: DecimalType) -> Column:
    """A decimal's text as `data_type` when it fits exactly (never rounded)."""
    from pyspark.sql import functions as F

    value = t.try_cast(data_type)
    # Fraction digits beyond the scale must be zeros; the cast itself checks the precision.
    fraction = F.regexp_extract(t, r"\.(\d*?)0*$", 1)
    plain = t.rlike(PLAIN_NUMBER) & (F.length(fraction) <= data_type.scale)
    # Spark's cast throws (try_cast too: "BigInteger would overflow") for an exponent far past
    # any decimal's reach ("100e2147483647"); no number that fits one is written with an
    # exponent larger than its own text plus 38 digits, so the cast is never tried past that.
    power = _power(t)
    reach = F.length(t).cast("long") + 40
    exponent = (
        t.rlike(_EXPONENT_NUMBER)
        & power.between(-reach, reach)
        & (_exponent_fraction_digits(t, power) <= data_type.scale)
    )
    return F.when(plain | exponent, value)


def _power(t: Column) -> Column:
    """The exponent of the number `t` as a long (null past a long, or without one): a long,
    so one near an int's limits is a large count, never an overflow error mid-query."""
    from pyspark.sql import functions as F

    # No exponent extracts "", and a cast of text that is not a number is ~30x the cost of
    # the cast of null (Spark 4.0 builds an exception with its message and catches it): the
    # cast sees text only where there are digits (bench/README, silver throughput).
    digits = F.nullif(F.regexp_extract(t, r"[eE]([+-]?\d+)$", 1), F.lit(""))
    return digits.try_cast("long")


def _exponent_fraction_digits(t: Column, power: Column) -> Column:
    """How many fraction digits the number `t` (exponent form) has, counted on its text so
    that none is missed however far it is (`1.3290000000000000000001e1` has 22): the
    mantissa's fraction digits, less its trailing zeros, less the exponent."""
    from pyspark.sql import functions as F

    whole, fraction = F.regexp_extract(t, _MANTISSA, 1), F.regexp_extract(t, _MANTISSA, 2)
    digits = F.concat(whole, fraction)
    significant = F.regexp_replace(digits, "0+$", "")
    zeros = F.length(digits) - F.length(significant)
    # Zero has no fraction digits however it is written (`0E-7`: Java's BigDecimal zero).
    return F.when(significant == "", F.lit(0)).otherwise(
        F.length(fraction).cast("long") - zeros - power
    )


def decoded_columns(
    raw: Column,
    parsed: Column,
    struct: StructType,
    encodings: Mapping[str, str],
    texts: Mapping[str, Column] | None = None,
    nested: Mapping[str, Column] | None = None,
    clamp_infinite: bool = False,
) -> list[Column]:
    """Each top-level field decoded, aliased to its name; its text from `raw`, or from
    `texts` where given (the exact digits of a JSON number); a `nested` column's value as
    given (`lakehouse.silver.nested`). `clamp_infinite`: see `decode`."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    values = []
    for f in struct.fields:
        text = (texts or {}).get(f.name, raw[f.name])
        value = (nested or {}).get(f.name)
        if value is None:
            value = decode(text, f.dataType, encodings.get(f.name, ""), clamp_infinite)
        if value is None and isinstance(f.dataType, BinaryType):
            # Spark's reading takes only a JSON string, but joins `aGk=aGk=`: padded only.
            value = F.when(precise.is_base64(text), parsed[f.name])
        values.append((parsed[f.name] if value is None else value).alias(f.name))
    return values


def mistyped_names(raw: Column, struct: StructType) -> Column:
    """The names of the fields that were present in `raw` but did not decode, from the
    decoded columns by name: selected after `decoded_columns`, so each decoder runs once."""
    from pyspark.sql import functions as F

    mistyped = [
        F.when(raw[f.name].isNotNull() & named(f.name).isNull(), F.lit(f.name))
        for f in struct.fields
    ]
    # `array_compact`, not a `filter` lambda: higher-order functions run interpreted.
    return F.array_compact(F.array(*mistyped)) if mistyped else F.array()


def resolve_encodings(
    struct: StructType,
    declared: Mapping[str, str],
    source_kind: str,
    decimal_mode: str = "precise",
    time_mode: str = "adaptive",
) -> dict[str, str]:
    """Every top-level column's encoding: the defaults, overridden by `declared` (a table's
    `encodings`). Raises ValueError naming a column that is not top-level or whose type takes
    another encoding."""
    out = default_encodings(struct, source_kind, decimal_mode, time_mode)
    types = {f.name: f.dataType for f in struct.fields}
    for column, encoding in declared.items():
        if column not in types:
            raise ValueError(f"{column!r} is not a top-level column of the schema")
        options = column_allows(types[column])
        if encoding not in options:
            raise ValueError(
                f"{column!r} is {types[column].simpleString()}: "
                + (
                    f"use one of {', '.join(options)}"
                    if options
                    else "its values take no encoding (drop it)"
                )
                + f", not {encoding!r}"
            )
        out[column] = encoding
    return out
