"""What a gold table reads: a silver table, or a hybrid view (offline before the boundary,
realtime from it on), at a pinned state, and the rows that changed between two states.

A state is the set of versions one read pins: `{"silver": v}` for a silver source;
`{"offline": vo, "realtime": vr, "boundary_seq": s, "boundary": iso}` for a hybrid one. Between
two states, a group may have changed only if one of its rows changed in a table's Change Data
Feed (pre- and post-images: a row that moved to another group touches both), or if the boundary
moved and the row switched sides (its offline and realtime versions may differ, e.g. after a
backfill). Those rows' groups are the ones to recompute.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakehouse.core import current, tables
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.core.specs import GoldTableSettings
from lakehouse.offline import buckets, hybrid, store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class Source:
    kind: str  # silver | hybrid
    name: str  # the silver table, or the offline table behind the hybrid view

    def describe(self) -> str:
        return (
            f"silver.{self.name}"
            if self.kind == "silver"
            else f"hybrid view of offline.{self.name}"
        )


def resolve(settings: Settings, gold: GoldTableSettings) -> Source:
    if gold.source in settings.silver:
        return Source("silver", gold.source)
    views = settings.hybrid_views()
    if gold.source in views:
        return Source("hybrid", views[gold.source])
    raise SettingsError(f"gold source {gold.source!r}: no such silver table or hybrid view")


State = dict[str, Any]


def pin(spark: SparkSession, settings: Settings, source: Source) -> State:
    """The source's current state (for a hybrid view: boundary first, as its readers do)."""
    if source.kind == "silver":
        path = required_path(settings, source)
        if not tables.exists(spark, path):
            raise SettingsError(
                f"silver.{source.name} does not exist yet; run refine_silver --table {source.name}"
            )
        return {"silver": tables.latest_version(spark, path)}
    view = hybrid.state(spark, settings, source.name)
    return {
        "offline": view.offline_version,
        "realtime": view.realtime_version,
        "boundary_seq": view.boundary_seq,
        "boundary": view.boundary.isoformat() if view.boundary else None,
    }


def commits(
    spark: SparkSession, settings: Settings, source: Source, state: State
) -> dict[str, str | None]:
    """Which commit each of the state's versions is (Delta's `txnId`, else its timestamp;
    None when its log file is gone): a table rebuilt since (a full refresh starts its versions
    over) has other commits at the same versions, and its change feed is another table's."""
    return {
        key: _commit_id(spark, path, state[key])
        for key, path, _name in _tables(settings, source)
        if state.get(key) is not None
    }


def replaced(
    spark: SparkSession,
    settings: Settings,
    source: Source,
    state: State,
    recorded: dict[str, str | None],
) -> str | None:
    """The name of the first of the source's tables that is not the one a build of `state`
    read (its commit there is not the `recorded` one), or None."""
    now = commits(spark, settings, source, state)
    for key, _path, name in _tables(settings, source):
        if key in now and (now[key] is None or now[key] != recorded.get(key)):
            return name
    return None


def required_path(settings: Settings, source: Source) -> str:
    """The table a source cannot be read without: the silver table, or a hybrid view's
    realtime one (its offline table comes with the first move)."""
    return _tables(settings, source)[0][1]


def _tables(settings: Settings, source: Source) -> list[tuple[str, str, str]]:
    """(state key, path, name) of each table the source reads, the required one first."""
    if source.kind == "silver":
        name = f"silver.{source.name}"
        return [("silver", tables.table_path(settings, name), name)]
    spec = settings.offline_table(source.name)
    return [
        ("realtime", store.realtime_path(settings, spec), f"silver.{spec.realtime}"),
        ("offline", store.offline_path(settings, source.name), f"offline.{source.name}"),
    ]


def _commit_id(spark: SparkSession, path: str, version: int) -> str | None:
    info = tables.commit_info(spark, path, version)
    return None if info is None else str(info.get("txnId") or info.get("timestamp"))


def rows(spark: SparkSession, settings: Settings, source: Source, state: State) -> DataFrame:
    """The source's current rows at `state`."""
    if source.kind == "silver":
        path = tables.table_path(settings, f"silver.{source.name}")
        frame = spark.read.format("delta").option("versionAsOf", state["silver"]).load(path)
        return current.current_rows(frame)
    return hybrid.at(
        spark,
        settings,
        source.name,
        _instant(state["boundary"]),
        state["boundary_seq"],
        state["offline"],
        state["realtime"],
    ).frame(spark)


def changed(
    spark: SparkSession, settings: Settings, source: Source, since: State, state: State
) -> list[DataFrame]:
    """Frames of rows (any columns of the source's rows) whose groups may differ between the
    two states."""
    if source.kind == "silver":
        path = tables.table_path(settings, f"silver.{source.name}")
        return [_feed(spark, path, since["silver"], state["silver"])]
    spec = settings.offline_table(source.name)
    off_path = store.offline_path(settings, source.name)
    rt_path = store.realtime_path(settings, spec)
    frames = [_feed(spark, rt_path, since["realtime"], state["realtime"])]
    if state["offline"] is not None:
        frames.append(_feed(spark, off_path, since["offline"] or -1, state["offline"]))
    before, after = _instant(since["boundary"]), _instant(state["boundary"])
    if before != after:
        frames += _switched(spark, settings, source.name, state, before, after)
    return frames


def images(
    spark: SparkSession, settings: Settings, source: Source, since: State, state: State
) -> DataFrame | None:
    """The rows that entered (`_lh_w` 1) or left (-1) the source between the two states: the
    Change Data Feed's images of the rows it serves (`lakehouse.gold.patch`). None when the
    hybrid view's boundary moved in between (rows changed sides: recomputed)."""
    if source.kind == "silver":
        path = tables.table_path(settings, f"silver.{source.name}")
        return _weighted(_changes(spark, path, since["silver"], state["silver"]))
    if (since["boundary"], since["boundary_seq"]) != (state["boundary"], state["boundary_seq"]):
        return None
    spec = settings.offline_table(source.name)
    rt_path = store.realtime_path(settings, spec)
    realtime = _changes(spark, rt_path, since["realtime"], state["realtime"])
    boundary = _instant(state["boundary"])
    if boundary is None:  # nothing moved yet: the view is the realtime table
        return _weighted(realtime)
    kind = realtime.schema[spec.time_column].dataType
    served = realtime.where(
        buckets.not_before_sql(spec.time_column, spec.time_format, kind, boundary)
    )
    frames = [_weighted(served)]
    if since["offline"] != state["offline"]:
        off_path = store.offline_path(settings, source.name)
        offline = _changes(spark, off_path, since["offline"], state["offline"])
        offline = offline.where(f"{store.BUCKET} < {buckets.timestamp_sql(boundary)}")
        weighted = _weighted(offline)
        present = set(weighted.columns)
        frames.append(weighted.selectExpr(*hybrid.view_columns(frames[0].schema, present)))
    return frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])


def _changes(spark: SparkSession, path: str, since: int, until: int) -> DataFrame:
    """The change feed of versions (since, until], with its columns when there is none."""
    if since >= until:
        return tables.change_feed(spark, path, until - 1, until).limit(0)
    return tables.change_feed(spark, path, since, until)


def _weighted(feed: DataFrame) -> DataFrame:
    """A change feed's images of current rows, `_lh_w` 1 for a post-image, -1 for a pre-image."""
    from pyspark.sql import functions as F

    from lakehouse.gold.patch import WEIGHT

    kind = F.col("_change_type")
    weight = F.when(kind.isin("insert", "update_postimage"), 1).when(
        kind.isin("delete", "update_preimage"), -1
    )
    rows = current.current_rows(feed).withColumn(WEIGHT, weight)
    return rows.drop(*tables.CDF_COLUMNS)


def _feed(spark: SparkSession, path: str, since: int, until: int) -> DataFrame:
    """Every image (pre and post) of the changes in versions (since, until]."""
    return _changes(spark, path, since, until).drop(*tables.CDF_COLUMNS)


def _switched(
    spark: SparkSession,
    settings: Settings,
    table: str,
    state: State,
    before: datetime | None,
    after: datetime | None,
) -> list[DataFrame]:
    """The rows that changed sides when the boundary moved from `before` to `after`: both
    tables' rows between the two (None: from the beginning of time)."""
    from pyspark.sql import functions as F

    spec = settings.offline_table(table)
    edges = [b for b in (before, after) if b is not None]
    low = None if before is None or after is None else min(edges)
    high = max(edges)
    time = buckets.event_time(spec.time_column, spec.time_format)
    in_range = time < F.lit(high)
    if low is not None:
        in_range = in_range & (time >= F.lit(low))
    realtime = current.current_rows(
        spark.read.format("delta")
        .option("versionAsOf", state["realtime"])
        .load(store.realtime_path(settings, spec))
    ).where(in_range)
    frames = [realtime]
    if state["offline"] is not None:
        offline = (
            spark.read.format("delta")
            .option("versionAsOf", state["offline"])
            .load(store.offline_path(settings, table))
        )
        frames.append(offline.where(in_range).drop(store.BUCKET))
    return frames


def source_version_lag(
    spark: SparkSession, settings: Settings, source: Source, state: State
) -> int:
    """How many commits that change rows the source's tables have made since `state`
    (0: up to date; see `pending`)."""
    return pending(spark, settings, source, state, pin(spark, settings, source))


# Beyond this many new commits of a table, `pending` counts them all rather than reading
# each one's log entry (a build is due anyway).
SCAN = 100


def pending(
    spark: SparkSession, settings: Settings, source: Source, since: State, now: State
) -> int:
    """How many of the source's commits between the two states can change its rows: every
    commit of its tables but a compaction or a VACUUM (`tables.changes_data`: the change feed
    carries nothing for them), plus the hybrid view's boundary moves. 0: a build of `now`
    would write what the build of `since` wrote."""
    count = 0
    for key, path, _name in _tables(settings, source):
        before, last = since.get(key), now.get(key)
        first = 0 if before is None else before + 1
        if last is None or last < first:
            continue
        if last - first >= SCAN:
            count += last - first + 1
            continue
        count += sum(tables.changes_data(spark, path, v) for v in range(first, last + 1))
    if source.kind == "hybrid":
        count += max(0, (now.get("boundary_seq") or 0) - (since.get("boundary_seq") or 0))
    return count


def _instant(iso: str | None) -> datetime | None:
    return datetime.fromisoformat(iso) if iso else None
