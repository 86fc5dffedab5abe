"""The lakehouse pipeline on a schedule: every source's ingest, then every silver table's
refine, then every gold table's build, then every offline table's move (`lakehouse pipeline`
gives the plan from the configuration, so a source or table added in YAML becomes a task at
the next parse). Each job runs `available-now` and is idempotent: a retried task, or a run that
starts while a late one finishes, writes nothing twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, TaskGroup
from lakehouse_airflow import RETRIES, LakehouseJob, pipeline_steps

STAGES = ("ingest", "refine", "gold", "offline")

with DAG(
    dag_id="lakehouse_pipeline",
    description="ingest -> refine -> gold -> realtime_to_offline",
    schedule=timedelta(minutes=15),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,  # the jobs' checkpoints are single-writer
    default_args={"retries": RETRIES, "retry_delay": timedelta(minutes=1)},
    tags=["lakehouse"],
) as dag:
    steps = pipeline_steps()
    previous: TaskGroup | None = None
    for stage in STAGES:
        jobs = [s for s in steps if s["stage"] == stage]
        if not jobs:
            continue
        with TaskGroup(group_id=stage) as group:
            for step in jobs:
                LakehouseJob(task_id=step["task_id"], job=step["job"], args=step["args"])
        if previous is not None:
            previous >> group
        previous = group
