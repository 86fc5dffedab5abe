"""Debezium's precise decimals (`decimal.handling.mode=precise`): the base64 of an unscaled
value's big-endian two's complement bytes -> its decimal text, and `let`, the binding these
nested expressions need to stay small. `lakehouse.silver.decode` decodes the text. Also a
bytea's base64 (`base64_bytes`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


# The number forms the decoders read (`decode`, `temporal`): an integer, a plain decimal.
INTEGER = r"^[+-]?\d+$"
PLAIN_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)$"

# Base64 as RFC 4648 writes it (Java's encoder, Debezium's bytea): padded, no line breaks.
# Whole groups of four (the length) and padding only at the end, at most two: the same set
# as `([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?`, for half its cost on
# the precise decimals' hot path (bench/README). `\z`: Java's `$` also matches before a
# final line break, which Spark's decoder would skip.
_BASE64 = r"^[A-Za-z0-9+/]*={0,2}\z"


def is_base64(text: Column) -> Column:
    """Whether `text` is padded base64 (Spark's own decoder also takes unpadded text and
    skips spaces)."""
    from pyspark.sql import functions as F

    return (F.length(text) % 4 == 0) & text.rlike(_BASE64)


def base64_bytes(text: Column) -> Column:
    """The bytes `text` holds as padded base64; null for any other text."""
    from pyspark.sql import functions as F

    return F.when(is_base64(text), F.try_to_binary(text, F.lit("base64")))


def let(value: Column, body: Callable[[Column], Column]) -> Column:
    """`body(value)` with `value` computed once. A Column used twice is its whole expression
    tree twice, and these decoders nest (base64 -> digits -> text -> decimal), so without this
    a Debezium `numeric` column was a ~630,000-character expression (5,037,297 for eight of
    them): the optimizer's time and memory on a wide CDC table grew with it
    (bench/decode_decimals.py). A one-element
    `transform` binds the value to a lambda variable instead."""
    from pyspark.sql import functions as F

    return F.transform(F.array(value), body)[0]


def unscaled_text(b64: Column, scale: Column) -> Column:
    """Debezium precise decimal: base64 of the unscaled value's big-endian two's complement
    bytes -> its decimal text at `scale` (null when not padded base64 or over 38 digits)."""
    from pyspark.sql import functions as F

    # Padded only, as Debezium sends it: Spark's decoder also takes `99` (string mode's
    # digits) and would read -0.09 out of it.
    hexed = F.hex(base64_bytes(b64))
    return let(
        F.struct(hexed.alias("hex"), scale.alias("scale")),
        lambda d: _hex_text(d["hex"], d["scale"]),
    )


def _hex_text(hexed: Column, scale: Column) -> Column:
    from pyspark.sql import functions as F

    negative = hexed.rlike("^[89A-F]")
    ok = (F.length(hexed) > 0) & scale.isNotNull() & (scale >= 0)
    # Up to 8 bytes (18 digits and more: nearly every real value), `conv` to a negative base
    # reads the sign-extended 64 bits as a signed number in one step.
    extended = F.lpad(hexed, 16, F.when(negative, F.lit("F")).otherwise(F.lit("0")))
    short = F.regexp_replace(F.conv(extended, 16, -10), "^-", "")
    digits = F.when(F.length(hexed) <= 16, short).otherwise(_wide_magnitude(hexed, negative))
    sign = F.when(negative, F.lit("-")).otherwise(F.lit(""))
    return F.when(ok, F.concat(sign, let(digits, lambda d: _with_point(d, scale))))


def _wide_magnitude(hexed: Column, negative: Column) -> Column:
    """|value| of 9 to 16 bytes of two's complement, as text (null over 38 digits)."""
    from pyspark.sql import functions as F

    # A negative number is -(its complement) - 1: the complement of each hex digit is a
    # translation, and no 2^(8n) term is needed that would overflow 38 digits.
    complement = F.translate(hexed, "0123456789ABCDEF", "FEDCBA9876543210")
    magnitude = F.regexp_replace(F.when(negative, complement).otherwise(hexed), "^0+", "")
    # Up to 32 hex digits (128 bits) in two unsigned 64-bit halves `conv` reads exactly.
    padded = F.lpad(magnitude, 32, "0")
    high = F.conv(padded.substr(F.lit(1), F.lit(16)), 16, 10).cast("decimal(38,0)")
    low = F.conv(padded.substr(F.lit(17), F.lit(16)), 16, 10).cast("decimal(38,0)")
    unsigned = F.try_add(F.try_multiply(high, F.lit(str(2**64)).cast("decimal(38,0)")), low)
    one = F.lit(1).cast("decimal(38,0)")
    signed = F.when(negative, F.try_add(unsigned, one)).otherwise(unsigned)
    return F.when(F.length(magnitude) <= 32, signed.cast("decimal(38,0)").cast("string"))


def _with_point(digits: Column, scale: Column) -> Column:
    """Unscaled digits -> their text at `scale` (null digits stay null)."""
    from pyspark.sql import functions as F

    # At least one digit before the point (lpad also cuts a longer string, hence greatest).
    padded = F.lpad(digits, F.greatest(F.length(digits), scale + 1), "0")

    def point(p: Column) -> Column:
        cut = F.length(p) - scale
        return F.when(
            scale > 0, F.concat(p.substr(F.lit(1), cut), F.lit("."), p.substr(cut + 1, scale))
        ).otherwise(p)

    return let(padded, point)


def variable_scale(t: Column) -> Column:
    """Debezium's VariableScaleDecimal (`numeric` without a declared scale, precise mode)."""
    from pyspark.sql import functions as F

    parsed = F.from_json(t, "struct<scale:int,value:string>")
    return let(parsed, lambda p: unscaled_text(p["value"], p["scale"]))
