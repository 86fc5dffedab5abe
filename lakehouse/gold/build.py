"""`build_gold`: a gold table kept equal to a full recompute of its source, incrementally.

A run pins the source's state, reads what changed since the state the previous run built
(`lakehouse.gold.source`), recomputes exactly the touched groups from the source's rows at the
pinned state, checks them against the table's expectations, and MERGEs them into gold: a group
with rows is inserted or updated, one without is deleted. The first run, `--full-refresh`, or a
change feed that is no longer there rebuilds the table from the source.

Idempotent: each run is planned in `_system/gold_log` (the states from and to) before its
commit, and the commit carries the plan's number as its Delta transaction, so a re-run after a
crash finishes the same plan and commits nothing twice.
"""

from __future__ import annotations

import argparse
import logging
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lakehouse.core import faults, fs, system, tables
from lakehouse.core.jobs import base_parser
from lakehouse.core.settings import Settings
from lakehouse.core.specs import GoldTableSettings, parse_duration
from lakehouse.core.streaming import check_trigger, repeat
from lakehouse.gold import aggregate, checks, source
from lakehouse.gold.source import Source, State

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

JOB = "build_gold"
RUN_ID = "lakehouse.run_id"  # table property: a new id per (re)build
PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}
PLANNED, BUILT = "build_planned", "built"


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


@dataclass
class GoldResult:
    table: str
    plan: Plan | None = None
    groups: int = 0  # groups recomputed (upserted or deleted)
    resumed: bool = False
    counts: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        if self.plan is None:
            return f"gold.{self.table}: up to date"
        kind = "rebuilt" if self.plan.since is None else "incremental"
        return (
            f"gold.{self.table}: {'resumed ' if self.resumed else ''}{kind} run "
            f"{self.plan.n}: {self.groups} group(s) recomputed; source state {self.plan.until}"
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
    run_id = _ensure_table(spark, path, aggregate.aggregate(sample.limit(0), gold).schema)
    result = GoldResult(options.table)
    pending, done = _progress(spark, settings, options.table, run_id)
    if pending is not None:
        plan, result.resumed = pending, True
    else:
        since = done["until"] if done else None
        if since == state:
            return result
        plan = Plan(int(done["n"]) + 1 if done else 1, run_id, since, state)
        _record(spark, settings, PLANNED, options.table, asdict(plan))
    result.plan = plan
    _execute(spark, settings, options.table, gold, src, plan, result)
    return result


def _ensure_table(spark: SparkSession, path: str, schema: Any) -> str:
    if not tables.exists(spark, path):
        tables.create_table(spark, path, schema, {**PROPERTIES, RUN_ID: uuid.uuid4().hex[:12]})
    return tables.properties(spark, path).get(RUN_ID, "0")


def full_refresh(spark: SparkSession, settings: Settings, name: str) -> None:
    """Drop the gold table (it is derived: the next run rebuilds it from its source); its log
    and metrics keep their history."""
    fs.delete(spark, gold_path(settings, name))
    system.append_log(
        spark, settings, system.GOLD_LOG, {"event": "full_refresh", "subject": f"gold.{name}"}
    )


def _progress(
    spark: SparkSession, settings: Settings, name: str, run_id: str
) -> tuple[Plan | None, dict[str, Any] | None]:
    events = [
        e
        for e in system.read_log(spark, settings, system.GOLD_LOG, f"gold.{name}")
        if e["event"] in (PLANNED, BUILT) and e.get("run_id") == run_id
    ]
    done = next((e for e in reversed(events) if e["event"] == BUILT), None)
    planned = next((e for e in reversed(events) if e["event"] == PLANNED), None)
    if planned is not None and (done is None or planned["n"] > done["n"]):
        return Plan(**{k: planned[k] for k in Plan.__dataclass_fields__}), done
    return None, done


def _record(
    spark: SparkSession, settings: Settings, event: str, name: str, details: dict[str, Any]
) -> None:
    system.append_log(
        spark, settings, system.GOLD_LOG, {"event": event, "subject": f"gold.{name}", **details}
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
    keys: DataFrame | None = None
    if plan.since is not None:
        try:
            keys = aggregate.group_keys(
                source.changed(spark, settings, src, plan.since, plan.until), gold
            ).persist()
            keys.count()
        except Exception as exc:
            if "changeDataFeed" not in str(exc) and "VersionNotFound" not in str(exc):
                raise
            log.warning("gold.%s: change feed unavailable (%s); rebuilding", name, exc)
            keys = None
    recomputed = aggregate.aggregate(
        rows if keys is None else aggregate.in_groups(rows, keys, gold), gold
    )
    checked = checks.apply(spark, settings, name, gold, recomputed, plan)
    path = gold_path(settings, name)
    app_id = f"{JOB}:{name}:{plan.run_id}"
    if keys is None:
        tables.overwrite_once(checked.kept, path, app_id, plan.n)
        result.groups = checked.kept.count()
    else:
        _merge(spark, path, gold, aggregate.merge_source(keys, checked.kept, gold), app_id, plan.n)
        result.groups = keys.count()
        keys.unpersist()
    faults.point("after_gold_commit")
    checks.record(spark, settings, name, plan, checked, app_id)
    result.counts = checked.counts
    _record(
        spark,
        settings,
        BUILT,
        name,
        {"n": plan.n, "run_id": plan.run_id, "until": plan.until, "groups": result.groups},
    )


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
