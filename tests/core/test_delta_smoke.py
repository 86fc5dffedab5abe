"""Delta Lake works for real: writes, Change Data Feed versions, table properties."""

from __future__ import annotations

from typing import Any

from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakehouse.core.settings import Settings

SCHEMA = StructType([StructField("id", LongType(), False), StructField("name", StringType(), True)])
CHANGES = StructType(
    [
        StructField("id", LongType(), False),
        StructField("name", StringType(), True),
        StructField("_change_type", StringType(), True),
        StructField("_commit_version", LongType(), True),
    ]
)


def test_change_data_feed_records_every_version(spark: SparkSession, settings: Settings) -> Any:
    from delta.tables import DeltaTable

    path = settings.storage.path("smoke", "cdf_people")
    spark.createDataFrame([(1, "ada"), (2, "grace")], SCHEMA).write.format("delta").option(
        "delta.enableChangeDataFeed", "true"
    ).save(path)  # version 0
    table = DeltaTable.forPath(spark, path)
    table.update("id = 2", {"name": "'grace hopper'"})  # version 1
    table.delete("id = 1")  # version 2
    spark.createDataFrame([(3, "edsger")], SCHEMA).write.format("delta").mode("append").save(
        path
    )  # version 3

    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(path)
        .select("id", "name", "_change_type", "_commit_version")
    )
    expected = spark.createDataFrame(
        [
            (1, "ada", "insert", 0),
            (2, "grace", "insert", 0),
            (2, "grace", "update_preimage", 1),
            (2, "grace hopper", "update_postimage", 1),
            (1, "ada", "delete", 2),
            (3, "edsger", "insert", 3),
        ],
        CHANGES,
    )
    assert_df_equality(changes, expected, ignore_row_order=True, ignore_nullable=True)

    current = spark.read.format("delta").load(path)
    assert_df_equality(
        current,
        spark.createDataFrame([(2, "grace hopper"), (3, "edsger")], SCHEMA),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    history = [row["version"] for row in table.history().select("version").collect()]
    assert sorted(history) == [0, 1, 2, 3]


def test_append_only_table_refuses_delete(spark: SparkSession, settings: Settings) -> None:
    """Delta enforces delta.appendOnly itself: the last line of defence for bronze."""
    import pytest
    from delta.tables import DeltaTable

    path = settings.storage.path("smoke", "append_only")
    spark.createDataFrame([(1, "a")], SCHEMA).write.format("delta").option(
        "delta.appendOnly", "true"
    ).save(path)
    with pytest.raises(Exception, match=r"DELTA_CANNOT_MODIFY_APPEND_ONLY|append-only"):
        DeltaTable.forPath(spark, path).delete("id = 1")
    assert_df_equality(
        spark.read.format("delta").load(path),
        spark.createDataFrame([(1, "a")], SCHEMA),
        ignore_nullable=True,
    )
