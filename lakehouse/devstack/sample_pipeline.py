"""The sample pipeline as a running copy: its configuration over a run's own topic,
PostgreSQL table and tables (a tag keeps them apart), and its jobs, each a continuous process.
The fault test (`tests/pipeline`) runs it under faults, the freshness benchmark
(`bench/freshness.py`) times records through it; both start it from here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lakehouse.devstack.chaos import Job

ORDER_SCHEMA = (
    "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DECIMAL(12,2), ts BIGINT"
)
CUSTOMER_SCHEMA = "customer_id INT, name STRING, email STRING, country STRING, updated_at TIMESTAMP"
CUSTOMER_DDL = (
    "CREATE TABLE public.{table} (customer_id int PRIMARY KEY, name text, email text, "
    "country text, updated_at timestamp)"
)
BUCKET = "15m"
INTERVAL = "15 seconds"  # every stream, unless a run says otherwise
PERIODIC = "30s"  # the move and the gold build, unless a run says otherwise


@dataclass(frozen=True)
class Names:
    """The sources and tables of one run (a tag keeps them apart from every other run's)."""

    tag: str

    @property
    def orders(self) -> str:  # the events source and its silver table
        return f"fo_{self.tag}"

    @property
    def customers(self) -> str:  # the CDC source and its SCD1 table
        return f"fc_{self.tag}"

    @property
    def history(self) -> str:
        return f"fch_{self.tag}"

    @property
    def offline(self) -> str:
        return f"foff_{self.tag}"

    @property
    def hybrid(self) -> str:
        return f"fo_{self.tag}_hybrid"

    @property
    def gold(self) -> str:
        return f"fg_{self.tag}"


def pipeline_conf(
    names: Names,
    orders_topic: str,
    cdc_topic: str,
    interval: str = INTERVAL,
    gold_every: str = PERIODIC,
) -> dict[str, object]:
    """The sample pipeline (conf/base) for this run's topics; the ingests' trigger interval
    `interval`, gold's `gold_every` (the YAML a `conf/test/job.yml` overlay carries)."""
    customers = {"schema": CUSTOMER_SCHEMA, "keys": ["customer_id"]}
    return {
        "sources": {
            names.orders: {
                "kind": "events",
                "topics": [orders_topic],
                "trigger_interval": interval,
            },
            names.customers: {"kind": "cdc", "topics": [cdc_topic], "trigger_interval": interval},
        },
        "silver": {
            names.orders: {
                "source": names.orders,
                "mode": "upsert",
                "schema": ORDER_SCHEMA,
                "keys": ["order_id"],
                "sequence_by": "ts",
                "apply_as_deletes": "order_status = 'deleted'",
                "schema_drift": "rescue",
                "expectations": [
                    {"name": "amount_not_negative", "sql": "amount >= 0", "action": "quarantine"}
                ],
            },
            names.customers: {"source": names.customers, "mode": "scd1", **customers},
            names.history: {
                "source": names.customers,
                "mode": "scd2",
                "track_columns": ["name", "email", "country"],
                **customers,
            },
        },
        "offline": {
            names.offline: {
                "realtime": names.orders,
                "time_column": "ts",
                "time_format": "epoch_ms",
                "bucket": BUCKET,
                "buffer": "1m",
                "hybrid_view": names.hybrid,
            }
        },
        "gold": {
            names.gold: {
                "source": names.hybrid,
                "group_by": {"day": "to_date(timestamp_millis(ts))", "customer_id": "customer_id"},
                "aggregates": {"revenue": "sum(amount)", "orders": "count(*)"},
                "trigger_interval": gold_every,
            }
        },
    }


def pipeline_jobs(
    names: Names, logs: Path, interval: str = INTERVAL, move_every: str = PERIODIC
) -> list[Job]:
    """Every job of the pipeline, as `lakehouse pipeline` plans them, each continuous: both
    ingests, the three refines (at `interval`), the move (every `move_every`), the gold build."""
    refine = ("--trigger-interval", interval)
    specs = [
        ("ingest_events", names.orders, ("--source", names.orders)),
        ("ingest_cdc", names.customers, ("--source", names.customers)),
        ("refine_silver", names.orders, ("--table", names.orders, *refine)),
        ("refine_silver", names.customers, ("--table", names.customers, *refine)),
        ("refine_silver", names.history, ("--table", names.history, *refine)),
        (
            "realtime_to_offline",
            names.offline,
            ("--table", names.offline, "--interval", move_every),
        ),
        ("build_gold", names.gold, ("--table", names.gold)),
    ]
    return [
        Job(f"{script}.{name}", script, args, logs / f"{script}.{name}.log")
        for script, name, args in specs
    ]
