"""What the next `realtime_to_offline` run would move, for `lakehouse status`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from lakehouse.core import current, tables
from lakehouse.core.settings import Settings
from lakehouse.offline import audit, boundary, buckets, changes, store
from lakehouse.offline.store import BUCKET

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def waiting(
    spark: SparkSession, settings: Settings, table: str, now: datetime
) -> tuple[int | None, int | None]:
    """What the next run would move, as of `now`: (closed buckets from the boundary on that
    hold live realtime rows, realtime changes to moved buckets since the last move that it
    would move again; backfilled buckets' changes are counted, not moved, so not included).
    (None, None) before the realtime table exists; unreadable times are not counted."""
    from pyspark.sql import functions as F

    spec = settings.offline_table(table)
    rt_path = store.realtime_path(settings, spec)
    if not tables.exists(spark, rt_path):
        return None, None
    before = boundary.current(spark, settings, table)
    end = buckets.closed_until(now, spec.bucket_seconds, spec.buffer_seconds)
    live = store.with_bucket(current.live_rows(spark.read.format("delta").load(rt_path)), spec)
    closed = live.where(
        F.col(BUCKET) <= F.lit(end) - F.expr(f"INTERVAL {spec.bucket_seconds} SECONDS")
    )
    if before is not None:
        closed = closed.where(F.col(BUCKET) >= F.lit(before.boundary))
    closed_buckets = closed.select(BUCKET).distinct().count()
    log = audit.read_offline_log(spark, settings, table)  # once: `owned_buckets` reads it too
    events = audit.moves(log.events)
    done = next((e for e in reversed(events) if e["event"] == audit.MOVED), None)
    if before is None or done is None:
        return closed_buckets, 0
    version = tables.latest_version(spark, rt_path)
    try:
        changed = changes.changed_buckets(
            spark, rt_path, spec, table, int(done["realtime_version"]), version
        )
    except changes.UnreadableTimeError:
        return closed_buckets, None  # the next run refuses them; status does not
    owned = audit.owned_buckets(spark, settings, table, spec.bucket_seconds, log=log)
    late = sum(n for b, n in changed.items() if b < before.boundary and b not in owned)
    return closed_buckets, late
