"""Kafka Connect's REST API (`connect.url`), as `lakehouse connectors` and the dev stack use it:
connector names, status, waiting until a connector and its tasks run."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from lakehouse.core.errors import ServiceError, ServiceUnreachable, one_line
from lakehouse.core.settings import Settings

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
SEE_LOG = "see the Kafka Connect worker's log (dev stack: .lakehouse/logs/connect.log)"

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def rest_url(settings: Settings) -> str:
    """The REST API's base URL: `connect.url` without a trailing slash."""
    return settings.connect.url.rstrip("/")


def http(
    method: str, url: str, body: object | None = None, timeout: float = 15.0
) -> tuple[int, Any]:
    """JSON over HTTP; returns (status, parsed body or None). Raises only when unreachable."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (our loopback URL)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status, raw = int(response.status), response.read()
    except urllib.error.HTTPError as error:
        status, raw = int(error.code), error.read()
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ServiceUnreachable(
            f"Kafka Connect is not reachable at {url} ({reason}); "
            "is the worker running? (dev stack: `lakehouse services start connect`)"
        ) from None
    try:
        parsed: Any = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode("utf-8", "replace")
    return status, parsed


def error_message(body: object) -> str:
    """Connect's error message in an answer's body, as one line."""
    return one_line(body.get("message") if isinstance(body, dict) else body)


def check_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise ServiceError(f"connector name {name!r}: use letters, digits, '.', '_' or '-'")
    return name


def connector_url(settings: Settings, name: str) -> str:
    """`<connect.url>/connectors/<name>`, the name checked first."""
    return f"{rest_url(settings)}/connectors/{urllib.parse.quote(check_name(name))}"


def list_connectors(settings: Settings) -> list[str]:
    """The names of the connectors the worker runs."""
    url = f"{rest_url(settings)}/connectors"
    status, body = http("GET", url)
    if status != 200 or not isinstance(body, list):
        raise ServiceError(f"GET {url} answered HTTP {status}")
    return [str(item) for item in body]


def _trace_line(trace: object) -> str:
    """First line of a Java trace plus its innermost `Caused by:`, as one line."""
    if not isinstance(trace, str) or not trace.strip():
        return "no trace"
    lines = [line.strip() for line in trace.strip().splitlines()]
    causes = [line for line in lines if line.startswith("Caused by:")]
    return lines[0][:400] + (f" / {causes[-1][:300]}" if causes else "")


def running(name: str, body: dict[str, Any]) -> bool:
    """Whether a connector status says it and all its tasks run; raises when one FAILED."""
    connector = body.get("connector", {})
    tasks = body.get("tasks", [])
    if connector.get("state") == "FAILED":
        raise ServiceError(
            f"connector {name!r} FAILED: {_trace_line(connector.get('trace'))}; {SEE_LOG}"
        )
    for task in tasks:
        if task.get("state") == "FAILED":
            raise ServiceError(
                f"connector {name!r} task {task.get('id')} FAILED: "
                f"{_trace_line(task.get('trace'))}; {SEE_LOG}"
            )
    return bool(
        connector.get("state") == "RUNNING"
        and tasks
        and all(task.get("state") == "RUNNING" for task in tasks)
    )


def wait_connector_running(settings: Settings, name: str, timeout: float = 120.0) -> None:
    """Wait until connector `name` and all its tasks are RUNNING; fail fast on FAILED."""
    url = f"{connector_url(settings, name)}/status"
    deadline = time.monotonic() + timeout
    while True:
        status, body = http("GET", url)
        if status == 200 and isinstance(body, dict) and running(name, body):
            return
        if time.monotonic() > deadline:
            raise ServiceError(
                f"connector {name!r} not RUNNING after {timeout:.0f}s (last status: "
                f"{json.dumps(body)[:300]}); {SEE_LOG}"
            )
        time.sleep(0.5)
