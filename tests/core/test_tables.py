"""The table conventions of `core.tables` against real Delta tables."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from lakehouse.core import compaction, tables

SCHEMA = StructType([StructField("id", LongType())])


def test_jobs_creating_one_shared_table_at_once_all_go_on_and_it_is_created_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Found by the fault test: three refine_silver jobs started together each create
    # `_system/quarantine` if missing; Delta's createIfNotExists in one of them saw the other's
    # half-made table (a log folder, no commit yet) and failed with DELTA_TABLE_NOT_FOUND.
    for round_ in range(6):
        path = str(tmp_path / f"shared_{round_}")
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = [pool.submit(tables.create_table, spark, path, SCHEMA, {}) for _ in range(4)]
            created = [f.result() for f in futures]
        assert True in created, (round_, created)
        assert tables.latest_version(spark, path) == 0  # one creation, nothing after it
        assert spark.read.format("delta").load(path).schema == SCHEMA


def test_first_commit_of_finds_a_writers_first_commit_of_a_version_among_others(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What a replayed batch looks for: the first commit its writer (`w`, or `w:...` for its
    further commits) made for the batch, past other writers' commits; none before it ran."""
    path = str(tmp_path / "t")
    tables.create_table(spark, path, SCHEMA, {})  # version 0, no transaction
    row = spark.createDataFrame([(1,)], SCHEMA)
    for app_id, version in [("w", 0), ("other", 5), ("w:truncate1", 1), ("w", 1), ("w2", 2)]:
        tables.append_once(row, path, app_id, version)  # versions 1 to 5
    found = {
        (app_id, version): tables.first_commit_of(spark, path, app_id, version)
        for app_id, version in [("w", 0), ("w", 1), ("w", 2), ("other", 5), ("x", 0)]
    }
    assert found == {
        ("w", 0): 1,
        ("w", 1): 3,
        ("w", 2): None,  # `w2` is another writer
        ("other", 5): 2,
        ("x", 0): None,
    }


def test_properties_are_the_tables_own_as_last_committed_by_any_writer(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Jobs decide by them at start (protection, silver's evolved schema and contract): what
    was committed last, by another client too, and only what the table was given (not Delta's
    protocol, which `SHOW TBLPROPERTIES` lists among them)."""
    path = str(tmp_path / "t")
    evolved = "`note` STRING, `tags` ARRAY<STRING>, `amount, net` DECIMAL(12,2)"
    given = {
        "delta.appendOnly": "true",
        "delta.enableChangeDataFeed": "true",
        "lakehouse.evolved_schema": evolved,
    }
    tables.create_table(spark, path, SCHEMA, given)
    # The test settings give every new table this default (conf/test/lakehouse.yml).
    given["delta.checkpointInterval"] = "10"
    assert tables.properties(spark, path) == given

    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
        "('delta.appendOnly' = 'false', 'pipelines.reset.allowed' = 'true')"
    )
    assert tables.properties(spark, path) == {
        **given,
        "delta.appendOnly": "false",
        "pipelines.reset.allowed": "true",
    }
    spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('lakehouse.evolved_schema')")
    assert tables.properties(spark, path) == {
        "delta.appendOnly": "false",
        "delta.enableChangeDataFeed": "true",
        "delta.checkpointInterval": "10",
        "pipelines.reset.allowed": "true",
    }


def test_a_compaction_that_finds_nothing_to_rewrite_reports_none(
    spark: SparkSession, tmp_path: Path
) -> None:
    """OPTIMIZE commits nothing when each partition holds one file: no compaction's version is
    returned (a refine batch then logs no compaction phase), and a table of several small
    files is compacted in the version returned."""
    path = str(tmp_path / "t")
    tables.create_table(spark, path, SCHEMA, {})
    spark.createDataFrame([(1,)], SCHEMA).coalesce(1).write.format("delta").mode("append").save(
        path
    )
    assert compaction.compact_when_due(spark, path, 1) is None
    assert tables.latest_version(spark, path) == 1
    spark.createDataFrame([(2,)], SCHEMA).coalesce(1).write.format("delta").mode("append").save(
        path
    )
    assert compaction.compact_when_due(spark, path, 2) == 3
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("version = 3")
    assert [r["operation"] for r in history.collect()] == ["OPTIMIZE"]


def test_a_compaction_or_a_rewrite_without_data_change_is_not_the_tables_last_change(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What a writer takes for its table's version: rows appended, a property set and a
    delete are changes; an OPTIMIZE, a Z-order and a rewrite with `dataChange` false are not."""
    path = str(tmp_path / "t")
    tables.create_table(spark, path, SCHEMA, {})  # 0

    def append(n: int) -> None:
        rows = spark.createDataFrame([(n,)], SCHEMA).coalesce(1)
        rows.write.format("delta").mode("append").save(path)

    append(1)  # 1
    append(2)  # 2
    assert tables.last_change_version(spark, path) == 2
    spark.sql(f"OPTIMIZE delta.`{path}`")  # 3
    rows = spark.read.format("delta").load(path)
    rows.write.format("delta").mode("overwrite").option("dataChange", "false").save(path)  # 4
    spark.sql(f"OPTIMIZE delta.`{path}` ZORDER BY (id)")  # 5
    assert tables.latest_version(spark, path) == 5
    assert [tables.changes_data(spark, path, v) for v in range(6)] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert tables.last_change_version(spark, path) == 2
    tables.set_properties(spark, path, {"lakehouse.note": "x"})  # 6
    assert tables.last_change_version(spark, path) == 6
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 1")  # 7
    spark.sql(f"OPTIMIZE delta.`{path}` ZORDER BY (id)")  # 8
    assert (tables.latest_version(spark, path), tables.last_change_version(spark, path)) == (8, 7)
