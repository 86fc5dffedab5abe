"""What `lakehouse status` shows: per source, what bronze holds and whether it is protected."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse import tables
from lakehouse.ingest import INGEST_LOG, bronze_path
from lakehouse.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SUMMARY_SCHEMA = (
    "source string, table string, rows long, bad_rows long, topic_partitions int, "
    "last_ingest_time timestamp, protected boolean, gaps_recorded int"
)


def bronze_summary(spark: SparkSession, settings: Settings) -> DataFrame:
    """One row per configured source; a source never ingested shows zero rows."""
    from pyspark.sql import functions as F

    gaps_by_source = _gap_counts(spark, settings)  # one read of the log for all sources
    rows: list[tuple[object, ...]] = []
    for name, source in sorted(settings.sources.items()):
        table = f"bronze.{source.bronze_table or name}"
        path = bronze_path(settings, name, source)
        gaps = gaps_by_source.get(name, 0)
        if not tables.exists(spark, path):
            rows.append((name, table, 0, 0, 0, None, None, gaps))  # no table yet
            continue
        stats = (
            spark.read.format("delta")
            .load(path)
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.count(F.when(F.col("value_status") != "ok", 1)).alias("bad"),
                F.count_distinct("topic", "partition").alias("parts"),
                F.max("ingest_time").alias("last"),
            )
            .collect()[0]
        )
        props = tables.properties(spark, path)
        protected = props.get(tables.RESET_ALLOWED) == "false"
        rows.append(
            (
                name,
                table,
                stats["rows"],
                stats["bad"],
                stats["parts"],
                stats["last"],
                protected,
                gaps,
            )
        )
    return spark.createDataFrame(rows, SUMMARY_SCHEMA)


def _gap_counts(spark: SparkSession, settings: Settings) -> dict[str, int]:
    path = tables.system_log_path(settings, INGEST_LOG)
    if not tables.exists(spark, path):
        return {}
    rows = spark.read.format("delta").load(path).where("event = 'gap'").groupBy("subject").count()
    return {r["subject"]: int(r["count"]) for r in rows.collect()}
