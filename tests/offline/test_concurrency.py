"""The hybrid view never shows a gap or a duplicate, at any instant: a reader evaluates it in a
loop while refine_silver streams new orders (a real job, fed by a real ingest job from Kafka),
realtime_to_offline moves buckets and a backfill commits. Every read must equal the model of
the state it pinned, computed independently from the two tables' raw rows; no writer fails."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings, project_root
from lakehouse.core.specs import OfflineTableSettings, SilverTableSettings
from lakehouse.offline import boundary, hybrid, store
from lakehouse.offline.backfill import BackfillOptions, backfill
from lakehouse.offline.move import MoveOptions, realtime_to_offline
from tests.bronze.helpers import new_source, newest_version, run_ingest, start_job
from tests.offline.helpers import T0, ms
from tests.silver.helpers import produce, run_refine

H = timedelta(hours=1)
COLUMNS = ("order_id", "customer_id", "order_status", "amount", "ts")
SCHEMA = "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DECIMAL(12,2), ts BIGINT"


def event(order_id: int, at: datetime, amount: str = "10.00") -> dict[str, Any]:
    return {
        "order_id": order_id,
        "customer_id": order_id % 7,
        "order_status": "paid",
        "amount": amount,
        "ts": ms(at),
    }


@dataclass
class Reads:
    count: int = 0
    errors: list[str] = field(default_factory=list)
    # What each read returned, checked against the model once the writers are done: the
    # backfill's offline version is only known to this test after `backfill` returns, and a
    # read may land between its commit and that return.
    seen: list[tuple[hybrid.HybridState, list[tuple[Any, ...]]]] = field(default_factory=list)


def model(
    spark: SparkSession,
    settings: Settings,
    offline: str,
    state: hybrid.HybridState,
    window: tuple[datetime, datetime],
    corrected: dict[int, tuple[Any, ...]],
    fixed_at: int | None,
) -> list[tuple[Any, ...]]:
    """What the view must hold at `state`: the realtime table's live rows at its version,
    with the backfilled window's rows replaced once the backfill's commit is in the offline
    version read. Computed in Python from the raw rows."""
    spec = settings.offline_table(offline)
    raw = (
        spark.read.format("delta")
        .option("versionAsOf", state.realtime_version)
        .load(store.realtime_path(settings, spec))
        .collect()
    )
    live = [r for r in raw if not r["__deleted"]]
    start, end = (ms(w) for w in window)
    applied = (
        fixed_at is not None
        and state.offline_version is not None
        and (state.offline_version >= fixed_at)
    )
    rows = []
    for r in live:
        if applied and start <= r["ts"] < end:
            continue
        rows.append(tuple(r[c] for c in COLUMNS))
    if applied:
        rows += list(corrected.values())
    return sorted(rows)


def wait_for_rows(
    spark: SparkSession, path: str, rows: int, jobs: dict[Path, subprocess.Popen[bytes]]
) -> None:
    """Until the realtime table holds `rows`; fails at once when a job exits, and with each
    job's log tail either way. The count runs only after a new commit, so the wait takes no
    CPU from the jobs it waits for (a stack-group neighbour already shares the two cores)."""
    deadline = time.monotonic() + 300
    counted = -2  # the table's commit the last count saw
    while all(job.poll() is None for job in jobs.values()):
        if (newest := newest_version(spark, path)) != counted:
            counted = newest
            if newest >= 0 and spark.read.format("delta").load(path).count() >= rows:
                return
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    tails = "\n".join(
        f"--- {log.name} (exit {job.poll()}):\n{log.read_text(errors='replace')[-2000:]}"
        for log, job in jobs.items()
    )
    raise AssertionError(f"the realtime table did not reach {rows} rows\n{tails}")


def test_readers_see_no_gap_and_no_duplicate_while_three_writers_commit(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    source, topic, settings = new_source(kafka_up, partitions=2)
    realtime, offline = f"rt_{source}", f"off_{source}"
    silver_spec = SilverTableSettings(
        source=source, mode="upsert", schema=SCHEMA, keys=("order_id",), sequence_by="ts"
    )
    offline_spec = OfflineTableSettings(
        realtime=realtime, time_column="ts", bucket="2h", buffer="1m"
    )
    settings = replace(
        settings,
        silver={**settings.silver, realtime: silver_spec},
        offline={**settings.offline, offline: offline_spec},
    )
    # History: 3 buckets of orders, moved up to 04:00.
    produce(settings, topic, [event(i, T0 + (i % 6) * H + timedelta(minutes=i)) for i in range(60)])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, realtime)
    realtime_to_offline(spark, settings, MoveOptions(offline, T0 + 4 * H + timedelta(minutes=1)))

    conf = tmp_path / "conf"
    shutil.copytree(project_root() / "conf", conf, ignore=shutil.ignore_patterns("local"))
    (conf / "test" / "concurrency.yml").write_text(
        yaml.safe_dump(
            {
                "sources": {
                    source: {"kind": "events", "topics": [topic], "trigger_interval": "1 second"}
                },
                "silver": {
                    realtime: {
                        "source": source,
                        "mode": "upsert",
                        "schema": SCHEMA,
                        "keys": ["order_id"],
                        "sequence_by": "ts",
                    }
                },
            }
        )
    )
    env = {
        **os.environ,
        "LAKEHOUSE__STORAGE__ROOT": settings.storage.root,
        "LAKEHOUSE_CONF_DIR": str(conf),
    }
    logs = (tmp_path / "ingest.log", tmp_path / "refine.log")
    running = {
        logs[0]: start_job(
            "ingest_events", ["--source", source, "--trigger", "continuous"], env, logs[0]
        ),
        logs[1]: start_job(
            "refine_silver",
            ["--table", realtime, "--trigger", "continuous", "--trigger-interval", "1 second"],
            env,
            logs[1],
        ),
    }
    jobs = list(running.values())
    window = (T0, T0 + 2 * H)
    corrected = {
        i: (i, 0, "refunded", Decimal("1.00"), ms(T0 + timedelta(minutes=5 * (i - 200) + 1)))
        for i in range(200, 205)
    }
    fixed_at: list[int] = []
    reads, stop = Reads(), threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                state = hybrid.state(spark, settings, offline)
                got = sorted(tuple(r) for r in state.frame(spark).select(*COLUMNS).collect())
                moved = boundary.current(spark, settings, offline)
                reads.seen.append((state, got))
                if (
                    moved
                    and state.offline_version is not None
                    and moved.seq == state.boundary_seq
                    and (state.offline_version < moved.offline_version)
                ):
                    reads.errors.append(
                        f"boundary {moved} ahead of offline version {state.offline_version}"
                    )
            except Exception as exc:  # a failing read is a failed test, reported below
                reads.errors.append(f"read {reads.count}: {type(exc).__name__}: {exc}")
            reads.count += 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        # New orders keep streaming in for buckets the moves below never reach (10:00 on).
        for round_ in range(6):
            produce(
                settings,
                topic,
                [
                    event(1000 + round_ * 20 + i, T0 + 10 * H + timedelta(minutes=i))
                    for i in range(20)
                ],
            )
            if round_ == 0:
                # The writers must be live before the moves and the backfill below: their JVMs
                # take 10-40 s to start on a loaded 2-core machine.
                wait_for_rows(spark, store.realtime_path(settings, offline_spec), 80, running)
            if round_ == 1:
                realtime_to_offline(
                    spark, settings, MoveOptions(offline, T0 + 6 * H + timedelta(minutes=1))
                )
            if round_ == 2:
                path = tmp_path / "fix.jsonl"
                path.write_text(
                    "".join(
                        json.dumps(
                            {
                                "order_id": r[0],
                                "customer_id": r[1],
                                "order_status": r[2],
                                "amount": str(r[3]),
                                "ts": r[4],
                            }
                        )
                        + "\n"
                        for r in corrected.values()
                    )
                )
                report = backfill(
                    spark,
                    settings,
                    BackfillOptions(
                        offline, str(path), *window, now=T0 + 8 * H + timedelta(minutes=1)
                    ),
                )
                fixed_at.append(report.offline_version_after)
            if round_ == 4:
                realtime_to_offline(
                    spark, settings, MoveOptions(offline, T0 + 8 * H + timedelta(minutes=1))
                )
            time.sleep(2)
    finally:
        stop.set()
        thread.join()
        for job in jobs:
            job.send_signal(signal.SIGTERM)
        codes = [job.wait(timeout=120) for job in jobs]
    assert codes == [0, 0], (tmp_path / "refine.log").read_text()[-3000:]
    assert reads.count >= 10
    print(f"{reads.count} reads of {len({state for state, _ in reads.seen})} distinct states")
    models: dict[hybrid.HybridState, list[tuple[Any, ...]]] = {}  # many reads share a state
    for state, got in reads.seen:
        if state not in models:
            models[state] = model(spark, settings, offline, state, window, corrected, fixed_at[0])
        expect = models[state]
        if got != expect:
            reads.errors.append(f"read at {state}: {len(got)} rows, model {len(expect)}")
    assert reads.errors == []
    # Drained: the view is every produced order, the window corrected.
    run_ingest(spark, settings, source)
    run_refine(spark, settings, realtime)
    final = hybrid.state(spark, settings, offline)
    assert sorted(tuple(r) for r in final.frame(spark).select(*COLUMNS).collect()) == model(
        spark, settings, offline, final, window, corrected, fixed_at[0]
    )
    assert final.boundary == T0 + 8 * H
    assert len({r["order_id"] for r in final.frame(spark).collect()}) == 60 - 20 + 5 + 120
