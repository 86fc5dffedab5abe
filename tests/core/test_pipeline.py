"""The plan a scheduler runs (`lakehouse pipeline --json`, read by the Airflow DAG), from the
shipped configuration; test_airflow runs a plan on a cluster, over a smaller configuration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse import cli
from lakehouse.core.pipeline import Step, plan
from lakehouse.core.settings import load_settings
from tests.jobs.helpers import conf_overlay


def test_the_shipped_configuration_plans_every_source_and_table_stage_by_stage() -> None:
    assert plan(load_settings("test")) == [
        Step("ingest", "customers", "ingest_cdc", ("--source", "customers")),
        Step("ingest", "lineitem", "ingest_events", ("--source", "lineitem")),
        Step("ingest", "orders", "ingest_events", ("--source", "orders")),
        Step("refine", "customers", "refine_silver", ("--table", "customers")),
        Step("refine", "customers_history", "refine_silver", ("--table", "customers_history")),
        Step("refine", "orders", "refine_silver", ("--table", "orders")),
        Step("gold", "daily_revenue", "build_gold", ("--table", "daily_revenue")),
        Step("offline", "orders_offline", "realtime_to_offline", ("--table", "orders_offline")),
    ]


def test_a_source_or_table_removed_from_the_configuration_leaves_the_plan(tmp_path: Path) -> None:
    conf = conf_overlay(tmp_path, {}, drop=("sources.lineitem", "silver.customers_history"))
    assert [step.task_id for step in plan(load_settings("test", conf))] == [
        "ingest_cdc.customers",
        "ingest_events.orders",
        "refine_silver.customers",
        "refine_silver.orders",
        "build_gold.daily_revenue",
        "realtime_to_offline.orders_offline",
    ]


def test_the_printed_plan_names_each_step_as_run_pipeline_only_takes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["--env", "test", "pipeline"]) == 0
    lines = [line.split(maxsplit=2) for line in capsys.readouterr().out.splitlines()]
    assert lines[:2] == [
        ["ingest", "ingest_cdc.customers", "jobs/ingest_cdc.py --source customers"],
        ["ingest", "ingest_events.lineitem", "jobs/ingest_events.py --source lineitem"],
    ]
    assert lines[-1] == [
        "offline",
        "realtime_to_offline.orders_offline",
        "jobs/realtime_to_offline.py --table orders_offline",
    ]


def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly_with_exit_0() -> None:
    """`lakehouse pipeline | head -1`: the reader has what it wanted; no traceback follows."""
    command = [str(Path(sys.executable).parent / "lakehouse"), "--env", "test", "pipeline"]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert job.stdout is not None
    job.stdout.close()  # before the command prints its first line (it loads its settings first)
    _out, err = job.communicate(timeout=120)
    assert (job.returncode, err.decode()) == (0, "")
