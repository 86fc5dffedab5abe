"""The table conventions of `core.tables` against real Delta tables."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from lakehouse.core import tables

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
