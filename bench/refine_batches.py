"""Small refine batches: where a micro-batch's fixed cost goes, and what two of its Python
costs take from it: each batch's parse built afresh (before `Plan.records` replayed it), and
the Python call site PySpark 4 records for every DataFrame function call.

    .venv/bin/python bench/refine_batches.py --batches 30 --rows 50 --rounds 4 --compare replay
    .venv/bin/python bench/refine_batches.py --batches 30 --rows 50 --rounds 4 --compare call-site
    .venv/bin/python bench/refine_batches.py --batches 100 --rows 50 --rounds 2 --compare compaction
    .venv/bin/python bench/refine_batches.py --batches 30 --rows 50 --rounds 4 --compare guard
    .venv/bin/python bench/refine_batches.py --batches 30 --rows 50 --rounds 4 --compare key-filter
    .venv/bin/python bench/refine_batches.py --batches 30 --rows 50 --rounds 4 --compare adaptive

A continuous pipeline runs many small batches, so their fixed cost, not throughput, sets its
freshness (bench/README.md, "Where a refine batch's time goes"). `--batches` commits of
`--rows` orders each (`silver_expectations.event`) are ingested into bronze with the real
`ingest_events` path; each round refines all of them into a fresh upsert table (by
`order_id`, sequence `ts`, one quarantine rule) with one bronze commit per micro-batch
(`max_files_per_trigger: 1`), once per variant (who goes first alternates). `replay`: the
parse built by `transform` for every batch, against `Plan.records` (built once, replayed).
`call-site`: the session turns the call site off (`spark.python.sql.dataFrameDebugging.enabled`,
`lakehouse.core.spark`); "on" sets PySpark's cached answer back to what it is without that
setting. `compaction`: the silver table never compacted, or every 10 commits
(`storage.compact_every`). `guard`: the quarantine and metrics appends each with Delta's
`txnAppId`/`txnVersion` (whose look-up rebuilds the table's snapshot state: before), or
checked by the query's first batch and plain after it (`lakehouse.silver.once`: now).
`key-filter`: the MERGE with or without its Bloom filter of the batch's keys
(`scd1.apply_scd1`'s `key_filter_changes`; building it is one Spark job over the batch). Per
run: the median of each phase over its batches (the first two left out: the stream's start),
as `refine_batch` times them; then the medians over the rounds.
Needs Kafka (started here if it is not running, and stopped again at the end if it was started
here)."""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyspark.errors.utils as pyspark_errors
from benchlib import SHIPPED_SPARK
from silver_expectations import SCHEMA, SOURCE, event, rule

from lakehouse.bronze.ingest import IngestOptions, ingest
from lakehouse.core import kafka
from lakehouse.core.settings import load_settings
from lakehouse.core.spark import build_session
from lakehouse.core.specs import SilverTableSettings, SourceSettings
from lakehouse.devstack.kafka import kafka_status, start_kafka, stop_kafka
from lakehouse.silver import once, scd1
from lakehouse.silver import refine as refine_module
from lakehouse.silver.batch import BatchStats, refine_batch
from lakehouse.silver.plan import Plan, transform
from lakehouse.silver.refine import RefineOptions, refine

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SKIPPED = 2  # the first batches of a run pay the stream's start


def table() -> SilverTableSettings:
    return SilverTableSettings(
        source=SOURCE,
        mode="upsert",
        schema=SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        max_files_per_trigger=1,
        expectations=(rule("amount_not_negative", "quarantine", "amount >= 0"),),
    )


def call_site(on: bool) -> Callable[[], None]:
    def setup() -> None:
        # PySpark's cached answer to "record the call site?" (it reads the setting once)
        pyspark_errors._enable_debugging_cache = on  # type: ignore[assignment]

    return setup


def parse(replayed: bool) -> Callable[[], None]:
    """Each batch's parse replayed (what `Plan.records` does) or built by `transform` afresh
    (what it did before)."""

    def afresh(self: Plan, batch: DataFrame) -> DataFrame:
        return transform(batch, self.table, self.kind, self.schema)

    def setup() -> None:
        Plan.records = REPLAYED if replayed else afresh  # type: ignore[method-assign]

    return setup


# `storage.compact_every` of the next run (`compaction`).
COMPACT_EVERY = [50]


def compaction(every: int) -> Callable[[], None]:
    def setup() -> None:
        COMPACT_EVERY[0] = every

    return setup


FIRST_BATCH = once.first_batch


def guarded(every_batch: bool) -> Callable[[], None]:
    """The quarantine and metrics appends each with Delta's transaction look-up (before), or
    the first batch's own check and plain appends after it (`lakehouse.silver.once`, now)."""

    def unknown(*_: object) -> None:
        return None  # no first batch known: every append keeps Delta's look-up

    def setup() -> None:
        once.first_batch = unknown if every_batch else FIRST_BATCH  # type: ignore[assignment]

    return setup


def key_filter(on: bool) -> Callable[[], None]:
    def setup() -> None:
        off = functools.partial(APPLY_SCD1, key_filter_changes=0)
        scd1.apply_scd1 = APPLY_SCD1 if on else off

    return setup


def adaptive(on: bool) -> Callable[[], None]:
    """Adaptive query execution on (the shipped setting) or off, for the next run's stream
    (which takes the session's settings when it starts)."""

    def setup() -> None:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        assert active is not None, "the bench's session runs"
        active.conf.set("spark.sql.adaptive.enabled", "true" if on else "false")

    return setup


APPLY_SCD1 = scd1.apply_scd1
REPLAYED = Plan.records
VARIANTS: dict[str, dict[str, Callable[[], None]]] = {
    "call-site": {"call site on": call_site(True), "call site off": call_site(False)},
    "replay": {"parse built per batch": parse(False), "parse replayed": parse(True)},
    "guard": {"look-up every batch": guarded(True), "first batch checked": guarded(False)},
    "compaction": {"never compacted": compaction(0), "compacted every 10": compaction(10)},
    "key-filter": {"key filter": key_filter(True), "no key filter": key_filter(False)},
    "adaptive": {"adaptive on": adaptive(True), "adaptive off": adaptive(False)},
}


def recording(seen: list[BatchStats]) -> Callable[[DataFrame, int, Plan], BatchStats]:
    """`refine_batch`, keeping each batch's figures (its phases) in `seen`."""
    original = refine_batch

    def run(batch: DataFrame, batch_id: int, plan: Plan) -> BatchStats:
        stats = original(batch, batch_id, plan)
        seen.append(stats)
        return stats

    return run


def phases(seen: list[BatchStats]) -> dict[str, float]:
    """Per phase, the median over the batches (a batch without quarantined rows has no
    quarantine phase); `total` is the whole batch, `mean` its mean."""
    values: dict[str, list[float]] = {}
    for stats in seen[SKIPPED:]:
        values.setdefault("total", []).append(stats.seconds)
        for name, seconds in stats.phases:
            values.setdefault(name, []).append(seconds)
    figures = {name: statistics.median(v) for name, v in values.items()}
    # A phase a few batches have (a compaction) shows in the mean, not in the median.
    return {**figures, "mean": statistics.mean(values["total"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--compare",
        choices=sorted(VARIANTS),
        default="replay",
        help="call-site: with and without PySpark's call site; replay: each batch's parse "
        "built afresh or replayed (Plan.records); compaction: silver never compacted or "
        "every 10 commits (storage.compact_every); guard: the quarantine and metrics appends "
        "with Delta's transaction look-up each, or checked by the first batch only; "
        "key-filter: the MERGE with or without its Bloom filter of the batch's keys; "
        "adaptive: adaptive query execution on (shipped) or off",
    )
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="bench-refine-batches-")
    settings = load_settings("test", overrides={"storage.root": work, "spark.conf": SHIPPED_SPARK})
    kafka_was_running = kafka_status(settings).startswith("running")
    start_kafka(settings)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    kafka.ensure_topic(settings.kafka, topic, partitions=1)
    settings = replace(
        settings, sources={SOURCE: SourceSettings(kind="events", topics=(topic,))}, silver={}
    )
    spark = build_session(settings, "bench-refine-batches")
    seen: list[BatchStats] = []
    refine_module.refine_batch = recording(seen)  # type: ignore[assignment,attr-defined]
    variants = VARIANTS[args.compare]
    results: dict[str, list[dict[str, float]]] = {label: [] for label in variants}
    try:
        for b in range(args.batches):  # one bronze commit per batch
            records = [event(b * args.rows + i) for i in range(args.rows)]
            kafka.produce(settings.kafka, topic, [(None, _json(r), 0) for r in records])
            ingest(spark, settings, IngestOptions(SOURCE), "events")
        for round_no in range(args.rounds):
            labels = list(variants) if round_no % 2 == 0 else list(reversed(variants))
            for label in labels:
                variants[label]()
                name = f"bench_{uuid.uuid4().hex[:10]}"
                seen.clear()
                storage = replace(settings.storage, compact_every=COMPACT_EVERY[0])
                run = replace(settings, silver={name: table()}, storage=storage)
                refine(spark, run, RefineOptions(name))
                results[label].append(phases(seen))
                figures = _line(results[label][-1])
                print(f"round {round_no} {label}: {len(seen)} batches, {figures}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if not kafka_was_running:
            stop_kafka(settings)
    print(f"\nmedians over {args.rounds} rounds of {args.batches} batches of {args.rows} rows:")
    for label, runs in results.items():
        names = [n for n in runs[0] if all(n in r for r in runs)]
        figures = _line({n: statistics.median(r[n] for r in runs) for n in names})
        print(f"  {label:<{max(map(len, results))}}: {figures}")


def _line(figures: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.2f}" for name, seconds in figures.items())


def _json(record: dict[str, Any]) -> bytes:
    import json

    return json.dumps(record).encode()


if __name__ == "__main__":
    main()
