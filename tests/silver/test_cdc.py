"""refine_silver on a CDC table fed by Debezium envelopes in bronze: position order, key-only
deletes, duplicates, an unknown op quarantined, a truncate, a late older update that must not
resurrect a row, and `--full-refresh` rebuilding the same table from bronze."""

from __future__ import annotations

import json
import logging
import re

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core import kafka
from lakehouse.core.settings import Settings
from lakehouse.silver.replay import replay_quarantine
from tests.bronze.helpers import new_source, run_ingest
from tests.silver.helpers import (
    change,
    current,
    quarantine,
    rule,
    run_refine,
    silver_table,
    with_silver,
)

SCHEMA = "id INT, name STRING"


def send(settings: Settings, topic: str, values: list[bytes]) -> None:
    kafka.produce(settings.kafka, topic, [(b'{"id": 0}', v, 0) for v in values])


def test_cdc_apply_truncate_and_full_refresh(spark: SparkSession, kafka_up: Settings) -> None:
    source, topic, settings = new_source(kafka_up, kind="cdc")
    name, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
    send(
        settings,
        topic,
        [
            change("c", 100, after={"id": 1, "name": "ada"}),
            change("c", 110, after={"id": 2, "name": "bob"}),
            change("c", 120, after={"id": 3, "name": "cy"}),
            change("u", 200, before=None, after={"id": 2, "name": "bob2"}),
            change("d", 300, before={"id": 3, "name": None}),  # REPLICA IDENTITY DEFAULT
            change("u", 200, before=None, after={"id": 2, "name": "bob2"}),  # redelivered
            change("x", 310, after={"id": 9, "name": "?"}),  # an op Debezium does not send
        ],
    )
    run_ingest(spark, settings, source, kind="cdc")
    result = run_refine(spark, settings, name)
    assert (result.rows_in, result.rows_written, result.rows_quarantined) == (7, 6, 1)
    expected = spark.createDataFrame([(1, "ada", None), (2, "bob2", None)], f"{SCHEMA}, r string")
    expected = expected.withColumnRenamed("r", "_rescued_data")
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )

    send(
        settings,
        topic,
        [
            change("t", 400),
            change("c", 500, after={"id": 5, "name": "eve"}),
            change("u", 150, after={"id": 1, "name": "late"}),  # older than the truncate
        ],
    )
    run_ingest(spark, settings, source, kind="cdc")
    run_refine(spark, settings, name)
    only_eve = spark.createDataFrame([(5, "eve", None)], f"{SCHEMA}, _rescued_data string")
    assert_df_equality(
        current(spark, settings, name), only_eve, ignore_row_order=True, ignore_nullable=True
    )

    # A rebuild from bronze ends in the same table, and quarantines the bad op once, not twice.
    run_refine(spark, settings, name, full_refresh=True)
    assert_df_equality(
        current(spark, settings, name), only_eve, ignore_row_order=True, ignore_nullable=True
    )
    rejected = quarantine(spark, settings, name).select("offset", "parse_error", "status")
    assert [tuple(r) for r in rejected.collect()] == [(6, "unknown_op", "quarantined")]


def test_a_cdc_batch_line_counts_each_change_once(
    spark: SparkSession, kafka_up: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # The line read the query's input count, which counts every scan of the feed: a CDC
    # batch was scanned twice (once for its tombstones and placeholders), and said 6 for 3;
    # a batch with a tombstone reads its feed again to resolve it.
    source, topic, settings = new_source(kafka_up, kind="cdc")
    name, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
    send(
        settings,
        topic,
        [
            change("c", 100, after={"id": 1, "name": "ada"}),
            change("c", 110, after={"id": 2, "name": "bob"}),
            change("u", 120, after={"id": 1, "name": "ada2"}),
        ],
    )
    run_ingest(spark, settings, source, kind="cdc")
    caplog.set_level(logging.INFO, logger="lakehouse.core.streaming")
    assert run_refine(spark, settings, name).rows_in == 3
    # A tombstone alone (its delete dropped, as the flattening SMT does) deletes id 2; id 1's
    # delete comes with the tombstone Debezium sends after it, which resolution drops.
    create = change("c", 130, after={"id": 3, "name": "cy"})
    delete = change("d", 140, before={"id": 1, "name": None})
    kafka.produce(
        settings.kafka,
        topic,
        [
            (b'{"id": 3}', create, 0),
            (b'{"id": 2}', None, 0),
            (b'{"id": 1}', delete, 0),
            (b'{"id": 1}', None, 0),
        ],
    )
    run_ingest(spark, settings, source, kind="cdc")
    run_refine(spark, settings, name)
    counts = re.findall(r"refine_silver_\w+ batch (\d+): (\d+) rows in", caplog.text)
    assert counts == [("0", "3"), ("1", "4")], caplog.text[-2000:]
    assert_df_equality(
        current(spark, settings, name).select("id", "name"),
        spark.createDataFrame([(3, "cy")], SCHEMA),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_no_rule_sees_a_toast_placeholder_before_it_is_resolved(
    spark: SparkSession, kafka_up: Settings
) -> None:
    # parse_json raises on text that is not JSON: run on the placeholder, it failed the batch.
    source, topic, settings = new_source(kafka_up, kind="cdc")
    json_rule = rule("doc_is_json", "quarantine", sql="parse_json(doc) IS NOT NULL")
    schema = "id INT, doc STRING"
    name, settings = with_silver(
        settings, source, mode="scd1", schema=schema, keys=("id",), expectations=(json_rule,)
    )
    send(
        settings,
        topic,
        [
            change("c", 100, after={"id": 1, "doc": '{"n": 1}'}),
            change("u", 110, after={"id": 1, "doc": "__debezium_unavailable_value"}),
        ],
    )
    run_ingest(spark, settings, source, kind="cdc")
    result = run_refine(spark, settings, name)
    assert (result.rows_in, result.rows_written, result.rows_quarantined) == (2, 2, 0)
    assert_df_equality(
        current(spark, settings, name),
        spark.createDataFrame([(1, '{"n": 1}', None)], f"{schema}, _rescued_data string"),
        ignore_nullable=True,
    )


def test_a_source_time_past_the_supported_years_does_not_fail_the_batch(
    spark: SparkSession, kafka_up: Settings
) -> None:
    # `source.ts_ms` in nanoseconds overflowed Spark's timestamp_millis: every run of the
    # batch failed on it. The change itself is sound; only its source time is unusable.
    source, topic, settings = new_source(kafka_up, kind="cdc")
    name, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
    record = json.loads(change("c", 100, after={"id": 1, "name": "ada"}))
    record["source"]["ts_ms"] = 1_700_000_000_000_000_000
    send(settings, topic, [json.dumps(record).encode()])
    run_ingest(spark, settings, source, kind="cdc")
    result = run_refine(spark, settings, name)
    assert (result.rows_in, result.rows_written, result.rows_quarantined) == (1, 1, 0)
    expected = spark.createDataFrame([(1, "ada", None)], f"{SCHEMA}, _rescued_data string")
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_refine_purges_tombstones_past_their_retention_and_keeps_younger_ones(
    spark: SparkSession, kafka_up: Settings
) -> None:
    source, topic, settings = new_source(kafka_up, kind="cdc")
    kept, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
    purged, settings = with_silver(
        settings, source, mode="scd1", schema=SCHEMA, keys=("id",), tombstone_retention_hours=0
    )
    send(
        settings,
        topic,
        [
            change("c", 100, after={"id": 1, "name": "ada"}),
            change("c", 110, after={"id": 2, "name": "bob"}),
            change("d", 120, before={"id": 2, "name": None}),
        ],
    )
    run_ingest(spark, settings, source, kind="cdc")
    stored = {}
    for name in (kept, purged):
        run_refine(spark, settings, name)
        rows = silver_table(spark, settings, name).collect()
        stored[name] = sorted((r["id"], r["__deleted"]) for r in rows)
    assert stored == {kept: [(1, False), (2, True)], purged: [(1, False)]}


def flat(op: str, lsn: int, row: dict[str, object]) -> bytes:
    """An ExtractNewRecordState-flattened change with the metadata silver orders by."""
    return json.dumps(
        {**row, "__op": op, "__lsn": lsn, "__source_ts_ms": 1_700_000_000_000}
    ).encode()


def test_a_tombstone_deletes_the_row_it_follows_and_nothing_else(
    spark: SparkSession, kafka_up: Settings
) -> None:
    source, topic, settings = new_source(kafka_up, kind="cdc")
    name, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))

    def send_keyed(records: list[tuple[int, bytes | None]]) -> None:
        kafka.produce(
            settings.kafka, topic, [(json.dumps({"id": i}).encode(), v, 0) for i, v in records]
        )
        run_ingest(spark, settings, source, kind="cdc")
        run_refine(spark, settings, name)

    def positions() -> list[tuple[int, int, bool]]:
        rows = silver_table(spark, settings, name).collect()
        return sorted((r["id"], r["__seq"], r["__deleted"]) for r in rows)

    send_keyed(
        [
            (1, flat("c", 100, {"id": 1, "name": "a"})),
            (2, flat("c", 110, {"id": 2, "name": "b"})),
            (1, None),  # the SMT's default: the delete itself was dropped
            (2, change("d", 120, before={"id": 2})),
            (2, None),  # follows a delete: repeats it
            (9, None),  # a key never seen: nothing to delete
        ]
    )
    assert positions() == [(1, 101, True), (2, 120, True)]
    send_keyed([(3, flat("c", 200, {"id": 3, "name": "c"})), (2, None)])
    assert positions() == [(1, 101, True), (2, 120, True), (3, 200, False)]
    send_keyed([(3, None)])  # its insert is in silver, not in the batch
    assert positions() == [(1, 101, True), (2, 120, True), (3, 201, True)]
    send_keyed([(3, flat("c", 300, {"id": 3, "name": "c2"}))])  # back after the delete
    assert [tuple(r) for r in current(spark, settings, name).select("id", "name").collect()] == [
        (3, "c2")
    ]


def test_a_toast_placeholder_with_no_value_to_take_is_quarantined_not_stored(
    spark: SparkSession, kafka_up: Settings
) -> None:
    source, topic, settings = new_source(kafka_up, kind="cdc")
    name, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
    unavailable = "__debezium_unavailable_value"
    send(
        settings,
        topic,
        [
            change("c", 100, after={"id": 1, "name": "ada"}),
            change("u", 110, after={"id": 1, "name": unavailable}),  # takes "ada"
            change("u", 120, after={"id": 2, "name": unavailable}),  # key 2 never seen
        ],
    )
    run_ingest(spark, settings, source, kind="cdc")
    result = run_refine(spark, settings, name)
    assert (result.rows_written, result.rows_quarantined) == (2, 1)
    assert [tuple(r) for r in current(spark, settings, name).select("id", "name").collect()] == [
        (1, "ada")
    ]
    rejected = quarantine(spark, settings, name).select("offset", "parse_error")
    assert [tuple(r) for r in rejected.collect()] == [(2, "unresolved_toast: name")]
    # A replay stores the change only once an operator wrote the real value in.
    assert replay_quarantine(spark, settings, name).still_quarantined == 1
    assert replay_quarantine(spark, settings, name, fixes=[("name", "'bo'")]).replayed == 1
    names = current(spark, settings, name).select("id", "name").collect()
    assert sorted(tuple(r) for r in names) == [(1, "ada"), (2, "bo")]


def test_a_resent_tombstone_does_not_delete_the_row_inserted_after_it(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Debezium re-sends after a restart: `d`, tombstone, `c` again. In one batch the re-sent
    tombstone follows the re-sent delete; cut from it by a batch, bronze tells."""
    source, topic, settings = new_source(kafka_up, kind="cdc")
    name, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
    key = b'{"id": 1}'
    sent = [
        change("c", 100, after={"id": 1, "name": "a"}),
        change("d", 150, before={"id": 1}),
        None,
        change("c", 200, after={"id": 1, "name": "b"}),
    ]
    for batch in ([*sent, sent[1]], [None, sent[3], *sent]):  # resent from the delete on
        kafka.produce(settings.kafka, topic, [(key, v, 0) for v in batch])
        run_ingest(spark, settings, source, kind="cdc")
        run_refine(spark, settings, name)
        rows = silver_table(spark, settings, name).collect()
        assert [(r["id"], r["name"], r["__seq"], r["__deleted"]) for r in rows] == [
            (1, "b", 200, False)
        ]


def test_keys_swapped_through_a_temporary_key_keep_their_own_toasted_values(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """UPDATE id 1 -> 9, 2 -> 1, 9 -> 2 in one transaction: each is a delete of the old key
    and a create of the new one at one position, the create carrying the placeholder."""
    source, topic, settings = new_source(kafka_up, kind="cdc")
    name, settings = with_silver(settings, source, mode="scd1", schema=SCHEMA, keys=("id",))
    unavailable = "__debezium_unavailable_value"
    send(
        settings,
        topic,
        [
            change("c", 100, after={"id": 1, "name": "v1"}),
            change("c", 110, after={"id": 2, "name": "v2"}),
        ],
    )
    run_ingest(spark, settings, source, kind="cdc")
    run_refine(spark, settings, name)
    moves = [(1, 9, 200), (2, 1, 300), (9, 2, 400)]
    send(
        settings,
        topic,
        [
            record
            for old, new, at in moves
            for record in (
                change("d", at, before={"id": old}),
                change("c", at, after={"id": new, "name": unavailable}),
            )
        ],
    )
    run_ingest(spark, settings, source, kind="cdc")
    result = run_refine(spark, settings, name)
    assert result.rows_quarantined == 0
    assert sorted(
        tuple(r) for r in current(spark, settings, name).select("id", "name").collect()
    ) == [
        (1, "v2"),
        (2, "v1"),
    ]
