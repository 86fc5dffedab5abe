"""refine_silver on an upsert table with `apply_as_deletes`: a record matching the condition
deletes its key at its `sequence_by` position, leaves a tombstone that holds off older
versions, passes the table's expectations like any record, and means the same however the
records are cut into batches."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core import fs
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings
from tests.bronze.helpers import run_ingest
from tests.silver.helpers import (
    ORDER_SCHEMA,
    assert_current,
    events_pipeline,
    produce,
    quarantine,
    rule,
    run_refine,
    silver_table,
)

DELETED = "order_status = 'deleted'"
RULES = (rule("amount_not_negative", "quarantine", sql="amount >= 0"),)
LIVE = (
    "order_id bigint, customer_id bigint, order_status string, amount double, ts bigint, "
    "_rescued_data string"
)


def order(order_id: int, status: str, amount: float, ts: int) -> dict[str, object]:
    return {
        "order_id": order_id,
        "customer_id": 7,
        "order_status": status,
        "amount": amount,
        "ts": ts,
    }


def test_a_delete_record_removes_its_key_and_its_tombstone_holds_off_older_versions(
    spark: SparkSession, kafka_up: Settings
) -> None:
    first: list[object] = [
        order(1, "created", 10.0, 100),
        order(1, "deleted", 10.0, 200),  # deletes order 1 within the batch
        order(2, "paid", 5.0, 100),
        order(3, "deleted", 1.0, 50),  # a delete of a key never seen: a tombstone
        order(4, "paid", 4.0, 100),
        order(4, "deleted", 4.0, 90),  # older than order 4's version: changes nothing
    ]
    source, topic, name, settings = events_pipeline(
        spark,
        kafka_up,
        first,
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        apply_as_deletes=DELETED,
        expectations=RULES,
    )
    run_refine(spark, settings, name)
    assert_current(
        spark,
        settings,
        name,
        [(2, 7, "paid", 5.0, 100, None), (4, 7, "paid", 4.0, 100, None)],
        LIVE,
    )

    produce(
        settings,
        topic,
        [
            order(2, "deleted", 5.0, 150),  # deletes order 2, refined before
            order(3, "created", 1.0, 40),  # older than order 3's tombstone: stays deleted
            order(1, "paid", 12.0, 300),  # newer than order 1's delete: live again
            order(4, "deleted", -1.0, 200),  # fails amount >= 0: quarantined, deletes nothing
            order(6, "paid", 1.0, 1),
        ],
    )
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)
    expected = [
        (1, 7, "paid", 12.0, 300, None),
        (4, 7, "paid", 4.0, 100, None),
        (6, 7, "paid", 1.0, 1, None),
    ]
    assert_current(spark, settings, name, expected, LIVE)
    # The tombstones: order 2 keeps its last values at the delete's position; order 3's
    # holds only the key.
    tombstones = silver_table(spark, settings, name).where("__deleted")
    assert_df_equality(
        tombstones.select("order_id", "order_status", "amount", "ts", "__seq"),
        spark.createDataFrame(
            [(2, "paid", 5.0, 100, 150), (3, None, None, None, 50)],
            "order_id bigint, order_status string, amount double, ts bigint, __seq bigint",
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    q = quarantine(spark, settings, name).select("offset", "failed_rules")
    assert_df_equality(
        q,
        spark.createDataFrame(
            [(9, ["amount_not_negative"])], "offset long, failed_rules array<string>"
        ),
        ignore_nullable=True,
    )

    # All of bronze in one batch ends the same.
    run_refine(spark, settings, name, full_refresh=True)
    assert_current(spark, settings, name, expected, LIVE)


@pytest.mark.parametrize(
    ("condition", "reason"),
    [("status = 'deleted'", "`status`"), ("amount", "it is double, not boolean")],
    ids=["unknown_column", "not_boolean"],
)
def test_a_delete_condition_that_is_not_a_condition_on_the_columns_fails_at_start(
    spark: SparkSession, kafka_up: Settings, condition: str, reason: str
) -> None:
    _, _, name, settings = events_pipeline(
        spark,
        kafka_up,
        [order(1, "paid", 1.0, 1)],
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        apply_as_deletes=condition,
    )
    with pytest.raises(UsageError) as err:
        run_refine(spark, settings, name)
    message = str(err.value)
    assert message.startswith(f"silver.{name}.apply_as_deletes: {condition!r} "), message
    assert reason in message, message
    assert "order_id, customer_id, order_status, amount, ts" in message, message
    assert not fs.exists(spark, settings.storage.path("silver", name))
