"""Bronze compaction (`storage.compact_every`) against a real broker and real Delta: Spark's
Delta sink adds files every micro-batch, and ingest compacts them between its query's polls.
A compaction rewrites files, never rows, and adds nothing to the change feed silver reads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from lakehouse.core import kafka
from lakehouse.core.compaction import Compactor
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


def test_the_compactor_looks_at_the_table_only_after_its_query_reported_a_new_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Between a query's batches the stream committed nothing, so its compactor leaves the log
    alone (a look a second is ~10 requests a second on an object store): commits that others
    make are counted at the query's next batch."""
    source, target, checkpoint = (str(tmp_path / n) for n in ("source", "target", "checkpoint"))

    def batch(rows: int) -> StreamingQuery:
        """One availableNow run of a real stream from `source` into `target`: one commit."""
        spark.range(rows).write.format("delta").mode("append").save(source)
        query = (
            spark.readStream.format("delta")
            .load(source)
            .writeStream.format("delta")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(target)
        )
        query.awaitTermination()
        return query

    def compactions() -> int:
        history = DeltaTable.forPath(spark, target).history().collect()
        return [r["operation"] for r in history].count("OPTIMIZE")

    first = batch(3)  # the table's version 0
    compactor = Compactor(spark, target, every=2)
    compactor.poll(first)
    for _ in range(2):  # two commits by someone else: a compaction is due
        spark.range(1).write.format("delta").mode("append").save(target)
    compactor.poll(first)
    compactor.poll(first)
    assert compactions() == 0
    compactor.poll(batch(2))  # the query's next batch: the due compaction runs
    assert compactions() == 1
    expected = [0, 0, 0, 0, 1, 1, 2]  # the stream's 0-2 and 0-1, the others' 0 and 0: none lost
    assert sorted(r["id"] for r in spark.read.format("delta").load(target).collect()) == expected
