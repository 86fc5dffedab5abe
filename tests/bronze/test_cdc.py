"""ingest_cdc: Debezium envelopes (schemas.enable true/false), ExtractNewRecordState-flattened
records, tombstones and garbage all land in bronze with their CDC columns parsed when they can."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core import kafka
from lakehouse.core.settings import Settings
from tests.bronze.helpers import bronze, new_source, run_ingest, wait_for_records
from tests.conftest import pg_connect

CDC_COLUMNS = (
    "offset long, value_error string, cdc_op string, cdc_key string, cdc_lsn long, "
    "cdc_source_ts_ms long, cdc_table string, cdc_deleted string"
)


def envelope(op: str, before: object, after: object, lsn: int) -> dict[str, object]:
    source = {"lsn": lsn, "ts_ms": 1000 + lsn, "schema": "public", "table": "customers"}
    return {"before": before, "after": after, "source": source, "op": op, "ts_ms": 5}


def test_cdc_corpus(spark: SparkSession, kafka_up: Settings) -> None:
    name, topic, settings = new_source(kafka_up, kind="cdc")
    key = json.dumps({"customer_id": 1}).encode()
    wrapped_key = json.dumps({"schema": {"type": "struct"}, "payload": {"customer_id": 1}})
    corpus: list[tuple[bytes | None, bytes | None]] = [
        (key, json.dumps(envelope("c", None, {"customer_id": 1}, 100)).encode()),
        (
            wrapped_key.encode(),
            json.dumps(
                {"schema": {"type": "struct"}, "payload": envelope("u", None, {"c": 1}, 200)}
            ).encode(),
        ),
        (
            key,
            json.dumps(
                {
                    "customer_id": 1,
                    "__op": "d",
                    "__lsn": 300,
                    "__deleted": "true",
                    "__source_ts_ms": 1300,
                }
            ).encode(),
        ),
        (key, None),  # tombstone
        (key, b"null"),  # what JsonConverter writes for a null value with a schema
        (wrapped_key.encode(), b'{"schema": {"type": "struct"}, "payload": null}'),
        (key, json.dumps(envelope("x", None, None, 400)).encode()),  # unknown op
        (key, b'{"hello": "world"}'),  # JSON, but no envelope
        (key, b"\xff\xfe\x00garbage"),
        (None, b'{"op": "c", "source": {"lsn": 5'),  # truncated
        # Flattened, from a table with its own `op` and `source` columns: `__` fields decide.
        (
            key,
            json.dumps(
                {
                    "customer_id": 1,
                    "op": "paid",
                    "source": {"lsn": 1, "ts_ms": 2, "schema": "s", "table": "t"},
                    "__op": "u",
                    "__lsn": 500,
                    "__source_ts_ms": 1500,
                    "__table": "orders",
                }
            ).encode(),
        ),
        # An LSN sent as a string: not what the narrow read expects, so the VARIANT reads it.
        (
            key,
            json.dumps(
                {**envelope("u", None, None, 0), "source": {"lsn": "600", "ts_ms": 1600}}
            ).encode(),
        ),
        # A repeated field: the last one counts, as in Spark's JSON reader (silver's parse).
        (key, b'{"op": "c", "source": {"lsn": 700, "ts_ms": 1700}, "op": "d"}'),
        # A wrapped key whose `payload` is spelt with an escape.
        (
            b'{"schema": {"type": "struct"}, "p\\u0061yload": {"customer_id": 1}}',
            json.dumps(envelope("c", None, {"customer_id": 1}, 800)).encode(),
        ),
        # Not JSON, though Spark's JSON reader takes them by default: single quotes, NaN.
        (key, b"{'op': 'c', 'source': {'lsn': 900, 'ts_ms': 1900}}"),
        (key, b'{"op": "c", "source": {"lsn": 1000, "ts_ms": 2000}, "after": {"x": NaN}}'),
    ]
    kafka.produce(settings.kafka, topic, [(k, v, 0) for k, v in corpus])
    run_ingest(spark, settings, name, kind="cdc")
    expected = spark.createDataFrame(
        [
            (0, None, "c", '{"customer_id": 1}', 100, 1100, "public.customers", None),
            (1, None, "u", '{"customer_id":1}', 200, 1200, "public.customers", None),
            (2, None, "d", '{"customer_id": 1}', 300, 1300, None, "true"),
            (3, "tombstone", None, '{"customer_id": 1}', None, None, None, None),
            (4, "tombstone", None, '{"customer_id": 1}', None, None, None, None),
            (5, "tombstone", None, '{"customer_id":1}', None, None, None, None),
            (6, "unknown_op", "x", '{"customer_id": 1}', 400, 1400, "public.customers", None),
            (7, "not_an_envelope", None, '{"customer_id": 1}', None, None, None, None),
            (8, "invalid_utf8", None, '{"customer_id": 1}', None, None, None, None),
            (9, "invalid_json", None, None, None, None, None, None),
            (10, None, "u", '{"customer_id": 1}', 500, 1500, "orders", None),
            (11, None, "u", '{"customer_id": 1}', 600, 1600, None, None),
            (12, None, "d", '{"customer_id": 1}', 700, 1700, None, None),
            (13, None, "c", '{"customer_id":1}', 800, 1800, "public.customers", None),
            (14, "invalid_json", None, '{"customer_id": 1}', None, None, None, None),
            (15, "invalid_json", None, '{"customer_id": 1}', None, None, None, None),
        ],
        CDC_COLUMNS,
    )
    actual = bronze(spark, settings, name).select(*[c.split()[0] for c in CDC_COLUMNS.split(", ")])
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize(
    ("schemas_enable", "unwrap"), [(False, False), (True, False), (True, True)]
)
def test_real_debezium_to_bronze(
    spark: SparkSession, kafka_up: Settings, pg_table: str, schemas_enable: bool, unwrap: bool
) -> None:
    from lakehouse.connectors.debezium import delete_connector, register_postgres_connector

    tag = f"{int(schemas_enable)}{int(unwrap)}"
    connector = f"bronze-{pg_table}-{tag}"
    prefix = f"b{pg_table[-8:]}{tag}"
    topic = f"{prefix}.public.{pg_table}"
    register_postgres_connector(
        kafka_up,
        connector,
        prefix,
        [f"public.{pg_table}"],
        schemas_enable=schemas_enable,
        unwrap=unwrap,
    )
    try:
        with pg_connect(kafka_up) as conn:
            conn.execute(f"INSERT INTO public.{pg_table} VALUES (1, 'ada'), (2, 'grace')")
            conn.execute(f"UPDATE public.{pg_table} SET name = 'ada l' WHERE id = 1")
            conn.execute(f"DELETE FROM public.{pg_table} WHERE id = 2")
        wait_for_records(kafka_up, topic, 5)
    finally:
        delete_connector(kafka_up, connector)

    # A source reading Debezium's topic (new_source's own empty topic is left unused).
    name, _, settings = new_source(kafka_up, kind="cdc")
    source = replace(settings.sources[name], topics=(topic,))
    settings = replace(settings, sources={**settings.sources, name: source})
    run_ingest(spark, settings, name, kind="cdc")

    rows = (
        bronze(spark, settings, name)
        .orderBy("offset")
        .select("value_error", "cdc_op", "cdc_key", "cdc_deleted")
        .collect()
    )
    deleted = "true" if unwrap else None
    live = "false" if unwrap else None
    assert [tuple(r) for r in rows] == [
        (None, "c", '{"id":1}', live),
        (None, "c", '{"id":2}', live),
        (None, "u", '{"id":1}', live),
        (None, "d", '{"id":2}', deleted),
        ("tombstone", None, '{"id":2}', None),
    ]
    lsns = [r["cdc_lsn"] for r in bronze(spark, settings, name).orderBy("offset").collect()][:4]
    assert None not in lsns
    assert lsns == sorted(lsns)
