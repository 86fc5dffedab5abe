"""The orders workload's model read while the workload runs: the fault test takes a window's
orders from another thread mid-run (for its backfill), which once failed with "dictionary
changed size during iteration" while the producer thread added orders."""

from __future__ import annotations

import threading
import time
import uuid

from lakehouse.core.settings import Settings
from lakehouse.devstack.workload import OrdersWorkload, now_ms

READS = 300


def test_the_zone_orders_can_be_read_while_the_workload_adds_orders(kafka_up: Settings) -> None:
    start = now_ms() - 86_400_000
    workload = OrdersWorkload(
        kafka_up, f"workload-{uuid.uuid4().hex[:8]}", 5000.0, 7, (start, start + 900_000)
    )
    stop = threading.Event()
    producer = threading.Thread(target=workload.run, args=(stop,), daemon=True)
    producer.start()
    try:
        while workload.produced < 2000:
            time.sleep(0.05)
        failures: list[str] = []
        for _ in range(READS):
            try:
                zone = workload.zone_orders()
            except RuntimeError as e:
                failures.append(str(e))
                continue
            assert all(start <= o["ts"] < start + 900_000 for o in zone)
    finally:
        stop.set()
        producer.join(60)
    assert failures == []
    assert workload.errors == []
