"""Which time buckets of a realtime table changed between two of its versions (from its
Change Data Feed), for `realtime_to_offline` to move late changes again; live rows whose time
cannot be read are refused, as no bucket can hold them."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from lakehouse.core import current, tables
from lakehouse.core.errors import ContractViolation
from lakehouse.core.specs import OfflineTableSettings
from lakehouse.offline import store
from lakehouse.offline.store import BUCKET

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class UnreadableTimeError(ContractViolation):
    """Live realtime rows whose time cannot be read: no bucket can hold them."""


def changed_buckets(
    spark: SparkSession,
    rt_path: str,
    spec: OfflineTableSettings,
    table: str,
    since: int | None,
    until: int,
) -> dict[datetime, int]:
    """The buckets the realtime changes in versions (since, until] touched, with how many
    changes each (a change touches the buckets of its old and its new time). Refuses live
    rows whose time cannot be read. The first run (since None) checks every live row."""
    if since is None:
        live = current.live_rows(
            spark.read.format("delta").option("versionAsOf", until).load(rt_path)
        )
        refuse_unreadable(store.with_bucket(live, spec), spec, table)
        return {}
    if since >= until:
        return {}
    feed = tables.change_feed(spark, rt_path, since, until)
    images = store.with_bucket(feed, spec)
    post = images.where("_change_type IN ('insert', 'update_postimage')")
    condition = current.live_condition(feed.columns)
    refuse_unreadable(post.where(condition) if condition else post, spec, table)
    counts = (
        images.where(f"_change_type <> 'update_preimage' AND {BUCKET} IS NOT NULL")
        .groupBy(BUCKET)
        .count()
        .collect()
    )
    touched = {r[BUCKET]: int(r["count"]) for r in counts}
    for row in (
        images.where(f"_change_type = 'update_preimage' AND {BUCKET} IS NOT NULL")
        .select(BUCKET)
        .distinct()
        .collect()
    ):
        touched.setdefault(row[BUCKET], 0)  # the old bucket of a row that moved in time
    return touched


def refuse_unreadable(rows: DataFrame, spec: OfflineTableSettings, table: str) -> None:
    bad = rows.where(f"{BUCKET} IS NULL")
    sample = bad.limit(3).collect()
    if sample:
        count = bad.count()
        raise UnreadableTimeError(
            f"offline.{table}: {count} live row(s) of silver.{spec.realtime} have a "
            f"{spec.time_column} that cannot be read as {spec.time_format} (e.g. "
            f"{[r[spec.time_column] for r in sample]}); no bucket can hold them, so nothing "
            f"was moved. Repair them in silver.{spec.realtime}, or stop them with an "
            f"expectation such as `{spec.time_column} IS NOT NULL` (action quarantine)"
        )
