"""Compaction: OPTIMIZE rewrites a table's small files and mostly-deleted ones in a commit
that changes no row, every `storage.compact_every` commits. Silver and gold compact after a
batch (`compact_when_due`); bronze, written by Spark's own Delta sink, between the polls of
its query (`Compactor`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lakehouse.core import tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


def compact_when_due(spark: SparkSession, path: str, every: int) -> int | None:
    """Compact the table when its newest version is a multiple of `every` (0: never): called
    after a write, outside its transaction, so the compaction carries neither the write's
    transaction id nor its user metadata. Returns the compaction's version (see `compact`)."""
    version = tables.latest_version(spark, path)
    if every <= 0 or version == 0 or version % every:
        return None
    return compact(spark, path)


def compact(spark: SparkSession, path: str) -> int | None:
    """OPTIMIZE the table: small files and mostly-deleted ones rewritten, in a commit that
    changes no row, so its change feed and the streams reading it see nothing. Returns the
    compaction's version, or None when it committed nothing (no file needed rewriting) or a
    concurrent writer's commit conflicted with it (the next due version compacts)."""
    from delta.tables import DeltaTable

    version = tables.latest_version(spark, path)
    try:
        done = DeltaTable.forPath(spark, path).optimize().executeCompaction().collect()
    except Exception as exc:
        if not tables.is_write_conflict(exc):
            raise
        log.warning("compaction of %s skipped: a concurrent commit conflicted (%s)", path, exc)
        return None
    if not done or not done[0]["metrics"]["numFilesRemoved"]:
        return None  # nothing to rewrite: OPTIMIZE made no commit
    return _compaction_version(spark, path, version)


def _compaction_version(spark: SparkSession, path: str, before: int) -> int:
    """The version of the OPTIMIZE commit made after `before`: the newest, unless another
    writer committed in between."""
    newest = tables.latest_version(spark, path)
    return _newest_compaction(spark, path, newest, before) or newest


def _newest_compaction(spark: SparkSession, path: str, newest: int, after: int) -> int | None:
    """The newest OPTIMIZE commit in versions (after, newest], from their log files."""
    for version in range(newest, after, -1):
        if (tables.commit_info(spark, path, version) or {}).get("operation") == "OPTIMIZE":
            return version
    return None


class Compactor:
    """Compacts a table a stream appends to once `every` commits followed its last
    compaction, checked between the query's polls (`poll`, in the driver's main thread, while
    the query runs on): a blind append never conflicts with a compaction. The count goes on
    across runs (a scheduled availableNow run writes one commit): the last compaction is
    looked up among the table's last `every` commits. A failed compaction is logged and is
    due again `every` commits later: maintenance must not stop an ingest."""

    def __init__(self, spark: SparkSession, path: str, every: int) -> None:
        self.spark, self.path, self.every = spark, path, every
        self.last = self._last_compaction() if every > 0 else 0
        self.batch: int | None = None  # the query's last batch `poll` looked after

    def _last_compaction(self) -> int:
        """The newest compaction among the last `every` commits, else the version `every`
        commits back: a table that many commits past its last compaction is due now."""
        newest = tables.latest_version(self.spark, self.path)
        back = max(newest - self.every, 0)
        return _newest_compaction(self.spark, self.path, newest, back) or back

    def poll(self, query: StreamingQuery) -> None:
        """Compact if due, looking at the table's log only after `query` reported a batch it
        had not: between its batches nothing was committed, and a look a second at the log
        is ~10 requests a second on an object store."""
        if self.every <= 0:
            return
        progress = query.lastProgress
        batch = progress.batchId if progress is not None else None
        if batch is None or batch == self.batch:
            return
        self.batch = batch
        if tables.latest_version(self.spark, self.path) - self.last < self.every:
            return
        try:
            compact(self.spark, self.path)
        except Exception:
            log.warning("compaction of %s failed (due again in %d commits)", self.path, self.every)
            log.debug("compaction failure", exc_info=True)
        self.last = tables.latest_version(self.spark, self.path)
