"""Bronze compaction (`storage.compact_every`) against a real broker and real Delta: Spark's
Delta sink adds files every micro-batch, and ingest compacts them between its query's polls.
A compaction rewrites files, never rows, and adds nothing to the change feed silver reads."""

from __future__ import annotations

from dataclasses import replace

from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from lakehouse.core import kafka
from lakehouse.core.settings import Settings
from tests.bronze.helpers import bronze, new_source, run_ingest

ROW = "partition int, offset long, value string"


def test_a_compacted_bronze_table_keeps_every_offset_once_in_its_rows_and_change_feed(
    spark: SparkSession, kafka_up: Settings
) -> None:
    settings = replace(kafka_up, storage=replace(kafka_up.storage, compact_every=2))
    name, topic, settings = new_source(settings, partitions=2)
    produced: list[tuple[int, int, str]] = []
    offsets = [0, 0]  # a fresh topic's partitions, each written in order by one producer
    for run in range(5):  # one commit a run: a compaction after every second one
        values = [f'{{"run":{run},"n":{n}}}' for n in range(3)]
        kafka.produce(
            settings.kafka, topic, [(None, v.encode(), n % 2) for n, v in enumerate(values)]
        )
        for n, value in enumerate(values):
            produced.append((n % 2, offsets[n % 2], value))
            offsets[n % 2] += 1
        run_ingest(spark, settings, name)

    path = settings.storage.path("bronze", name)
    operations = [r["operation"] for r in DeltaTable.forPath(spark, path).history().collect()]
    # Version 0 creates the table; runs write 1, 2, 4, 5, 7: compacted as 3 and 6.
    assert operations.count("OPTIMIZE") == 2, operations
    # Each run wrote a file a partition: the last compaction left one, the last run two more.
    assert DeltaTable.forPath(spark, path).detail().first()["numFiles"] == 3  # type: ignore[index]
    expected = spark.createDataFrame(produced, ROW)
    columns = ["partition", "offset", "CAST(value AS STRING) AS value"]
    assert_df_equality(
        bronze(spark, settings, name).selectExpr(*columns),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
    )
    feed = spark.read.format("delta").option("readChangeFeed", "true")
    changes = feed.option("startingVersion", 0).load(path)
    assert_df_equality(
        changes.selectExpr(*columns, "_change_type"),
        spark.createDataFrame([(*r, "insert") for r in produced], f"{ROW}, _change_type string"),
        ignore_row_order=True,
        ignore_nullable=True,
    )
