"""JSON numbers of every length and form, decoded into integer, decimal, epoch-seconds, double
and string columns, against a model that reads each number's text with Python's `Decimal`: a value
is stored only when it is exactly a value of its column, and a rescued one keeps its text as
written.

Spark's JSON map prints a number with a fraction through a double, and refine takes an integer
or decimal column's value from that print without a second parse only where the record holds
no number the double may round (`exact_digits.trusted`): these records mix both, in the column
itself and elsewhere in the record, with exponents past a double's range (`1e-400` prints
`0.0`) and plain fractions near or below its least (`0.<330 zeros>1` prints `0.0` too).
Epoch seconds read only a plain number, so `1.5e1` there is rescued, never read as its print
`15.0`. A double keeps its sign: `-0` (which the map prints `0`) is -0.0."""

from __future__ import annotations

import json
import math
import random
from datetime import datetime, timedelta
from decimal import Decimal, localcontext
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core.instants import MAX_MICROS, MIN_MICROS
from lakehouse.core.specs import SilverTableSettings
from lakehouse.silver.transform import event_records, parse_schema, silver_columns
from tests.silver.helpers import bronze_rows

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`

SCHEMA = "id BIGINT, n BIGINT, d DECIMAL(20,4), w DECIMAL(38,0), at TIMESTAMP, f DOUBLE, s STRING"
Number = Decimal | None
Row = tuple[int, int | None, Number, Number, datetime | None, float | None, str | None, str | None]
EPOCH = datetime(1970, 1, 1)
# How a number is written (`number`), short ones twice as often.
FORMS = (
    "short",
    "short",
    "zeros",
    "long",
    "integer",
    "exponent",
    "rounds",
    "zero",
    "large",
    "small",
    "print",
    "tiny",
)


def digits(rng: random.Random, count: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(count))


def number(rng: random.Random) -> str:
    """A JSON number's text: short or long, plain or in exponent form, with trailing zeros,
    large or small (a double's print of it has an exponent), or one a double rounds to a
    short print (`3.0000000000000000001` prints `3.0`)."""
    sign = rng.choice(["", "", "-"])
    whole = str(int(digits(rng, rng.randint(1, 7))))
    form = rng.choice(FORMS)
    if form == "large":  # a double prints an exponent from 1e7 on (1.2345678E7)
        return f"{sign}{int(digits(rng, rng.randint(8, 14)))}.{digits(rng, rng.randint(0, 2))}0"
    if form == "small":  # and below 1e-3 (1.5E-4)
        return f"{sign}0.{'0' * rng.randint(2, 7)}{digits(rng, rng.randint(1, 4))}"
    if form == "print":  # Java 17 prints more digits than needed: 2.82879384806159008E17
        return sign + rng.choice(["282879384806159e3", "2e23", "8.41e21", "1e23"])
    if form == "tiny":  # plainly written near a double's least (4.9e-324) and below it
        return f"{sign}0.{'0' * rng.randint(318, 330)}{rng.randint(1, 9)}"
    if form == "zero":  # the map prints an integer's -0 as 0 and -0.0 as -0.0
        return rng.choice(["0", "-0", "0.0", "-0.0", "-0.000", "0e0", "-0E5"])
    if form == "short":
        return f"{sign}{whole}.{digits(rng, rng.randint(1, 5))}"
    if form == "zeros":
        return f"{sign}{whole}.{digits(rng, rng.randint(0, 3))}{'0' * rng.randint(1, 4)}"
    if form == "long":
        return f"{sign}{whole}.{digits(rng, rng.randint(9, 20))}"
    if form == "integer":
        value = int(digits(rng, rng.randint(1, 22)))
        return f"{sign}{value}"
    if form == "exponent":
        mantissa = f"{whole}.{digits(rng, rng.randint(1, 6))}"
        power = rng.choice([rng.randint(0, 25), rng.randint(290, 420)])  # past a double's too
        return f"{sign}{mantissa}{rng.choice('eE')}{rng.choice(['', '+', '-'])}{power}"
    return f"{sign}{whole}.{'0' * rng.randint(14, 22)}{rng.randint(1, 9)}"


def as_integer(text: str) -> int | None:
    value = Decimal(text)
    if value != value.to_integral_value() or not -(2**63) <= value < 2**63:
        return None
    return int(value)


def as_decimal(text: str, precision: int, scale: int) -> Decimal | None:
    """`text` as a DECIMAL(precision, scale) when it is one exactly: at most `scale` fraction
    digits once its trailing zeros are gone, at most `precision - scale` integer digits."""
    value = Decimal(text)
    with localcontext(prec=100):  # the default 28 digits would round a long number away
        fraction = 0 if value == 0 else max(0, -int(value.normalize().as_tuple().exponent))
        if fraction > scale or abs(value) >= 10 ** (precision - scale):
            return None
        return value.quantize(Decimal(1).scaleb(-scale))


def as_double(text: str) -> float | None:
    """The double nearest `text` (Python's and Java's parses both round correctly), with its
    sign (`-0` is -0.0), when it is within a double's range: past it, or a non-zero number
    below it, is not the value sent."""
    value = float(text)
    if math.isinf(value) or (value == 0 and Decimal(text) != 0):
        return None
    return value


def is_negative_zero(value: float | None) -> bool:
    return value == 0 and math.copysign(1, value) < 0


def as_epoch_seconds(text: str) -> datetime | None:
    """Epoch seconds written plainly (an exponent form is not a count of seconds as sent),
    floored to the microsecond, within the years 0001-9999."""
    if "e" in text.lower():
        return None
    with localcontext(prec=100):
        micros = math.floor(Decimal(text) * 1_000_000)
    if not MIN_MICROS <= micros <= MAX_MICROS:
        return None
    return EPOCH + timedelta(microseconds=micros)


def record(rng: random.Random, i: int) -> tuple[bytes, Row]:
    """One record's JSON text (fields in a fixed order, some spaced) and the row the model
    expects from it."""
    n, d, w, at, f, s = (number(rng) for _ in range(6))
    quoted = rng.random() < 0.2  # a string that reads as a number: kept as sent
    extra = rng.choice([None, number(rng), f"ref-{digits(rng, rng.randint(3, 20))}"])
    fields = [("id", str(i)), ("n", n), ("d", d), ("w", w), ("at", at), ("f", f)]
    fields.append(("s", json.dumps(s) if quoted else s))
    if extra is not None:
        fields.append(("x", extra if extra[0] != "r" else json.dumps(extra)))
    space = rng.choice(["", " "])
    text = "{" + f",{space}".join(f'"{k}":{space}{v}' for k, v in fields) + "}"
    integer, decimal, instant = as_integer(n), as_decimal(d, 20, 4), as_epoch_seconds(at)
    wide = as_decimal(w, 38, 0)
    double = as_double(f)
    values: list[tuple[str, str, object]] = [("n", n, integer), ("d", d, decimal)]
    values += [("w", w, wide), ("at", at, instant), ("f", f, double)]
    rescued = {k: v for k, v, value in values if value is None}
    if extra is not None:
        rescued["x"] = extra
    kept = json.dumps(rescued, separators=(",", ":")) if rescued else None
    return text.encode(), (i, integer, decimal, wide, instant, double, s, kept)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_number_is_stored_exactly_or_rescued_as_written_whatever_else_the_record_holds(
    spark: SparkSession, seed: int
) -> None:
    rng = random.Random(seed)  # noqa: S311 - reproducible test data
    records = [record(rng, i) for i in range(300)]
    table = SilverTableSettings(source="src", mode="append", schema=SCHEMA)
    values: list[Any] = [text for text, _ in records]
    parsed = event_records(
        bronze_rows(spark, values), table, parse_schema(SCHEMA, encodings={"at": "epoch_s"})
    )
    expected = spark.createDataFrame([row for _, row in records], f"{SCHEMA}, _rescued_data STRING")
    stored = parsed.select(*silver_columns(parsed))
    assert_df_equality(stored, expected, ignore_row_order=True, ignore_nullable=True)
    # Rows compare -0.0 equal to 0.0: the sign is compared apart.
    negative_zeros = {row[0] for _, row in records if is_negative_zero(row[5])}
    assert {r.id for r in stored.collect() if is_negative_zero(r.f)} == negative_zeros


def stored(spark: SparkSession, schema: str, values: list[Any]) -> DataFrame:
    """`values` refined, appended, into a table of `schema`: the columns silver stores."""
    table = SilverTableSettings(source="src", mode="append", schema=schema)
    parsed = event_records(bronze_rows(spark, values), table, parse_schema(schema))
    return parsed.select(*silver_columns(parsed))


def test_a_double_its_record_writes_twice_under_its_name_is_rescued_not_stored_as_the_print(
    spark: SparkSession,
) -> None:
    """A DOUBLE the map printed `0.0` (`1e-400`, below its range) or `0` (`-0`) is looked up
    as written: where a nested field of the same name also reads as that double, which text
    was the column's cannot be told, so it does not decode (rescued: the map's print, the
    record is whole in bronze) rather than stored as 0.0. A FLOAT past its range is rescued
    as written, not as the double's print (`1.0E39`)."""
    schema = "id BIGINT, f DOUBLE, g FLOAT, n STRUCT<f: DOUBLE>"
    values: list[Any] = [
        b'{"id": 1, "f": 1e-400, "n": {"f": 0.0}}',
        b'{"id": 2, "f": -0, "n": {"f": 0}}',
        b'{"id": 3, "f": 1e-400, "n": {"f": 2.5}}',
        b'{"id": 4, "f": -0, "g": 0.5, "n": {"f": 1}}',
        b'{"id": 5, "f": 1.5, "g": 1e39}',
        b'{"id": 6, "g": 1.5e-50}',
    ]
    refined = stored(spark, schema, values)
    expected = spark.createDataFrame(
        [
            (1, None, None, 0.0, '{"f":"0.0"}'),
            (2, None, None, 0.0, '{"f":"0"}'),
            (3, None, None, 2.5, '{"f":"1e-400"}'),
            (4, -0.0, 0.5, 1.0, None),
            (5, 1.5, None, None, '{"g":"1e39"}'),
            (6, None, None, None, '{"g":"1.5e-50"}'),
        ],
        "id bigint, f double, g float, n_f double, _rescued_data string",
    )
    assert_df_equality(refined, expected, ignore_row_order=True, ignore_nullable=True)
    assert [r.id for r in refined.collect() if is_negative_zero(r.f)] == [4]


def test_an_object_in_a_string_column_keeps_its_json_value_or_is_rescued(
    spark: SparkSession,
) -> None:
    """A STRING column given an object or array holds its JSON text as Spark's map prints
    it, every number with a fraction through a double: `12345678901234567.89` was stored as
    `1.2345678901234568E16`, `1e400` as the string "Infinity". The text is kept where its
    numbers are the values written (spaces, key order, escapes and `1.50` for `1.5` aside);
    else it does not decode (rescued). A string holding such JSON is a string."""
    schema = "id BIGINT, s STRING"
    values: list[Any] = [
        b'{"id": 1, "s": {"a": 12345678901234567.89, "b": 1.50}}',
        b'{"id": 2, "s": [1.50, 1e2]}',
        b'{"id": 3, "s": {"a":1e400}}',
        b'{"id": 4, "s": {"a": 1.0000000000000000000000000000000000000001}}',
        b'{"id": 5, "s": {"a": 1.5, "b": [2.25, "x , y"]}}',
        b'{"id": 6, "s": {"name": "caf\\u00e9", "b": 1.50, "a": [1e300, -2.5E-7]}}',
        b'{"id": 7, "s": {"a": "Infinity", "b": 1}}',
        b'{"id": 8, "s": "{\\"a\\": 1.50}"}',
    ]
    expected = spark.createDataFrame(
        [
            (1, None, '{"s":"{\\"a\\":1.2345678901234568E16,\\"b\\":1.5}"}'),
            (2, None, '{"s":"[1.5,100.0]"}'),
            (3, None, '{"s":"{\\"a\\":\\"Infinity\\"}"}'),
            (4, None, '{"s":"{\\"a\\":1.0}"}'),
            (5, '{"a":1.5,"b":[2.25,"x , y"]}', None),
            (6, '{"name":"caf\u00e9","b":1.5,"a":[1.0E300,-2.5E-7]}', None),
            (7, '{"a":"Infinity","b":1}', None),
            (8, '{"a": 1.50}', None),
        ],
        f"{schema}, _rescued_data STRING",
    )
    assert_df_equality(
        stored(spark, schema, values), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_a_nested_string_given_an_object_with_a_number_whose_digits_are_lost_is_rescued(
    spark: SparkSession,
) -> None:
    """A nested STRING leaf given an object or array holds the VARIANT's JSON text of it,
    which holds a number in exponent form or of more than 38 digits as a double:
    `1.2345678901234567891e3` was stored as `1234.567890123457`. Such a value does not
    decode (the column is rescued); one whose numbers the VARIANT keeps is stored."""
    schema = "id BIGINT, n STRUCT<s: STRING>"
    values: list[Any] = [
        b'{"id": 1, "n": {"s": {"a": 1.2345678901234567891e3}}}',
        b'{"id": 2, "n": {"s": [1.0000000000000000000000000000000000000001]}}',
        b'{"id": 3, "n": {"s": {"b": 12345678901234567.89, "a": [1, "x"]}}}',
    ]
    expected = spark.createDataFrame(
        [
            (1, None, '{"n":"{\\"s\\":{\\"a\\":1234.567890123457}}"}'),
            (2, None, '{"n":"{\\"s\\":[1.0]}"}'),
            (3, '{"a":[1,"x"],"b":12345678901234567.89}', None),
        ],
        "id bigint, n_s string, _rescued_data string",
    )
    assert_df_equality(
        stored(spark, schema, values), expected, ignore_row_order=True, ignore_nullable=True
    )
