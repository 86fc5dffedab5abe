"""build_gold stopped around its commit: killed (SIGKILL, in a job) or stopped at a fault
point in this process, then rerun, it ends as if it had run once: gold, its history, and the
metrics and quarantined rows it records."""

from __future__ import annotations

import random
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from lakehouse.core import faults, system, tables
from lakehouse.core.faults import FAULT_ENV
from lakehouse.core.settings import Settings
from lakehouse.gold.build import GoldOptions, build_gold, gold_path
from tests.bronze.helpers import run_job
from tests.gold.helpers import (
    GOLD,
    PATCHED,
    Crashed,
    apply_events,
    assert_gold,
    crash_at,
    model,
    patched_model,
    random_events,
    with_a_small_group,
    with_gold,
)
from tests.offline.helpers import T0, offline_setup, realtime_path
from tests.offline.test_move import job_env


def test_a_rebuild_for_a_changed_definition_serves_the_old_rows_until_it_commits(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropping gold to rebuild it left readers no table until the rebuild committed, and none
    at all after a crash in between. The new definition adds a column: the rebuild replaces
    the schema too, in the same commit, and the table's history goes on."""
    offline, settings = offline_setup(spark, settings)
    realtime = settings.offline_table(offline).realtime
    name, settings = with_gold(settings, realtime)
    path = realtime_path(settings, offline)
    first = [(1, 1, Decimal("10.00"), 0, "u", 1), (2, 1, Decimal("20.00"), 0, "u", 2)]
    apply_events(spark, path, first)
    build_gold(spark, settings, GoldOptions(name))
    old = [(T0.date(), 1, Decimal("30.00"), 2, Decimal("20.00"))]
    spec = settings.gold[name]
    wider = replace(spec, aggregates={**spec.aggregates, "smallest": "min(amount)"})
    settings = replace(settings, gold={**settings.gold, name: wider})
    apply_events(spark, path, [(3, 1, Decimal("5.00"), 0, "u", 3)])

    with monkeypatch.context() as patch:
        patch.setattr(faults, "point", crash_at("before_gold_commit"))
        with pytest.raises(Crashed):
            build_gold(spark, settings, GoldOptions(name))
    assert_gold(spark, settings, name, spark.createDataFrame(old, GOLD))
    rebuilt = build_gold(spark, settings, GoldOptions(name)).describe()
    assert rebuilt.startswith(f"gold.{name}: rebuilt run 1:"), rebuilt
    expected = [(T0.date(), 1, Decimal("35.00"), 3, Decimal("20.00"), Decimal("5.00"))]
    wider_gold = spark.createDataFrame(expected, f"{GOLD}, smallest decimal(12,2)")
    assert_gold(spark, settings, name, wider_gold)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{gold_path(settings, name)}`").collect()
    # The first build and the rebuild: one table.
    assert [r["operation"] for r in history if r["operation"] == "WRITE"] == ["WRITE", "WRITE"]


@pytest.mark.parametrize("incremental", [False, True], ids=["first-build", "patched-run"])
@pytest.mark.parametrize("fault", ["before_gold_commit", "after_gold_commit"])
def test_a_crash_around_the_commit_then_a_rerun_ends_as_one_run(
    spark: SparkSession, settings: Settings, tmp_path: Path, fault: str, incremental: bool
) -> None:
    """A patched run applied twice would count its changes twice: the rerun must find the
    killed run's commit, or redo it from the same gold rows."""
    offline, settings = offline_setup(spark, settings)
    realtime = settings.offline_table(offline).realtime
    name, settings = with_gold(settings, realtime, aggregates=PATCHED if incremental else None)
    events = random_events(random.Random(7), 40, nulls=0.3 if incremental else 0.0)  # noqa: S311
    built, killed = (events[:20], events[20:]) if incremental else ([], events)
    path = realtime_path(settings, offline)
    if built:
        apply_events(spark, path, built)
        build_gold(spark, settings, GoldOptions(name))
    apply_events(spark, path, killed)
    env = job_env(settings, offline, tmp_path)
    gold_conf = tmp_path / "conf" / "test" / "gold_job.yml"
    spec = settings.gold[name]
    gold_conf.write_text(
        yaml.safe_dump(
            {
                "gold": {
                    name: {
                        "source": realtime,
                        "group_by": dict(spec.group_by),
                        "aggregates": dict(spec.aggregates),
                    }
                }
            }
        )
    )
    done = run_job("build_gold", ["--table", name], {**env, FAULT_ENV: fault})
    assert done.returncode == -9, done.stderr[-2000:]
    # The rerun reads only what the killed run left on disk: in this JVM (a job's exit and
    # output after a crash are test_console's and test_exit_codes' subject).
    rerun = build_gold(spark, settings, GoldOptions(name)).describe()
    if fault == "after_gold_commit":
        assert rerun == f"gold.{name}: up to date"  # the killed run had committed
    elif incremental:
        assert rerun.startswith(f"gold.{name}: incremental run 2:"), rerun  # redone
        assert " patched and " in rerun, rerun
    else:
        assert rerun.startswith(f"gold.{name}: rebuilt run 1:")  # nothing was: redone
    assert_gold(spark, settings, name, (patched_model if incremental else model)(spark, events))
    writes = [
        r
        for r in spark.sql(f"DESCRIBE HISTORY delta.`{gold_path(settings, name)}`").collect()
        if r["operation"] in ("WRITE", "MERGE")
    ]
    assert len(writes) == (2 if incremental else 1)


@pytest.mark.parametrize(
    ("rebuild", "compacted"),
    [(False, False), (True, False), (True, True)],
    ids=["first-build", "rebuild", "rebuild-compacted-before-the-rerun"],
)
def test_a_build_stopped_before_its_commit_records_its_metrics_and_quarantine_once(
    spark: SparkSession,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    rebuild: bool,
    compacted: bool,
) -> None:
    """A first build, or a rebuild for a changed definition, writes its metrics and
    quarantined rows under its transaction before its commit: the rerun of one stopped in
    between is the same run and writes neither again, even when the gold table was compacted
    in between (an OPTIMIZE commits, but changes no row)."""
    name, settings = with_a_small_group(spark, settings, "quarantine")
    runs = 1
    if rebuild:
        build_gold(spark, settings, GoldOptions(name))
        spec = settings.gold[name]
        wider = replace(spec, aggregates={**spec.aggregates, "smallest": "min(amount)"})
        settings = replace(settings, gold={**settings.gold, name: wider})
        runs = 2
    with monkeypatch.context() as patch:
        patch.setattr(faults, "point", crash_at("before_gold_commit"))
        with pytest.raises(Crashed):
            build_gold(spark, settings, GoldOptions(name))
    if compacted:  # two commits that change no row: its files rewritten, then Z-ordered
        path = gold_path(settings, name)
        before = tables.latest_version(spark, path)
        rows = spark.read.format("delta").load(path)
        rows.write.format("delta").mode("overwrite").option("dataChange", "false").save(path)
        DeltaTable.forPath(spark, path).optimize().executeZOrderBy(rows.columns[0])
        operations = [
            (tables.commit_info(spark, path, v) or {}).get("operation")
            for v in (before + 1, before + 2)
        ]
        assert operations == ["WRITE", "OPTIMIZE"], operations
    rerun = build_gold(spark, settings, GoldOptions(name)).describe()
    assert rerun.startswith(f"gold.{name}: rebuilt run 1:"), rerun
    metrics = spark.read.format("delta").load(system.path(settings, system.METRICS))
    counts = sorted(
        (r["rule"], r["passed"], r["failed"])
        for r in metrics.where(f"`table` = 'gold.{name}'").collect()
    )
    assert counts == sorted([("small_groups", 1, 1), ("big_spender", 1, 1)] * runs)
    quarantined = spark.read.format("delta").load(system.path(settings, system.QUARANTINE))
    records = [r["record"] for r in quarantined.where(f"`table` = 'gold.{name}'").collect()]
    assert len(records) == runs, records  # customer 2's group, once per run
