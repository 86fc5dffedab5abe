"""Offline tests build their realtime (silver) table with silver's own SCD1 apply, so the
realtime side is exactly what refine_silver writes, without Kafka."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType, _parse_datatype_string

from lakehouse.core import tables
from lakehouse.core.settings import Settings
from lakehouse.core.specs import OfflineTableSettings, SilverTableSettings, SourceSettings
from lakehouse.offline import store
from lakehouse.silver.changes import OP, SEQ
from lakehouse.silver.plan import SILVER_PROPERTIES
from lakehouse.silver.scd1 import apply_scd1, scd1_schema

ORDER_COLUMNS = (
    "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DECIMAL(12,2), ts BIGINT, "
    "_rescued_data STRING"
)
CHANGES = f"{ORDER_COLUMNS}, {OP} STRING, {SEQ} BIGINT"
T0 = datetime(2026, 1, 1)
H = timedelta(hours=1)
# order_id, customer_id, order_status, amount, ts (epoch ms)
Order = tuple[int, int, str, Decimal, int]


def ms(at: datetime) -> int:
    return (at - datetime(1970, 1, 1)) // timedelta(milliseconds=1)


def order(order_id: int, at: datetime, amount: str = "10.00", customer: int = 1) -> Order:
    return (order_id, customer, "paid", Decimal(amount), ms(at))


def row_schema(columns: str = ORDER_COLUMNS) -> StructType:
    schema = _parse_datatype_string(columns)
    assert isinstance(schema, StructType)
    return schema


def offline_setup(
    spark: SparkSession,
    settings: Settings,
    bucket: str = "2h",
    buffer: str = "1m",
    columns: str = ORDER_COLUMNS,
    encodings: dict[str, str] | None = None,
    **spec: Any,
) -> tuple[str, Settings]:
    """A realtime orders table (upsert by order_id; `columns` its row, with `_rescued_data`)
    and an offline table over it."""
    tag = uuid.uuid4().hex[:8]
    realtime, offline = f"rt_{tag}", f"off_{tag}"
    silver = SilverTableSettings(
        source="unused",
        mode="upsert",
        schema=columns,
        keys=("order_id",),
        sequence_by="ts",
        encodings=encodings or {},
    )
    settings = replace(
        settings,
        sources={**settings.sources, "unused": SourceSettings(kind="events", topics=("unused",))},
        silver={**settings.silver, realtime: silver},
        offline={
            **settings.offline,
            offline: OfflineTableSettings(
                realtime=realtime, time_column="ts", bucket=bucket, buffer=buffer, **spec
            ),
        },
    )
    path = settings.storage.path("silver", realtime)
    tables.create_table(spark, path, scd1_schema(row_schema(columns)), SILVER_PROPERTIES)
    return offline, settings


_seq = iter(range(1, 10**9))


def upsert(spark: SparkSession, settings: Settings, offline: str, orders: list[Order]) -> None:
    """Apply `orders` to the realtime table as refine_silver does (newer position wins)."""
    rows = [(*o, None, "u", next(_seq)) for o in orders]
    apply_scd1(
        spark, realtime_path(settings, offline), spark.createDataFrame(rows, CHANGES), ["order_id"]
    )


def delete(spark: SparkSession, settings: Settings, offline: str, order_ids: list[int]) -> None:
    rows = [(i, None, None, None, None, None, "d", next(_seq)) for i in order_ids]
    apply_scd1(
        spark, realtime_path(settings, offline), spark.createDataFrame(rows, CHANGES), ["order_id"]
    )


def realtime_path(settings: Settings, offline: str) -> str:
    return store.realtime_path(settings, settings.offline_table(offline))


def offline_rows(spark: SparkSession, settings: Settings, offline: str) -> DataFrame:
    return spark.read.format("delta").load(store.offline_path(settings, offline))


def as_rows(orders: list[Order]) -> list[tuple[Any, ...]]:
    return [(*o, None) for o in orders]


def frame(spark: SparkSession, orders: list[Order]) -> DataFrame:
    return spark.createDataFrame(as_rows(orders), ORDER_COLUMNS)
