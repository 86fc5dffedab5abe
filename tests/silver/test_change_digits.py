"""A change's row image keeps every digit a JSON number was written with, through real Kafka,
bronze and refine_silver, in each shape a change arrives in: a Debezium envelope (plain or
`schemas.enable=true`), an ExtractNewRecordState-flattened row, a delete's `before` image, a
tombstone's key, and Feldera's insert_delete changes (one, an array, or one per line). The
image was cut out of the record by Spark's JSON functions, which print a number through a
double (12345678901234567.89 became 1.2345678901234568E16) or a VARIANT, which does so for an
exponent form: a decimal was stored rounded, and a delete removed the row whose key is the
rounding's."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core import kafka
from lakehouse.core.settings import Settings
from tests.bronze.helpers import new_source, run_ingest
from tests.silver.helpers import current, quarantine, run_refine, with_silver

SCHEMA = "id INT, big DECIMAL(20,2), e DECIMAL(38,20), label STRING"
# Decimals as JSON numbers, as a hand-written feed or Debezium's decimal.handling.mode=double
# sends them (its default, precise, sends base64 digits).
AS_NUMBERS = {"big": "text", "e": "text"}
# As written in every change below; a double holds none of them exactly.
BIG, E, LABEL = "12345678901234567.89", "1.2345678901234567891e3", "1.50"
ROW = f'"big": {BIG}, "e": {E}, "label": {LABEL}'
STORED = (Decimal(BIG), Decimal("1234.56789012345678910000"), LABEL)
# Another row: `big` the same double as BIG, other digits.
NEAR = '"big": 12345678901234567.88, "e": 1.1e0, "label": 2.50'
NEAR_STORED = (Decimal("12345678901234567.88"), Decimal("1.1"), "2.50")
SOURCE = '"source": {{"lsn": {lsn}, "ts_ms": 1700000000000, "table": "t"}}'


def envelope(op: str, lsn: int, before: str = "null", after: str = "null") -> bytes:
    source = SOURCE.format(lsn=lsn)
    return f'{{"before": {before}, "after": {after}, {source}, "op": "{op}"}}'.encode()


def wrapped(payload: bytes) -> bytes:
    """As Kafka Connect's JsonConverter writes it with `schemas.enable=true`."""
    return b'{"schema": {"type": "struct", "optional": false}, "payload": ' + payload + b"}"


def flat(lsn: int, fields: str) -> bytes:
    return f'{{{fields}, "__op": "c", "__lsn": {lsn}, "__source_ts_ms": 1700000000000}}'.encode()


def rounded(text: str) -> Decimal:
    """What a double makes of `text`, at two decimals: the value a rounded image stored."""
    return Decimal(float(text)).quantize(Decimal("0.01"))


def test_a_cdc_row_image_keeps_every_digit_in_each_envelope_shape(
    spark: SparkSession, kafka_up: Settings
) -> None:
    source, topic, settings = new_source(kafka_up, kind="cdc")
    name, settings = with_silver(
        settings, source, mode="scd1", schema=SCHEMA, keys=("id",), encodings=AS_NUMBERS
    )
    changes = [
        envelope("c", 100, after=f'{{"id": 1, {ROW}, "x": {BIG}}}'),
        wrapped(envelope("c", 110, after=f'{{"id": 2, {ROW}}}')),
        flat(120, f'"id": 3, {ROW}'),
        wrapped(flat(130, f'"id": 4, {ROW}')),
        # REPLICA IDENTITY FULL: the before image holds the same keys, `big` with other
        # digits of the same double: only the image itself tells which are the row's.
        envelope("u", 140, before=f'{{"id": 5, {NEAR}}}', after=f'{{"id": 5, {ROW}}}'),
    ]
    kafka.produce(settings.kafka, topic, [(b'{"id": 0}', c, 0) for c in changes])
    run_ingest(spark, settings, source, kind="cdc")
    result = run_refine(spark, settings, name)
    assert (result.rows_written, result.rows_quarantined) == (5, 0)

    expected = spark.createDataFrame(
        [(i, *STORED, f'{{"x":"{BIG}"}}' if i == 1 else None) for i in range(1, 6)],
        f"{SCHEMA}, _rescued_data STRING",
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_a_delete_and_a_tombstone_remove_the_row_of_their_exact_key_not_its_rounding(
    spark: SparkSession, kafka_up: Settings
) -> None:
    source, topic, settings = new_source(kafka_up, kind="cdc")
    schema = "k DECIMAL(20,2), name STRING"
    name, settings = with_silver(
        settings, source, mode="scd1", schema=schema, keys=("k",), encodings={"k": "text"}
    )
    deleted, tombstoned = BIG, "22222222222222222.22"
    # Each key's neighbour is the key a double rounds it to: the row a rounded image deleted.
    neighbours = [rounded(deleted), rounded(tombstoned)]
    assert [str(n) for n in neighbours] != [deleted, tombstoned]
    key = wrapped(f'{{"k": {tombstoned}}}'.encode())
    records: list[tuple[bytes, bytes | None]] = [
        (b"{}", flat(100, f'"k": "{deleted}", "name": "deleted"')),
        (b"{}", flat(110, f'"k": "{neighbours[0]}", "name": "kept"')),
        (b"{}", flat(120, f'"k": "{tombstoned}", "name": "tombstoned"')),
        (b"{}", flat(130, f'"k": "{neighbours[1]}", "name": "kept too"')),
        (b"{}", envelope("d", 140, before=f'{{"k": {deleted}}}')),
        (key, None),  # the SMT's default delete: a tombstone alone
    ]
    kafka.produce(settings.kafka, topic, [(k, v, 0) for k, v in records])
    run_ingest(spark, settings, source, kind="cdc")
    run_refine(spark, settings, name)

    expected = spark.createDataFrame(
        [(neighbours[0], "kept", None), (neighbours[1], "kept too", None)],
        f"{schema}, _rescued_data STRING",
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_insert_delete_changes_keep_every_digit_alone_in_an_array_and_one_per_line(
    spark: SparkSession, kafka_up: Settings
) -> None:
    source, topic, settings = new_source(kafka_up, format="insert_delete")
    name, settings = with_silver(
        settings, source, mode="scd1", schema=SCHEMA, keys=("id",), encodings=AS_NUMBERS
    )
    as_string = json.dumps(f'{{"insert": {{"id": 6, "big": {BIG}}}}}')
    values = [
        f'{{"insert": {{"id": 1, {ROW}}}}}',
        f'[{{"insert": {{"id": 2, {NEAR}}}}}, {{"insert": {{"id": 3, {ROW}}}}}]',
        f'{{"insert": {{"id": 4, {ROW}}}}}\n{{"insert": {{"id": 5, {NEAR}}}}}',
        # A change sent as a JSON string holds its digits where no lookup reads them: its
        # number is refused, not taken from the next change (the same double).
        f'[{as_string}, {{"insert": {{"id": 7, {NEAR}}}}}]',
    ]
    kafka.produce(settings.kafka, topic, [(None, v.encode(), 0) for v in values])
    run_ingest(spark, settings, source)
    result = run_refine(spark, settings, name)
    assert (result.rows_written, result.rows_quarantined) == (6, 1)

    expected = spark.createDataFrame(
        [(i, *(NEAR_STORED if i in (2, 5, 7) else STORED), None) for i in (1, 2, 3, 4, 5, 7)],
        f"{SCHEMA}, _rescued_data STRING",
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_a_number_past_a_doubles_range_is_refused_in_every_shape_never_stored_as_infinity(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Spark's get_json_object, which cuts an image out of its envelope, writes 1e400 as the
    string "Infinity": a DOUBLE column stored Infinity and a STRING column "Infinity". The
    strings "Infinity" that Debezium sends for PostgreSQL's infinities are values, kept."""
    source, topic, settings = new_source(kafka_up, kind="cdc")
    schema = "id INT, d DOUBLE, label STRING"
    name, settings = with_silver(settings, source, mode="scd1", schema=schema, keys=("id",))
    sent = '"d": "Infinity", "label": "-Infinity"'
    changes = [
        envelope("c", 100, after='{"id": 1, "label": 1e400}'),
        wrapped(envelope("c", 110, after='{"id": 2, "label": -1E+400}')),
        flat(120, '"id": 3, "label": 1e400'),
        wrapped(flat(130, '"id": 4, "label": -1e400')),
        envelope("c", 140, after=f'{{"id": 5, {sent}}}'),
        # REPLICA IDENTITY FULL: the before image holds numbers past the range, the after
        # image the strings: only the image itself tells which is the row's.
        envelope(
            "u", 150, before='{"id": 6, "d": 1e400, "label": 1e400}', after=f'{{"id": 6, {sent}}}'
        ),
        envelope("c", 160, after='{"id": 7, "d": 1e400}'),
        wrapped(envelope("c", 170, after='{"id": 8, "d": -1e400}')),
        flat(180, '"id": 9, "d": 1e400'),
        wrapped(flat(190, '"id": 10, "d": -1E400')),
    ]
    kafka.produce(settings.kafka, topic, [(b'{"id": 0}', c, 0) for c in changes])
    run_ingest(spark, settings, source, kind="cdc")
    result = run_refine(spark, settings, name)
    assert (result.rows_written, result.rows_quarantined) == (6, 4)

    inf = float("inf")
    expected = spark.createDataFrame(
        [
            (1, None, "1e400", None),
            (2, None, "-1E+400", None),
            (3, None, "1e400", None),
            (4, None, "-1e400", None),
            (5, inf, "-Infinity", None),
            (6, inf, "-Infinity", None),
        ],
        f"{schema}, _rescued_data STRING",
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )
    refused = quarantine(spark, settings, name).select("offset", "parse_error")
    expected_refused = spark.createDataFrame(
        [(offset, "undecodable: d") for offset in range(6, 10)], "offset BIGINT, parse_error STRING"
    )
    assert_df_equality(refused, expected_refused, ignore_row_order=True, ignore_nullable=True)


def test_nested_values_of_a_change_decode_from_its_own_image_exactly_or_quarantine_it(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """An array of a change's image decodes leaf by leaf from the image's VARIANT (not the
    other image of an update, not a double's rounding), by the connector's encodings (a
    `date[]` holds epoch days); a leaf that does not decode quarantines the change."""
    source, topic, settings = new_source(kafka_up, kind="cdc", decimal_handling_mode="double")
    # `small`: Debezium's unchanged-TOAST placeholder (its byte codes, up to 118) fits no
    # DECIMAL(4,2); a batch of a table with such a column failed when it was looked for.
    schema = "id INT, prices ARRAY<DECIMAL(20,2)>, days ARRAY<DATE>, small ARRAY<DECIMAL(4,2)>"
    name, settings = with_silver(settings, source, mode="scd1", schema=schema, keys=("id",))
    first = '{"id": 1, "prices": [1.5, 13.29], "days": [19000, null], "small": [1.25]}'
    changes = [
        envelope("c", 100, after=first),
        envelope(
            "u", 110, before='{"id": 2, "prices": [13.299]}', after='{"id": 2, "prices": [2.5]}'
        ),
        flat(120, '"id": 3, "prices": [13.299]'),
        wrapped(envelope("c", 130, after=f'{{"id": 4, "prices": [{BIG}]}}')),
    ]
    kafka.produce(settings.kafka, topic, [(b'{"id": 0}', c, 0) for c in changes])
    run_ingest(spark, settings, source, kind="cdc")
    result = run_refine(spark, settings, name)
    assert (result.rows_written, result.rows_quarantined) == (3, 1)

    expected = spark.createDataFrame(
        [
            (
                1,
                [Decimal("1.50"), Decimal("13.29")],
                [date(2022, 1, 8), None],
                [Decimal("1.25")],
                None,
            ),
            (2, [Decimal("2.50")], None, None, None),
            (4, [Decimal(BIG)], None, None, None),
        ],
        f"{schema}, _rescued_data STRING",
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )
    refused = quarantine(spark, settings, name).select("offset", "parse_error")
    assert [tuple(r) for r in refused.collect()] == [(2, "undecodable: prices")]


def test_an_int_array_declared_decimal_keeps_its_value_when_debezium_sends_the_toast_codes(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Debezium sends an unchanged TOASTed `integer[]` as its placeholder's byte codes. Under
    `decimal.handling.mode=double` a column declaring it ARRAY<DECIMAL(20,2)> decoded the codes
    as numbers and stored them in place of the value; they are the placeholder, so the value
    kept is the previous one. Where the codes do not fit (ARRAY<DECIMAL(4,2)>) they are no
    value at all: the change is quarantined, not stored."""
    source, topic, settings = new_source(kafka_up, kind="cdc", decimal_handling_mode="double")
    schema = "id INT, prices ARRAY<DECIMAL(20,2)>, small ARRAY<DECIMAL(4,2)>"
    name, settings = with_silver(settings, source, mode="scd1", schema=schema, keys=("id",))
    codes = json.dumps(list(b"__debezium_unavailable_value"))
    changes = [
        envelope("c", 100, after='{"id": 1, "prices": [1.5, 13.29], "small": [1.25]}'),
        envelope("c", 101, after='{"id": 2, "prices": [7], "small": [2.5]}'),
        envelope("u", 110, after=f'{{"id": 1, "prices": {codes}, "small": [3.75]}}'),
        envelope("u", 111, after=f'{{"id": 2, "prices": [8], "small": {codes}}}'),
    ]
    kafka.produce(settings.kafka, topic, [(b'{"id": 0}', c, 0) for c in changes])
    run_ingest(spark, settings, source, kind="cdc")
    result = run_refine(spark, settings, name)
    assert (result.rows_written, result.rows_quarantined) == (3, 1)

    expected = spark.createDataFrame(
        [
            (1, [Decimal("1.50"), Decimal("13.29")], [Decimal("3.75")], None),
            (2, [Decimal("7.00")], [Decimal("2.50")], None),
        ],
        f"{schema}, _rescued_data STRING",
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )
    refused = quarantine(spark, settings, name).select("offset", "parse_error")
    assert [tuple(r) for r in refused.collect()] == [(3, "undecodable: small")]


def test_nested_leaves_take_the_connectors_encodings_the_columns_own_and_keep_them_on_evolve(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Under Debezium's defaults (`precise`, `adaptive`) a `numeric[]` is base64 (or
    `{scale, value}`), a `date[]` epoch days, and a `timestamp(3)[]` epoch milliseconds, which
    its column declares. A JSON number for a base64 leaf was read as base64 (another number);
    an evolved schema took the events encodings for nested leaves, quarantining a `date[]`."""
    source, topic, settings = new_source(kafka_up, kind="cdc")
    schema = "id INT, amounts ARRAY<DECIMAL(20,2)>, ts ARRAY<TIMESTAMP>, days ARRAY<DATE>"
    name, settings = with_silver(
        settings,
        source,
        mode="scd1",
        schema=schema,
        keys=("id",),
        encodings={"ts": "epoch_ms"},
        schema_drift="evolve",
    )
    first = '"amounts": ["BNI=", {"scale": 1, "value": "BNI="}], "ts": [1704067200000]'
    changes = [
        envelope("c", 100, after=f'{{"id": 1, {first}, "days": [19000], "note": "x"}}'),
        envelope("c", 110, after='{"id": 2, "amounts": [1234]}'),
    ]
    kafka.produce(settings.kafka, topic, [(b'{"id": 0}', c, 0) for c in changes])
    run_ingest(spark, settings, source, kind="cdc")
    result = run_refine(spark, settings, name)
    assert (result.rows_written, result.rows_quarantined) == (1, 1)

    expected = spark.createDataFrame(
        [
            (
                1,
                [Decimal("12.34"), Decimal("123.40")],
                [datetime(2024, 1, 1)],
                [date(2022, 1, 8)],
                "x",
            )
        ],
        f"{schema}, note STRING",
    )
    actual = current(spark, settings, name).select("id", "amounts", "ts", "days", "note")
    assert_df_equality(actual, expected, ignore_nullable=True)
    refused = quarantine(spark, settings, name).select("offset", "parse_error")
    assert [tuple(r) for r in refused.collect()] == [(1, "undecodable: amounts")]
