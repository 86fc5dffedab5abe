"""What every streaming job shares: the trigger, and waiting for a query with a clean stop on
SIGTERM."""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

from lakehouse.core.settings import SettingsError

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

log = logging.getLogger(__name__)

TRIGGERS = ("available-now", "continuous")


def check_trigger(trigger: str) -> None:
    if trigger not in TRIGGERS:
        raise SettingsError(f"--trigger {trigger!r}: use one of {', '.join(TRIGGERS)}")


def with_trigger(writer: DataStreamWriter, trigger: str, interval: str) -> DataStreamWriter:
    """`available-now`: everything there now, then stop; `continuous`: a micro-batch every
    `interval` until stopped."""
    if trigger == "continuous":
        return writer.trigger(processingTime=interval)
    return writer.trigger(availableNow=True)


# SIGTERM/SIGINT ask a continuous job to stop; the one flag every wait below consults. It is
# raised from the moment the job starts (`stop_on_signals` in `core.jobs.run_job`), so a
# scheduler's SIGTERM during the session's start or a first long batch stops the job cleanly
# (exit 0) instead of killing it half-way with -15.
_stop = threading.Event()
_depth = 0


@contextmanager
def stop_on_signals(trigger: str) -> Iterator[threading.Event]:
    """The event SIGTERM/SIGINT set while the block runs (continuous trigger, main thread);
    nested blocks share it. Elsewhere an event nothing sets: available-now jobs keep the
    default (a signal ends them; an uncommitted batch is redone on the next run)."""
    global _depth
    if trigger != "continuous" or threading.current_thread() is not threading.main_thread():
        yield _stop if _depth else threading.Event()
        return
    previous: dict[signal.Signals, Any] = {}
    if _depth == 0:
        _stop.clear()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            # No py4j call in here: the main thread may be inside one (it is not reentrant).
            log.info("signal %s: stopping; a batch in flight is redone on restart", signum)
            _stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    _depth += 1
    try:
        yield _stop
    finally:
        _depth -= 1
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def await_query(
    query: StreamingQuery,
    trigger: str,
    progress: bool = False,
    detail: Callable[[int], str] | None = None,
    behind: Callable[[dict[str, Any]], str] | None = None,
    rows: Callable[[int], int | None] | None = None,
    between: Callable[[], None] | None = None,
) -> None:
    """Wait for the query. In continuous mode SIGTERM/SIGINT stop it and exit 0; a batch in
    flight is not committed and is redone on restart (Delta commits are atomic and the sink
    idempotent, so even SIGKILL loses or duplicates nothing). With `progress`, one line per
    micro-batch: rows in, what the job did with them (`detail` of the batch id), rate, and
    how far the source is behind (`behind` of the progress report; default: Kafka's). `rows`
    gives the job's own count of a batch's rows where it has one: the query's input count
    counts every scan of the source, so a batch that reads its input twice says twice.
    `between` runs between polls and once after the query ends (a compaction)."""
    lines = _ProgressLines(query, detail, behind or kafka_behind, rows) if progress else None
    with stop_on_signals(trigger) as stop:
        while not stop.is_set():
            done = query.awaitTermination(1)
            if lines:
                lines.log_new()
            if between:
                between()
            if done:
                break
        if stop.is_set():
            log.info("stopping %s", query.name)
            query.stop()
        error = query.exception()
        if error is not None:
            raise error


class _ProgressLines:
    """Logs each micro-batch of a query once, from its progress reports (polled: no listener
    thread calls back into Python)."""

    def __init__(
        self,
        query: StreamingQuery,
        detail: Callable[[int], str] | None = None,
        behind: Callable[[dict[str, Any]], str] | None = None,
        rows: Callable[[int], int | None] | None = None,
    ) -> None:
        self.query = query
        self.detail = detail
        self.behind = behind or kafka_behind
        self.rows = rows
        self.last = -1

    def log_new(self) -> None:
        for report in self.query.recentProgress:
            batch = int(report.get("batchId", -1))
            rows = int(report.get("numInputRows", 0))
            # An idle trigger (no rows) is reported under the id the next batch will run
            # with: it says nothing and must not mark that batch as logged.
            if batch <= self.last or rows == 0:
                continue
            self.last = batch
            rate = float(report.get("processedRowsPerSecond") or 0.0)
            counted = self.rows(batch) if self.rows else None
            if counted is not None:  # the same batch time, the job's own count
                rows, rate = counted, rate * counted / rows
            log.info(
                "%s batch %d: %d rows in%s, %.0f rows/s%s",
                self.query.name,
                batch,
                rows,
                self.detail(batch) if self.detail else "",
                rate,
                self.behind(report),
            )


def kafka_behind(report: dict[str, Any]) -> str:
    """`, N records behind` for Kafka sources (what the broker holds past this batch)."""
    behind = [
        int(float(value))
        for source in report.get("sources", [])
        for key, value in (source.get("metrics") or {}).items()
        if key == "maxOffsetsBehindLatest" and value is not None
    ]
    return f", {max(behind)} records behind (max per partition)" if behind else ""


def delta_behind(newest: Callable[[], int]) -> Callable[[dict[str, Any]], str]:
    """`, N commit(s) behind (read through vX of vY)` for a Delta source whose newest version
    `newest()` gives: how many versions of the source the query has still to read."""

    def behind(report: dict[str, Any]) -> str:
        sources = report.get("sources") or []
        end = sources[0].get("endOffset") if sources else None
        if not end:
            return ""
        read = delta_read_through(json.loads(end) if isinstance(end, str) else end)
        latest = newest()
        return f", {max(latest - read, 0)} commit(s) behind (read through v{read} of v{latest})"

    return behind


# DeltaSourceOffset's index once every file of its version was read (END_INDEX is
# Long.MaxValue; anything that near it means the same).
_DELTA_END_INDEX = 2**63 - 1 - 100


def delta_read_through(offset: Mapping[str, Any]) -> int:
    """The newest version a Delta source offset has read in full: `reservoirVersion` V with
    index -1 (none of V's files yet) or a partly read V means V-1; END_INDEX means V."""
    version = int(offset["reservoirVersion"])
    return version if int(offset["index"]) >= _DELTA_END_INDEX else version - 1


def repeat(run: Callable[[], object], trigger: str, interval_s: float) -> None:
    """For the batch jobs: `available-now` runs once; `continuous` runs again every
    `interval_s` seconds until SIGTERM/SIGINT (a run in progress finishes first)."""
    with stop_on_signals(trigger) as stop:
        if stop.is_set():
            return
        run()
        if trigger != "continuous":
            return
        while not stop.wait(interval_s):
            run()
