"""PostgreSQL -> Debezium -> Kafka for real: an INSERT, UPDATE and DELETE arrive as c/u/d
envelopes in commit order, the delete followed by its null-value tombstone."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from lakehouse.core import kafka
from lakehouse.core.settings import Settings
from tests.conftest import pg_connect


def consume(settings: Settings, topic: str, count: int, timeout_s: float = 90.0) -> list[Any]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        kafka.client_config(
            settings.kafka,
            **{
                "group.id": f"smoke-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
            },
        )
    )
    consumer.subscribe([topic])
    messages: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(messages) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            # The topic appears only with the first change; until then the consumer says so.
            if error is not None and (error.retriable() or "UNKNOWN_TOPIC" in str(error)):
                continue
            assert error is None, error
            messages.append(msg)
    finally:
        consumer.close()
    return messages


def test_insert_update_delete_arrive_as_debezium_events(settings: Settings, pg_table: str) -> None:
    from lakehouse.connectors.debezium import delete_connector, register_postgres_connector

    name = f"smoke-{pg_table}"
    prefix = f"smoke{pg_table[-8:]}"
    register_postgres_connector(
        settings, name, prefix, [f"public.{pg_table}"], schemas_enable=False, unwrap=False
    )
    try:
        with pg_connect(settings) as conn:
            conn.execute(f"INSERT INTO public.{pg_table} VALUES (1, 'ada')")
            conn.execute(f"UPDATE public.{pg_table} SET name = 'ada lovelace' WHERE id = 1")
            conn.execute(f"DELETE FROM public.{pg_table} WHERE id = 1")
        messages = consume(settings, f"{prefix}.public.{pg_table}", count=4)
    finally:
        delete_connector(settings, name)

    keys = [json.loads(m.key()) for m in messages]
    values = [None if m.value() is None else json.loads(m.value()) for m in messages]
    assert keys == [{"id": 1}] * 4
    events = [
        None if v is None else (v["op"], v["before"], v["after"], v["source"]["table"])
        for v in values
    ]
    assert events == [
        ("c", None, {"id": 1, "name": "ada"}, pg_table),
        ("u", None, {"id": 1, "name": "ada lovelace"}, pg_table),
        # REPLICA IDENTITY DEFAULT: the delete carries only the key.
        ("d", {"id": 1, "name": ""}, None, pg_table),
        None,  # the tombstone, so log compaction can drop the key
    ]
    lsns = [v["source"]["lsn"] for v in values if v is not None]
    assert lsns == sorted(lsns)
    assert len(set(lsns)) == 3
