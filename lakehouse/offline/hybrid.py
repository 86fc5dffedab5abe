"""The hybrid view of an offline table: corrected history plus fresh data, with no gap and no
duplicate at any instant.

    <view> = offline rows with __bucket < boundary
             UNION ALL realtime current rows with time >= boundary (or a time that cannot be
             read: such a row stays visible rather than silently vanishing)

Buckets are half-open `[start, end)` and the boundary is a bucket edge, so every instant is on
exactly one side. One read pins one consistent state: the boundary is read first, then the
offline and realtime tables at their latest versions. Writers commit offline data before they
move the boundary, so the offline version read is at least the one the boundary was recorded
with: its buckets are all there. A move or a backfill that commits meanwhile is either wholly
seen (its data, and its boundary if that was read) or not at all.

`register_views` makes the tables addressable by name in `spark.sql` and notebooks:
`bronze.orders`, `silver.customers`, `offline.orders_offline`, `gold.daily_revenue`, and each
hybrid view in the realtime table's namespace (`silver.orders_hybrid`), pinned at the state it
was registered at (register again to see newer data).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from lakehouse.core import current, fs, tables
from lakehouse.core.columns import type_ddl
from lakehouse.core.errors import verdict
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.core.specs import OfflineTableSettings
from lakehouse.offline import boundary, buckets
from lakehouse.offline.store import BUCKET, offline_path, realtime_path, row_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

LAYERS = ("bronze", "silver", "gold", "offline")


@dataclass(frozen=True)
class HybridState:
    """One consistent state of a hybrid view: the versions it reads and its SQL."""

    table: str  # the offline table
    view: str
    boundary: datetime | None  # None: nothing offline yet, all realtime
    boundary_seq: int | None
    offline_version: int | None
    realtime_version: int
    sql: str

    def frame(self, spark: SparkSession) -> DataFrame:
        return spark.sql(self.sql)


def resolve(settings: Settings, name: str) -> tuple[str, OfflineTableSettings]:
    """An offline table's name, or its hybrid view's (bare or `silver.`-qualified)."""
    bare = name.split(".", 1)[-1]
    if bare in settings.offline:
        return bare, settings.offline[bare]
    for table, spec in settings.offline.items():
        if spec.view == bare:
            return table, spec
    known = ", ".join(sorted([*settings.offline, *(s.view for s in settings.offline.values())]))
    raise SettingsError(
        f"{name!r}: no offline table or hybrid view of that name in conf/*/offline.yml "
        f"(known: {known or 'none'})"
    )


def state(spark: SparkSession, settings: Settings, name: str) -> HybridState:
    """The hybrid view's current consistent state (boundary first, then the data versions)."""
    table, spec = resolve(settings, name)
    moved = boundary.current(spark, settings, table)  # first: see the module docstring
    rt_path, off_path = realtime_path(settings, spec), offline_path(settings, table)
    if not tables.exists(spark, rt_path):
        raise SettingsError(
            f"{spec.view}: its realtime table silver.{spec.realtime} does not exist yet; run "
            f"refine_silver --table {spec.realtime}"
        )
    offline_version = tables.latest_version(spark, off_path) if moved else None
    realtime_version = tables.latest_version(spark, rt_path)
    return at(
        spark,
        settings,
        table,
        moved.boundary if moved else None,
        moved.seq if moved else None,
        offline_version,
        realtime_version,
    )


def at(
    spark: SparkSession,
    settings: Settings,
    table: str,
    boundary_at: datetime | None,
    boundary_seq: int | None,
    offline_version: int | None,
    realtime_version: int,
) -> HybridState:
    """The hybrid view of offline table `table` at a given state (one `state` pinned earlier:
    gold recomputes groups at exactly the state whose changes it read)."""
    spec = settings.offline_table(table)
    rt_path, off_path = realtime_path(settings, spec), offline_path(settings, table)
    realtime = spark.read.format("delta").option("versionAsOf", realtime_version).load(rt_path)
    parts = [_realtime_sql(spec, rt_path, realtime_version, realtime.schema, boundary_at)]
    if boundary_at is not None and offline_version is not None:
        offline = spark.read.format("delta").option("versionAsOf", offline_version).load(off_path)
        columns = ", ".join(view_columns(row_schema(realtime.schema), set(offline.columns)))
        parts.insert(
            0,
            f"SELECT {columns} FROM delta.`{off_path}` VERSION AS OF {offline_version} "
            f"WHERE {BUCKET} < {buckets.timestamp_sql(boundary_at)}",
        )
    return HybridState(
        table,
        spec.view,
        boundary_at,
        boundary_seq,
        offline_version,
        realtime_version,
        "\nUNION ALL\n".join(parts),
    )


def read_hybrid(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    """The hybrid view `name` (or that of offline table `name`) at one consistent state."""
    return state(spark, settings, name).frame(spark)


def _realtime_sql(
    spec: OfflineTableSettings,
    path: str,
    version: int,
    realtime: StructType,
    boundary_at: datetime | None,
) -> str:
    schema = row_schema(realtime)
    conditions = []
    live = current.live_condition(realtime.fieldNames())
    if live:
        conditions.append(live)
    if boundary_at is not None:
        kind = realtime[spec.time_column].dataType
        conditions.append(
            buckets.not_before_sql(spec.time_column, spec.time_format, kind, boundary_at)
        )
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    columns = ", ".join(view_columns(schema, set(schema.fieldNames())))
    return f"SELECT {columns} FROM delta.`{path}` VERSION AS OF {version}{where}"


def view_columns(schema: StructType, present: set[str]) -> list[str]:
    """The view's columns (SQL) in the realtime row's order; one the offline table does not
    have yet (the realtime table evolved since the last move) reads as null."""
    return [
        f"`{f.name}`"
        if f.name in present
        else f"CAST(NULL AS {type_ddl(f.dataType)}) AS `{f.name}`"
        for f in schema.fields
    ]


def register_views(spark: SparkSession, settings: Settings) -> list[str]:
    """Register every existing table as `layer.table` and every hybrid view as
    `silver.<view>` in the session's catalog; returns the names registered. One that cannot
    be read (a newer Delta's table, a broken log) is skipped with a warning naming it and why:
    the others stay usable."""
    names: list[str] = []
    for layer in LAYERS:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {layer}")
        for table in sorted(fs.list_names(spark, settings.storage.path(layer))):
            location = settings.storage.path(layer, table)
            if table.startswith((".", "_")) or not tables.exists(spark, location):
                continue
            sql = f"CREATE TABLE IF NOT EXISTS {layer}.`{table}` USING delta LOCATION '{location}'"
            names += _registered(f"{layer}.{table}", partial(spark.sql, sql))
    for table, spec in sorted(settings.offline.items()):
        if not tables.exists(spark, realtime_path(settings, spec)):
            continue

        def create(table: str = table, view: str = spec.view) -> None:
            sql = state(spark, settings, table).sql
            spark.sql(f"CREATE OR REPLACE VIEW silver.`{view}` AS {sql}")

        names += _registered(f"silver.{spec.view}", create)
    return names


def _registered(name: str, create: Callable[[], object]) -> list[str]:
    """`[name]` once `create` registered it; `[]` and a warning when it failed."""
    try:
        create()
    except Exception as exc:  # any table's failure: Delta's, the file system's, a bad log
        log.warning("%s not registered: %s", name, verdict(exc)[0])
        return []
    return [name]
