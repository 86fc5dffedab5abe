"""The jobs of one run of the whole pipeline, from the configuration, in stages: every
source's ingest, then every silver table's refine, then every gold table's build, then every
offline table's move. A scheduler runs this plan (`lakehouse pipeline --json`, which the Airflow
DAG in `deploy/airflow/` reads), so a source or table added in YAML is scheduled without a code
change. Each job is idempotent, so a stage retried, or a run that overlaps a late one, writes
nothing twice."""

from __future__ import annotations

from dataclasses import dataclass

from lakehouse.core.settings import Settings

STAGES = ("ingest", "refine", "gold", "offline")
INGEST_JOBS = {"events": "ingest_events", "cdc": "ingest_cdc"}
INGEST_KINDS = {job: kind for kind, job in INGEST_JOBS.items()}


@dataclass(frozen=True)
class Step:
    stage: str  # one of STAGES; a stage starts when the one before it has finished
    name: str  # the source or table the job runs for
    job: str  # the entry point in jobs/, e.g. "refine_silver"
    args: tuple[str, ...]  # its flags, e.g. ("--table", "orders")

    @property
    def task_id(self) -> str:
        return f"{self.job}.{self.name}"


def plan(settings: Settings) -> list[Step]:
    """The steps of one pipeline run, stage by stage, each stage in name order."""
    steps = [
        Step("ingest", name, INGEST_JOBS[source.kind], ("--source", name))
        for name, source in sorted(settings.sources.items())
    ]
    steps += [
        Step("refine", name, "refine_silver", ("--table", name)) for name in sorted(settings.silver)
    ]
    steps += [Step("gold", name, "build_gold", ("--table", name)) for name in sorted(settings.gold)]
    steps += [
        Step("offline", name, "realtime_to_offline", ("--table", name))
        for name in sorted(settings.offline)
    ]
    return steps
