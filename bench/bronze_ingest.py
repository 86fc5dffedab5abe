"""Bronze ingest throughput: `ingest_events` against a minimal hand-written
readStream.format("kafka") -> writeStream.format("delta") job, same pre-loaded topic, same
session, alternating runs. Each job appends to its own table, which exists after the
unreported warm-up runs, as a scheduled job finds it; every run reads the whole topic with a new
checkpoint. `--fresh-tables` measures first runs instead (every run creates its table).

    .venv/bin/python bench/bronze_ingest.py --events 1000000 --rounds 5

Reports records/s, CPU-seconds per million records (driver JVM + Python), files written and
the ratio ours/baseline. Needs Kafka (started here if it is not running).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchlib import cpu_seconds, jvm_pid, preload

from lakehouse.bronze.ingest import IngestOptions, bronze_path, ingest
from lakehouse.core import kafka
from lakehouse.core.settings import Settings, load_settings
from lakehouse.core.spark import build_session
from lakehouse.core.specs import SourceSettings
from lakehouse.devstack.kafka import start_kafka

PARTITIONS = 2
MAX_OFFSETS_PER_TRIGGER = 500_000


def event(i: int) -> dict[str, Any]:
    """A small (~110 bytes) orders event."""
    return {
        "order_id": i,
        "customer_id": i % 997,
        "order_status": "paid",
        "amount": 12.5,
        "ts": 1_767_225_600_000 + i,
    }


def files_in(path: str) -> int:
    return sum(1 for p in Path(path).rglob("*.parquet"))


def baseline(spark: Any, settings: Settings, topic: str, out: str, checkpoint: str) -> None:
    (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER))
        .load()
        .writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out)
        .awaitTermination()
    )


def measure(
    label: str, path: str, run: Callable[[], None], events: int, pid: int
) -> dict[str, float | str]:
    before = files_in(path)
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    run()
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    return {
        "job": label,
        "seconds": round(wall, 2),
        "records_per_s": round(events / wall),
        "cpu_s_per_million": round(cpu / events * 1e6, 1),
        "files": files_in(path) - before,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--fresh-tables",
        action="store_true",
        help="every run writes a new table (first-run cost: bronze's explicit create commit) "
        "instead of appending to the table its job already has, as a scheduled job does",
    )
    parser.add_argument(
        "--driver-memory",
        default="4g",
        help="spark.driver.memory, for both jobs (local mode: the executors' heap too)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=4,
        help="unreported runs of each job first: with 2, the first reported runs of both jobs "
        "were still up to 1.6x slower than the last ones (JIT of the generated code)",
    )
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="bench-bronze-")
    settings = load_settings(
        "test",
        overrides={"storage.root": work, "spark.conf": {"spark.driver.memory": args.driver_memory}},
    )
    start_kafka(settings)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    preload(settings, topic, args.events, event, PARTITIONS)
    print(f"preloaded {args.events} events into {topic} in {time.perf_counter() - t0:.1f}s")

    spark = build_session(settings, "bench-bronze-ingest")
    pid = jvm_pid(spark)
    results: list[dict[str, float | str]] = []
    runs = iter(range(1_000_000))  # a fresh checkpoint (and source name) for every run

    def table(kind: str) -> str:
        return f"{kind}{next(runs)}" if args.fresh_tables else kind

    def ours() -> tuple[str, Callable[[], None]]:
        name = f"bench{next(runs)}"  # the checkpoint is per source name: read from earliest
        source = SourceSettings(
            kind="events",
            topics=(topic,),
            max_offsets_per_trigger=MAX_OFFSETS_PER_TRIGGER,
            bronze_table=table("ours"),
        )
        ours_settings = replace(settings, sources={name: source})

        def run() -> None:
            ingest(spark, ours_settings, IngestOptions(name), "events")

        return bronze_path(ours_settings, name), run

    def base() -> tuple[str, Callable[[], None]]:
        out, checkpoint = f"{work}/{table('baseline')}", f"{work}/checkpoint{next(runs)}"
        return out, lambda: baseline(spark, settings, topic, out, checkpoint)

    try:
        # Warm-up (not reported): JIT, class loading and Kafka page cache for both jobs; it
        # also creates each job's table, which later runs append to (unless --fresh-tables).
        for _ in range(args.warmup):
            for make in (base, ours):
                make()[1]()
        for round_no in range(args.rounds):
            pair: list[tuple[str, Callable[[], tuple[str, Callable[[], None]]]]] = [
                ("ingest_events", ours),
                ("baseline", base),
            ]
            if round_no % 2:
                pair.reverse()  # alternate who goes first (page cache, JIT warm-up)
            for label, make in pair:
                path, run = make()
                result = measure(label, path, run, args.events, pid)
                results.append(result)
                print(json.dumps(result))
    finally:
        spark.stop()

    def median(job: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in results if r["job"] == job)

    ours_rps, base_rps = (
        median("ingest_events", "records_per_s"),
        median("baseline", "records_per_s"),
    )
    print(
        f"\nmedian records/s: ingest_events {ours_rps:,.0f}, baseline {base_rps:,.0f}, "
        f"ratio {ours_rps / base_rps:.2f} (goal >= 0.90)"
    )
    ours_cpu, base_cpu = (
        median("ingest_events", "cpu_s_per_million"),
        median("baseline", "cpu_s_per_million"),
    )
    print(f"median CPU-s per million: ingest_events {ours_cpu:.1f}, baseline {base_cpu:.1f}")
    kafka.delete_topics(settings.kafka, [topic])


if __name__ == "__main__":
    main()
