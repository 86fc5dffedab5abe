"""Steady workloads for the sample pipeline, each keeping an independent model of what it
wrote: orders events into Kafka (new orders, later versions, deletes, stale versions, exact
duplicates) and changes to a customers table in PostgreSQL (inserts, updates, updates of
untracked columns only, deletes). The fault test checks the lake against these models; the
freshness benchmark times the records through the lake."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from lakehouse.core import kafka
from lakehouse.core.settings import Settings

STATUSES = ("created", "paid", "shipped", "cancelled")
# A version with this status deletes its order (the shipped orders table's `apply_as_deletes`);
# a later version brings it back.
DELETED = "deleted"
HOUR_MS = 3_600_000
Order = dict[str, Any]  # order_id, customer_id, order_status, amount (Decimal), ts (epoch ms)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class OrdersModel:
    """Each order's versions as produced; silver keeps, per order, the one with the largest
    `ts` (the workload never gives two different versions of an order the same `ts`)."""

    versions: dict[int, list[Order]] = field(default_factory=dict)

    def add(self, order: Order) -> None:
        self.versions.setdefault(order["order_id"], []).append(order)

    def latest(self) -> list[Order]:
        return [max(v, key=lambda o: o["ts"]) for v in self.versions.values()]

    def live(self) -> list[Order]:
        """What silver serves: each order's latest version, unless that version deletes it."""
        return [o for o in self.latest() if o["order_status"] != DELETED]


class OrdersWorkload:
    """Orders events at `rate` per second into `topic`, keyed by order id. New orders are
    timed in the last `spread_ms` (so buckets close and move while it runs); while `zone` is
    open, a tenth of the new orders and all their later versions fall into that window, which
    is then left alone (for a backfill to replace)."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        rate: float,
        seed: int,
        zone: tuple[int, int],
        spread_ms: int = 3 * HOUR_MS,
    ) -> None:
        from confluent_kafka import Producer

        self.topic, self.rate, self.zone, self.spread_ms = topic, rate, zone, spread_ms
        self.rng = random.Random(seed)  # noqa: S311 - test data
        self.model = OrdersModel()
        self.zone_open = True
        # The model is read from another thread while this one writes it (a backfill takes
        # the zone's orders mid-run): both sides hold this lock.
        self._lock = threading.Lock()
        self.produced = 0
        self.errors: list[str] = []
        self.producer = Producer(
            kafka.client_config(
                settings.kafka,
                **{"enable.idempotence": True, "acks": "all", "linger.ms": 5},
            )
        )
        self._next_id = 1
        self._sent: list[Order] = []  # every event, for exact duplicates
        # Order ids sent, all and those outside the zone (kept as sent: picking from them is
        # per event, and a rebuild per event grew with the orders).
        self._ids: list[int] = []
        self._outside: list[int] = []

    def run(self, stop: threading.Event) -> None:
        interval = 1.0 / self.rate
        due = time.monotonic()
        while not stop.is_set():
            self._send(self._next())
            due += interval
            self.producer.poll(0)
            time.sleep(max(0.0, due - time.monotonic()))
        self.flush()

    def flush(self) -> None:
        remaining = self.producer.flush(120)
        if remaining:
            self.errors.append(f"{remaining} records not delivered")

    def zone_orders(self) -> list[Order]:
        start, end = self.zone
        with self._lock:
            live = self.model.live()
        return [o for o in live if start <= o["ts"] < end]

    def _next(self) -> Order:
        roll = self.rng.random()
        known = self._ids if self.zone_open else self._outside
        if roll < 0.55 or not known:
            return self._new_order()
        order_id = self.rng.choice(known)
        versions = self.model.versions[order_id]
        latest = max(versions, key=lambda o: o["ts"])
        if roll < 0.8:
            step = self.rng.randint(1, 300_000)
            ts = latest["ts"] + step
            if self._in_zone(order_id):
                ts = min(ts, self.zone[1] - 1)
            ts = min(ts, now_ms())
            if ts <= latest["ts"]:
                return self._new_order()
            # One later version in five deletes the order (its latest values, a later `ts`).
            status = DELETED if self.rng.random() < 0.2 else self.rng.choice(STATUSES)
            return {**latest, "order_status": status, "ts": ts}
        if roll < 0.9:  # stale: older than every version, so it must lose
            first = min(o["ts"] for o in versions)
            return {**latest, "amount": self._amount(), "ts": first - self.rng.randint(1, 1000)}
        return dict(self.rng.choice(self._sent))  # an exact duplicate

    def _in_zone(self, order_id: int) -> bool:
        first = int(self.model.versions[order_id][0]["ts"])
        return self.zone[0] <= first < self.zone[1]

    def _new_order(self) -> Order:
        order_id, self._next_id = self._next_id, self._next_id + 1
        if self.zone_open and self.rng.random() < 0.1:
            ts = self.rng.randint(self.zone[0], self.zone[0] + (self.zone[1] - self.zone[0]) // 2)
        else:
            ts = now_ms() - self.rng.randint(0, self.spread_ms)
        return {
            "order_id": order_id,
            "customer_id": self.rng.randint(1, 20),
            "order_status": "created",
            "amount": self._amount(),
            "ts": ts,
        }

    def _amount(self) -> Decimal:
        return Decimal(self.rng.randint(100, 50_000)) / 100

    def _send(self, order: Order) -> None:
        payload = json.dumps({**order, "amount": float(order["amount"])}).encode()

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        self.producer.produce(
            self.topic, key=str(order["order_id"]).encode(), value=payload, on_delivery=delivered
        )
        if order["order_id"] not in self.model.versions:
            self._ids.append(order["order_id"])
            if not self.zone[0] <= order["ts"] < self.zone[1]:
                self._outside.append(order["order_id"])
        with self._lock:
            self.model.add(order)
        self._sent.append(order)
        self.produced += 1


# A customer's tracked state: (name, email, country), or None once deleted.
Tracked = tuple[str, str, str] | None


@dataclass
class CustomersModel:
    """Per customer, its tracked states in commit order (what SCD2 history must show)."""

    states: dict[int, list[Tracked]] = field(default_factory=dict)


class CustomersWorkload:
    """Changes to `public.<table>(customer_id int PRIMARY KEY, name, email, country,
    updated_at timestamp)` at `rate` transactions per second, one change each."""

    def __init__(self, settings: Settings, table: str, rate: float, seed: int) -> None:
        self.settings, self.table, self.rate = settings, table, rate
        self.rng = random.Random(seed)  # noqa: S311 - test data
        self.model = CustomersModel()
        self.changes = 0
        self._next_id = 1

    def run(self, stop: threading.Event) -> None:
        from lakehouse.devstack import pg

        interval = 1.0 / self.rate
        due = time.monotonic()
        with pg.connect(self.settings) as conn:
            conn.autocommit = True
            while not stop.is_set():
                self.change(conn)
                due += interval
                time.sleep(max(0.0, due - time.monotonic()))

    def insert(self, conn: Any) -> int:
        """A new customer; its id."""
        self.change(conn, roll=0.0)
        return self._next_id - 1

    def change(self, conn: Any, roll: float | None = None) -> None:
        live = [k for k, s in self.model.states.items() if s[-1] is not None]
        roll = self.rng.random() if roll is None else roll
        # `timestamp` (no time zone) in PostgreSQL, so a naive value, whole seconds: exact
        at = datetime(2026, 1, 1) + timedelta(seconds=self.changes)  # noqa: DTZ001
        state: Tracked
        if roll < 0.35 or len(live) < 5:
            key, self._next_id = self._next_id, self._next_id + 1
            state = self._state(key)
            conn.execute(
                f"INSERT INTO public.{self.table} VALUES (%s, %s, %s, %s, %s)", (key, *state, at)
            )
        elif roll < 0.75:
            key = self.rng.choice(live)
            state = self._state(key)
            conn.execute(
                f"UPDATE public.{self.table} SET name = %s, email = %s, country = %s, "
                "updated_at = %s WHERE customer_id = %s",
                (*state, at, key),
            )
        elif roll < 0.9:  # only updated_at: no new SCD2 version
            key = self.rng.choice(live)
            state = self.model.states[key][-1]
            conn.execute(
                f"UPDATE public.{self.table} SET updated_at = %s WHERE customer_id = %s", (at, key)
            )
        else:
            key, state = self.rng.choice(live), None
            conn.execute(f"DELETE FROM public.{self.table} WHERE customer_id = %s", (key,))
        self.model.states.setdefault(key, []).append(state)
        self.changes += 1

    def _state(self, key: int) -> tuple[str, str, str]:
        n = self.rng.randint(0, 9999)
        country = self.rng.choice(("DE", "FR", "US", "JP", "BR"))
        return (f"name {key}-{n}", f"c{key}.{n}@example.com", country)

    def expected_history(self) -> list[tuple[int, str, str, str, bool]]:
        """(customer_id, name, email, country, open) of every version a clean SCD2 run keeps:
        a new version when a tracked column changes, the last one open unless deleted."""
        versions: list[tuple[int, str, str, str, bool]] = []
        for key, states in self.model.states.items():
            previous: Tracked = None
            for state in states:
                if state != previous:
                    if previous is not None:  # closed by the change or the delete
                        versions[-1] = (*versions[-1][:4], False)
                    if state is not None:
                        versions.append((key, *state, True))
                previous = state
        return versions
