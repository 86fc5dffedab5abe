"""Exploring the lakehouse from a notebook: one call gives the session and registers every
table by name, and a few DataFrames worth plotting (expectation pass rates per batch, rows per
layer, Kafka lag per partition). The notebooks in `notebooks/` use these; so can any notebook
on a cluster (nothing here needs the dev stack).

    spark, settings = open_lakehouse()
    spark.table("silver.orders")
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from lakehouse.core import system, tables
from lakehouse.core.settings import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

ENV_VARIABLE = "LAKEHOUSE_ENV"


def open_lakehouse(
    env: str | None = None, app_name: str = "notebook"
) -> tuple[SparkSession, Settings]:
    """The jobs' session and settings (`env`, else `$LAKEHOUSE_ENV`, else `local`), with
    `bronze.*`, `silver.*`, `gold.*`, `offline.*` and the hybrid views registered by name."""
    from lakehouse.core.spark import build_session
    from lakehouse.offline.hybrid import register_views

    settings = load_settings(env or os.environ.get(ENV_VARIABLE, "local"))
    spark = build_session(notebook_settings(settings), app_name)
    names = register_views(spark, settings)
    print(f"{len(names)} tables and views registered: {', '.join(names) or 'none yet'}")
    return spark, settings


def notebook_settings(settings: Settings) -> Settings:
    """`settings` for a notebook's session: a person reads its errors, so PySpark names the
    notebook line of a failing DataFrame call again (the jobs leave it out: it costs every
    call round trips to the JVM, `lakehouse.core.spark`), unless `spark.conf` says otherwise."""
    from lakehouse.core.spark import CALL_SITES

    conf = {CALL_SITES: "true", **settings.spark.conf}
    return replace(settings, spark=replace(settings.spark, conf=conf))


def expectation_pass_rates(spark: SparkSession, settings: Settings) -> DataFrame:
    """Per silver table, batch and rule: when the batch ran and the share of its rows that
    passed (`_system/expectation_metrics`), in batch order."""
    from pyspark.sql import functions as F

    location = system.path(settings, system.METRICS)
    if not tables.exists(spark, location):
        return spark.createDataFrame(
            [], "table string, batch_id long, at timestamp, rule string, pass_rate double"
        )
    metrics = spark.read.format("delta").load(location)
    checked = F.col("passed") + F.col("failed")
    return (
        metrics.where(checked > 0)
        .select(
            "table",
            "batch_id",
            "at",
            "rule",
            (F.col("passed") / checked).alias("pass_rate"),
        )
        .orderBy("table", "at", "batch_id", "rule")
    )


def rows_per_layer(spark: SparkSession, names: list[str] | None = None) -> DataFrame:
    """Rows of every registered table (`layer.table`), per layer and table."""
    if names is None:
        names = [
            f"{t.namespace[0]}.{t.name}"
            for layer in ("bronze", "silver", "offline", "gold")
            if spark.catalog.databaseExists(layer)
            for t in spark.catalog.listTables(layer)
            if t.tableType != "VIEW" and t.namespace
        ]
    rows = [(n.split(".")[0], n.split(".", 1)[1], spark.table(n).count()) for n in sorted(names)]
    return spark.createDataFrame(rows, "layer string, table string, rows long")


def kafka_lag(spark: SparkSession, settings: Settings) -> DataFrame:
    """Per source and topic partition: end offset, the next offset bronze needs and the
    records not yet ingested (`lakehouse status` shows the same)."""
    from lakehouse.status import kafka_summary

    return kafka_summary(spark, settings)
