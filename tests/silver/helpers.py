"""Shared helpers for the silver tests: per-test silver tables over per-test bronze sources."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lakehouse.core import kafka
from lakehouse.core.settings import Settings
from lakehouse.core.specs import ExpectationSettings, SilverTableSettings
from lakehouse.silver.refine import RefineOptions, RefineResult, refine
from tests.bronze.helpers import new_source, run_ingest

ORDER_SCHEMA = "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DOUBLE, ts BIGINT"


def rule(
    name: str, action: str, sql: str = "", expect: str = "", **kwargs: Any
) -> ExpectationSettings:
    return ExpectationSettings(name, action, sql, expect, kwargs)


def with_silver(settings: Settings, source: str, **fields: Any) -> tuple[str, Settings]:
    """A silver table named after a fresh id, fed by `source`, added to a copy of `settings`."""
    name = f"s{uuid.uuid4().hex[:10]}"
    table = SilverTableSettings(source=source, **fields)
    return name, replace(settings, silver={**settings.silver, name: table})


def events_pipeline(
    spark: SparkSession, settings: Settings, events: list[object], **silver: Any
) -> tuple[str, str, str, Settings]:
    """A topic holding `events` (dicts become JSON, bytes are sent as is), ingested into
    bronze; returns (source, topic, silver table, settings)."""
    source, topic, settings = new_source(settings)
    produce(settings, topic, events)
    run_ingest(spark, settings, source)
    name, settings = with_silver(settings, source, **silver)
    return source, topic, name, settings


def produce(settings: Settings, topic: str, events: list[object]) -> None:
    records: list[tuple[bytes | None, bytes | None, int | None]] = [
        (None, e if isinstance(e, bytes) else json.dumps(e).encode(), 0) for e in events
    ]
    kafka.produce(settings.kafka, topic, records)


def run_refine(spark: SparkSession, settings: Settings, name: str, **options: Any) -> RefineResult:
    return refine(spark, settings, RefineOptions(name, **options))


def silver_table(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    return spark.read.format("delta").load(settings.storage.path("silver", name))


def current(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    """What a reader sees in a keyed silver table: live rows, no bookkeeping columns."""
    table = silver_table(spark, settings, name)
    if "__deleted" in table.columns:
        table = table.where("NOT __deleted")
    if "__end_seq" in table.columns:
        table = table.where("__end_seq IS NULL")
    return table.drop(*[c for c in table.columns if c.startswith("__")])


def quarantine(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    path = settings.storage.path("_system", "quarantine")
    return spark.read.format("delta").load(path).where(f"`table` = '{name}'")


def metrics(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    path = settings.storage.path("_system", "expectation_metrics")
    return spark.read.format("delta").load(path).where(f"`table` = '{name}'")
