"""`build_gold`: a gold table kept equal to a full recompute of its source, incrementally.

A run pins the source's state, reads what changed since the state the previous run built
(`lakehouse.gold.source`), brings exactly the touched groups up to date (patched from the
change feed's images when the aggregates allow it, `lakehouse.gold.patch`, else recomputed
from the source's rows at the pinned state), checks them against the table's expectations, and
MERGEs them into gold: a group with rows is inserted or updated, one without is deleted. The
first run, `--full-refresh`, a change feed that is no longer there, a changed definition and a
source table rebuilt since the last build rebuild the table from the source.

Idempotent, and its own bookkeeping: a run is ONE commit to the gold table (a MERGE, or an
overwrite when it rebuilds) that carries, as the commit's user metadata, the run's number, the
table's build id, the source state it built (versions, and which commits they were) and the
definition's fingerprint, and the Delta transaction (build id, number).
The next run reads that state back from the gold table's log (a file read, no Spark job); a
crash before the commit leaves nothing behind, one after it leaves a finished run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lakehouse.core import compaction, faults, fs, system, tables
from lakehouse.core.columns import named
from lakehouse.core.jobs import base_parser
from lakehouse.core.settings import Settings
from lakehouse.core.spark import runtime_conf
from lakehouse.core.specs import GoldTableSettings, parse_duration
from lakehouse.core.streaming import check_trigger, repeat
from lakehouse.gold import aggregate, checks, patch, source
from lakehouse.gold.source import Source, State

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

JOB = "build_gold"
CHANGED = "its definition in conf/*/gold.yml changed since the last build"
PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}


@dataclass(frozen=True)
class GoldOptions:
    table: str
    trigger: str = "available-now"
    full_refresh: bool = False


def gold_parser() -> argparse.ArgumentParser:
    parser = base_parser(JOB, "silver or hybrid view -> gold table (groups recomputed)")
    parser.add_argument("--table", required=True, help="a gold table from conf/*/gold.yml")
    parser.add_argument(
        "--full-refresh", action="store_true", help="rebuild the gold table from its source"
    )
    return parser


def options_from_args(args: argparse.Namespace) -> GoldOptions:
    return GoldOptions(args.table, args.trigger, args.full_refresh)


@dataclass
class Plan:
    n: int
    run_id: str
    since: State | None  # None: build the whole table
    until: State
    definition: str  # `definition(gold)` of the build
    commits: dict[str, str | None]  # `source.commits` of `until`


@dataclass
class GoldResult:
    table: str
    plan: Plan | None = None
    groups: int = 0  # gold rows the run inserted, updated or deleted
    how: str = ""  # an incremental run's groups: patched | recomputed
    counts: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        if self.plan is None:
            return f"gold.{self.table}: up to date"
        kind = "rebuilt" if self.plan.since is None else "incremental"
        how = f" {self.how} and" if self.how else ""
        return (
            f"gold.{self.table}: {kind} run {self.plan.n}: {self.groups} group row(s){how} "
            f"written or deleted; source state {self.plan.until}"
        )


def gold_path(settings: Settings, name: str) -> str:
    return tables.table_path(settings, f"gold.{name}")


def run(spark: SparkSession, settings: Settings, options: GoldOptions) -> None:
    """The job: one build (available-now) or one every trigger interval (continuous; only
    its first run honours --full-refresh)."""
    check_trigger(options.trigger)
    gold = settings.gold_table(options.table)
    pending = [options]

    def once() -> None:
        print(build_gold(spark, settings, pending[0]).describe(), flush=True)
        pending[0] = replace(options, full_refresh=False)

    repeat(once, options.trigger, parse_duration(gold.trigger_interval))


def build_gold(spark: SparkSession, settings: Settings, options: GoldOptions) -> GoldResult:
    gold = settings.gold_table(options.table)
    src = source.resolve(settings, gold)
    state = source.pin(spark, settings, src)
    sample = source.rows(spark, settings, src, state)
    aggregate.check_sql(sample.limit(0), gold, options.table)  # before anything is written
    path = gold_path(settings, options.table)
    if options.full_refresh:
        full_refresh(spark, settings, options.table)
    result = GoldResult(options.table)
    last = last_build(spark, path)
    shape = definition(gold)
    stale = None if last is None else _stale(spark, settings, src, last, shape)
    if stale:
        # Rebuilt in place: readers keep the old rows until the rebuild's one commit replaces
        # them (a dropped table served nothing meanwhile, nor after a crash before the commit),
        # and the table's history and change feed go on.
        log.warning("gold.%s: %s; rebuilding", options.table, stale)
        _record_refresh(spark, settings, options.table, stale)
        last = None
    read = source.commits(spark, settings, src, state)
    if last is None:  # a new table, or one whose last build left no trace: build it all
        tables.create_table(
            spark, path, aggregate.aggregate(sample.limit(0), gold).schema, PROPERTIES
        )
        plan = Plan(1, _new_run_id(spark, path, shape), None, state, shape, read)
    elif last["until"] == state or not source.pending(spark, settings, src, last["until"], state):
        return result  # nothing new, or only compactions of the source
    else:
        plan = Plan(int(last["n"]) + 1, str(last["run_id"]), last["until"], state, shape, read)
    result.plan = plan
    _execute(spark, settings, options.table, gold, src, plan, result)
    return result


def _new_run_id(spark: SparkSession, path: str, shape: str) -> str:
    """A first build's or a rebuild's run id. Its metrics and quarantined rows are written
    under the run's transaction before its commit, so the rerun of a run stopped in between
    must be the same run: the id follows from the table (its Delta id), its last change before
    the build's commit (a compaction in between changes nothing) and the definition, which that
    rerun finds unchanged; a later rebuild, or a table dropped (--full-refresh) and created
    again, gets another."""
    key = f"{tables.table_id(spark, path)}:{tables.last_change_version(spark, path)}:{shape}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _stale(
    spark: SparkSession,
    settings: Settings,
    src: Source,
    last: dict[str, Any],
    shape: str,
) -> str | None:
    """Why the gold table must be rebuilt rather than brought up to date, or None. Its
    untouched groups would keep the old definition's values; a source table rebuilt since the
    last build has another change feed. (A build that recorded neither predates the checks.)"""
    if last.get("definition") != shape:
        return CHANGED
    gone = source.replaced(spark, settings, src, last["until"], last.get("commits") or {})
    return None if gone is None else f"{gone} is not the table the last build read (rebuilt since)"


def definition(gold: GoldTableSettings) -> str:
    """A fingerprint of what decides a gold table's rows: its source, groups, aggregates and
    the expectations that keep groups out (drop, quarantine). Recorded with every build."""
    shaping = [
        (e.name, e.sql, e.action) for e in gold.expectations if e.action in ("drop", "quarantine")
    ]
    text = json.dumps(
        [gold.source, gold.group_by, gold.aggregates, shaping], sort_keys=True, default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def rows_changed(metrics: dict[str, Any]) -> int:
    """Gold rows a build's commit inserted, updated or deleted (a MERGE), or wrote (a rebuild),
    from the commit's operation metrics."""
    merge = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
    if any(k in metrics for k in merge):
        return sum(int(metrics.get(k, 0)) for k in merge)
    return int(metrics.get("numOutputRows", 0))


def last_build(spark: SparkSession, path: str, look_back: int = 50) -> dict[str, Any] | None:
    """The newest build recorded in the gold table's log: {n, run_id, until, at}, or None."""
    if not tables.exists(spark, path):
        return None
    version = tables.latest_version(spark, path)
    for v in range(version, max(-1, version - look_back), -1):
        info = tables.commit_info(spark, path, v)
        if info is None:
            return None
        try:
            metadata = json.loads(info.get("userMetadata") or "{}")
        except ValueError:
            continue
        if JOB in metadata:
            return {
                **metadata[JOB],
                "at": info.get("timestamp"),
                "version": v,
                "metrics": info.get("operationMetrics", {}),
            }
    return None


def full_refresh(spark: SparkSession, settings: Settings, name: str, reason: str = "") -> None:
    """Drop the gold table (it is derived: the next run rebuilds it from its source); the
    refresh is recorded in `_system/gold_log` (with `reason` when it was not asked for), the
    metrics keep their history."""
    fs.delete(spark, gold_path(settings, name))
    _record_refresh(spark, settings, name, reason)


def _record_refresh(spark: SparkSession, settings: Settings, name: str, reason: str) -> None:
    record = {"event": "full_refresh", "subject": f"gold.{name}"}
    system.append_log(
        spark, settings, system.GOLD_LOG, {**record, **({"reason": reason} if reason else {})}
    )


def _execute(
    spark: SparkSession,
    settings: Settings,
    name: str,
    gold: GoldTableSettings,
    src: Source,
    plan: Plan,
    result: GoldResult,
) -> None:
    rows = source.rows(spark, settings, src, plan.until)
    touched = _touched(_Run(spark, settings, name, gold, src, plan, rows))
    keys = None if touched is None else touched.keys
    result.how = "" if touched is None else touched.how
    recomputed = aggregate.aggregate(rows, gold) if touched is None else touched.values
    checked = checks.apply(spark, settings, name, gold, recomputed, plan)
    path = gold_path(settings, name)
    app_id = f"{JOB}:{name}:{plan.run_id}"
    checks.record(spark, settings, name, plan, checked, app_id)  # same transaction id: once
    faults.point("before_gold_commit")
    marker = json.dumps(
        {
            JOB: {
                "n": plan.n,
                "run_id": plan.run_id,
                "until": plan.until,
                "definition": plan.definition,
                "commits": plan.commits,
            }
        }
    )
    with runtime_conf(spark, tables.user_metadata_conf(marker)):
        if keys is None:
            tables.overwrite_once(checked.kept, path, app_id, plan.n)  # its schema too
        else:
            changes = aggregate.merge_source(keys, checked.kept, gold)
            _merge(spark, path, gold, changes, app_id, plan.n)
    faults.point("after_gold_commit")
    if touched is not None:
        touched.cached.unpersist()
    built = last_build(spark, path) or {}
    compaction.compact_when_due(spark, path, settings.storage.compact_every)
    metrics = built.get("metrics", {})
    result.groups = rows_changed(metrics)
    result.counts = checked.counts


@dataclass
class Touched:
    keys: DataFrame  # the groups the source's changes touched
    values: DataFrame  # their new gold rows (those that still have rows)
    cached: DataFrame  # persisted for the run
    how: str  # patched | recomputed


@dataclass(frozen=True)
class _Run:
    """What an incremental run's steps read: the table, its source and the rows the source
    serves at the pinned state."""

    spark: SparkSession
    settings: Settings
    name: str
    gold: GoldTableSettings
    src: Source
    plan: Plan
    rows: DataFrame


def _touched(run: _Run) -> Touched | None:
    """The groups the source's changes since the last build touched and their new rows,
    patched (`lakehouse.gold.patch`) or recomputed from the source's rows; None to rebuild:
    the first build, or a change feed that is gone."""
    if run.plan.since is None:
        return None
    try:
        return _patched(run) or _recomputed(run)
    except Exception as exc:
        if "changeDataFeed" not in str(exc) and "VersionNotFound" not in str(exc):
            raise
        log.warning("gold.%s: change feed unavailable (%s); rebuilding", run.name, exc)
        return None


def _recomputed(run: _Run) -> Touched:
    since, gold = run.plan.since, run.gold
    assert since is not None
    changed = source.changed(run.spark, run.settings, run.src, since, run.plan.until)
    keys = aggregate.group_keys(changed, gold).persist()
    keys.count()
    values = aggregate.aggregate(aggregate.in_groups(run.rows, keys, gold), gold)
    return Touched(keys, values, keys, "recomputed")


def _patched(run: _Run) -> Touched | None:
    """The touched groups patched from the old gold rows, the ones a patch cannot tell
    recomputed; None when the table's aggregates or source cannot be patched."""
    from pyspark.sql import functions as F

    spark, gold, since = run.spark, run.gold, run.plan.since
    assert since is not None
    found = patch.terms(gold, run.rows.limit(0))
    images = (
        None
        if found is None
        else source.images(spark, run.settings, run.src, since, run.plan.until)
    )
    if found is None or images is None:
        return None
    path = gold_path(run.settings, run.name)  # pinned: the MERGE changes it while cached
    version = tables.latest_version(spark, path)
    old = spark.read.format("delta").option("versionAsOf", version).load(path)
    types = {f.name: f.dataType for f in old.schema.fields}
    values = patch.patched(patch.deltas(images, gold, found), old, gold, found, types).persist()
    groups = [named(n) for n in gold.group_by]
    unsure = values.where(F.col(patch.AMBIGUOUS)).select(*groups)
    sure = values.where(~F.col(patch.AMBIGUOUS) & F.col(aggregate.PRESENT))
    sure = sure.select(*groups, *[named(n) for n in gold.aggregates])
    if not unsure.isEmpty():
        recomputed = aggregate.aggregate(aggregate.in_groups(run.rows, unsure, gold), gold)
        sure = sure.unionByName(recomputed)
    return Touched(values.select(*groups), sure, values, "patched")


def _merge(
    spark: SparkSession,
    path: str,
    gold: GoldTableSettings,
    changes: DataFrame,
    app_id: str,
    version: int,
) -> None:
    from delta.tables import DeltaTable

    present = f"s.{aggregate.PRESENT}"
    values: dict[str, str | Column] = {
        f"`{n}`": f"s.`{n}`" for n in [*gold.group_by, *gold.aggregates]
    }
    differs = " OR ".join(f"NOT (t.`{n}` <=> s.`{n}`)" for n in gold.aggregates)
    with tables.transaction(spark, app_id, version):
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(changes.alias("s"), aggregate.merge_condition(gold))
            .whenMatchedDelete(condition=f"NOT {present}")
            .whenMatchedUpdate(condition=f"{present} AND ({differs})", set=values)
            .whenNotMatchedInsert(condition=present, values=values)
            .execute()
        )
