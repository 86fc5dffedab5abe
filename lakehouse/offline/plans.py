"""A move's plan: what `realtime_to_offline` replaces, fixed and recorded in
`_system/offline_log` before its first commit, and the recorded plans read back (a resume, a
backfill's put-back asking whether a move replaced a bucket)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from lakehouse.core.settings import Settings
from lakehouse.offline import audit, buckets, store
from lakehouse.offline.store import BUCKET

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB = "realtime_to_offline"


@dataclass
class Plan:
    """One move, fixed before its first commit (JSON-able: it is recorded)."""

    n: int
    realtime_version: int
    range_start: str | None  # the boundary it starts from (None: from the first bucket)
    range_end: str  # the end of the newest closed bucket
    late: list[str] = field(default_factory=list)  # moved buckets to move again
    # The gaps of backfills committed since the last move planned (`guard.gaps_committed`).
    regap: list[str] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)  # owned bucket -> late changes
    # The offline version, then the backfilled buckets, read when planning (None in plans
    # recorded before these were: they are read again when the plan runs).
    offline_version: int | None = None
    owned: list[str] | None = None
    # `offline_version` again, in plans whose `owned` holds every committed backfill's buckets
    # (`audit.OWNED_THROUGH`; not in older plans, whose unrecorded runs could own nothing).
    owned_through: int | None = None

    @property
    def replaces_buckets(self) -> bool:
        """False when only the realtime version read moves on (new changes, none of them
        late, no bucket closed since): the offline table gets no commit."""
        new_range = self.range_start is None or self.range_end > self.range_start
        return new_range or bool(self.late) or bool(self.regap)

    def replaces(self, bucket: datetime, owned: set[datetime]) -> bool:
        """Whether the plan replaces `bucket` (`buckets_sql`, in Python)."""
        start = at(self.range_start) if self.range_start else None
        new = (start is None or bucket >= start) and bucket < at(self.range_end)
        again = bucket.isoformat() in self.late or bucket.isoformat() in self.regap
        return (new or again) and bucket not in owned

    def buckets_sql(self, owned: set[datetime]) -> str:
        """The buckets this plan replaces, minus those a backfill owns."""
        parts = [f"{BUCKET} < {buckets.timestamp_sql(at(self.range_end))}"]
        if self.range_start:
            parts.insert(0, f"{BUCKET} >= {buckets.timestamp_sql(at(self.range_start))}")
        new = " AND ".join(parts)
        late = store.bucket_predicate_sql([at(b) for b in [*self.late, *self.regap]])
        keep = store.bucket_predicate_sql(sorted(owned))
        return f"(({new}) OR {late}) AND NOT ({keep})"


def progress(
    spark: SparkSession, settings: Settings, table: str
) -> tuple[Plan | None, dict[str, Any] | None]:
    """(an unfinished plan, the last finished move)."""
    events = audit.move_events(spark, settings, table)
    done = next((e for e in reversed(events) if e["event"] == audit.MOVED), None)
    planned = next((e for e in reversed(events) if e["event"] == audit.MOVE_PLANNED), None)
    if planned is not None and (done is None or planned["n"] > done["n"]):
        return plan_of(planned), done
    return None, done


def plan_of(event: dict[str, Any]) -> Plan:
    """A recorded plan (older records lack the newer fields)."""
    return Plan(**{k: event[k] for k in Plan.__dataclass_fields__ if k in event})


def app_id(table: str) -> str:
    """The Delta transaction app id of a move's offline commits (its version: the plan's n)."""
    return f"{JOB}:{table}"


def plan_replaces(
    spark: SparkSession, settings: Settings, table: str
) -> Callable[[int, datetime], bool]:
    """`(n, bucket)` -> whether move plan n replaced the bucket; the plans are read on the
    first call only (a backfill asks only when a move committed while it ran)."""

    @cache
    def plans() -> dict[int, Plan]:
        events = audit.move_events(spark, settings, table)
        return {int(e["n"]): plan_of(e) for e in events if e["event"] == audit.MOVE_PLANNED}

    def replaces(n: int, bucket: datetime) -> bool:
        plan = plans().get(n)
        return plan is not None and plan.replaces(bucket, {at(b) for b in plan.owned or []})

    return replaces


def planned_at(done: dict[str, Any] | None) -> int | None:
    """The offline version the last finished move planned at; None before any move. Records
    older than that field give the version after the move, so a backfill committed during
    such a move keeps its gap until one of its buckets changes (once, at the upgrade)."""
    if done is None:
        return None
    version = done.get("planned_offline_version")
    return int(version if version is not None else done["offline_version"])


def at(iso: str) -> datetime:
    """A recorded instant (plans keep them as ISO strings)."""
    return datetime.fromisoformat(iso)
