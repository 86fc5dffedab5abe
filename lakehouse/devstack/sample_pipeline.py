"""The sample pipeline as a running copy: its configuration over a run's own topic,
PostgreSQL table and tables (a tag keeps them apart), and its jobs, each a continuous process.
The fault test (`tests/pipeline`) runs it under faults, the freshness benchmark
(`bench/freshness.py`) times records through it; both start it from here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lakehouse.core.settings import project_root
from lakehouse.devstack.chaos import Job


def shipped() -> dict[str, dict[str, Any]]:
    """conf/base's sections as shipped (sources, silver, offline, gold, ...)."""
    sections: dict[str, dict[str, Any]] = {}
    for file in sorted((project_root() / "conf" / "base").glob("*.yml")):
        sections.update(yaml.safe_load(file.read_text()) or {})
    return sections


_SILVER = shipped()["silver"]
ORDER_SCHEMA: str = _SILVER["orders"]["schema"]
CUSTOMER_SCHEMA: str = _SILVER["customers"]["schema"]
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
    """The shipped pipeline (conf/base: the orders and customers sources, their three silver
    tables, the offline table and the gold table over its hybrid view, with their expectations)
    renamed for this run and over its topics; the streams' trigger interval `interval`, gold's
    `gold_every`, the offline buckets `BUCKET` (the YAML a `conf/test/job.yml` overlay
    carries)."""
    base = shipped()
    renamed = {
        "orders": names.orders,
        "customers": names.customers,
        "customers_history": names.history,
        "orders_hybrid": names.hybrid,
    }

    def source(name: str, topic: str) -> dict[str, object]:
        spec = {k: v for k, v in base["sources"][name].items() if k != "connector"}
        return {**spec, "topics": [topic], "trigger_interval": interval}

    def silver(name: str) -> dict[str, object]:
        spec = base["silver"][name]
        return {**spec, "source": renamed[spec["source"]]}

    offline = base["offline"]["orders_offline"]
    gold = base["gold"]["daily_revenue"]
    return {
        "sources": {
            names.orders: source("orders", orders_topic),
            names.customers: source("customers", cdc_topic),
        },
        "silver": {
            renamed[name]: silver(name) for name in ("orders", "customers", "customers_history")
        },
        "offline": {
            names.offline: {
                **offline,
                "realtime": renamed[offline["realtime"]],
                "bucket": BUCKET,
                "hybrid_view": names.hybrid,
            }
        },
        "gold": {
            names.gold: {**gold, "source": renamed[gold["source"]], "trigger_interval": gold_every}
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
