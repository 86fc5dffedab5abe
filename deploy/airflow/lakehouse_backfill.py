"""A backfill, triggered by hand: corrected records replace the closed buckets of a window of
an offline table, and the hybrid view serves them (`jobs/backfill.py`). Trigger with the
params, e.g. `airflow dags trigger lakehouse_backfill --conf '{"table": "orders_offline",
"start": "2026-01-01", "end": "2026-01-02", "input": "/data/fixed.jsonl", "reason": "..."}'`."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import DAG, Param
from lakehouse_airflow import LakehouseJob

with DAG(
    dag_id="lakehouse_backfill",
    description="corrected records -> closed buckets of an offline table",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    params={
        "table": Param("orders_offline", type="string", description="offline table"),
        "start": Param(type="string", description="window start (ISO-8601)"),
        "end": Param(type="string", description="window end (ISO-8601)"),
        "input": Param(type="string", description="Delta, Parquet, JSON lines or CSV"),
        "reason": Param("", type="string", description="why; kept in the backfill log"),
    },
    tags=["lakehouse"],
) as dag:
    LakehouseJob(
        task_id="backfill",
        job="backfill",
        args=[
            "--table",
            "{{ params.table }}",
            "--from",
            "{{ params.start }}",
            "--to",
            "{{ params.end }}",
            "--input",
            "{{ params.input }}",
            "--reason",
            "{{ params.reason }}",
        ],
    )
