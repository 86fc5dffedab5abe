"""What every spark-submit job and every `lakehouse` command shares: the common flags, the
session lifecycle, and one clear stderr line with the exit code `core.errors` assigns."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from lakehouse.core.errors import EXIT_OK, verdict
from lakehouse.core.settings import Settings, load_settings
from lakehouse.core.streaming import TRIGGERS, stop_on_signals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")


def base_parser(job: str, description: str) -> argparse.ArgumentParser:
    """The flags every job has: `--env` and `--trigger`."""
    parser = argparse.ArgumentParser(prog=job, description=description)
    parser.add_argument("--env", default="local", help="config overlay conf/ENV and .env.ENV")
    parser.add_argument(
        "--trigger",
        default="available-now",
        choices=TRIGGERS,
        help="available-now: process what is there and exit (default); "
        "continuous: micro-batches until SIGTERM",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also Spark's INFO lines and routine warnings (default: the job's lines, "
        "warnings and errors)",
    )
    return parser


def configure_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # py4j logs every gateway connection at INFO, down to interpreter exit: noise in a job log.
    logging.getLogger("py4j").setLevel(logging.INFO if verbose else logging.WARNING)
    # librdkafka's retries while a broker is down (see lakehouse.core.kafka.CLIENT_LOG).
    logging.getLogger("lakehouse.kafka.client").setLevel(
        logging.DEBUG if verbose else logging.CRITICAL
    )


def run_job(
    job: str,
    env: str,
    body: Callable[[SparkSession, Settings], T],
    trigger: str = "available-now",
    verbose: bool = False,
) -> int:
    """Load settings, build the session, run `body`, always stop the session; the exit code.

    A continuous job stops cleanly (exit 0) on SIGTERM/SIGINT from its very start: one that
    arrives while the session starts skips `body`; one during it ends the query or the run loop
    at its next check (`core.streaming.stop_on_signals`)."""
    from lakehouse.core import fs
    from lakehouse.core.spark import build_session

    configure_logging(verbose)
    with stop_on_signals(trigger) as stop:
        try:
            settings = load_settings(env)
        except Exception as exc:
            return fail(job, exc)
        if stop.is_set():
            return _stopped_early(job)
        spark = build_session(settings, job, verbose)
        error: BaseException | None = None
        try:
            if stop.is_set():
                _stopped_early(job)
            else:
                fs.require_writable(spark, settings.storage.root)
                _print_summary(body(spark, settings))
        except Exception as exc:
            error = exc
            _log_unexpected(job, exc)
        finally:
            spark.stop()
    # The verdict is printed after the session stopped, so it is the job's last line (Spark
    # and py4j log their shutdown).
    return EXIT_OK if error is None else fail(job, error, logged=True)


def _print_summary(result: object) -> None:
    """A result that sums its run up in one line (`summary()`) prints it on stdout: results
    go to stdout, logs to stderr."""
    summary = getattr(result, "summary", None)
    if callable(summary):
        print(summary(), flush=True)


def _stopped_early(job: str) -> int:
    logging.getLogger(job).info("stopped by a signal before it started; nothing ran")
    return EXIT_OK


def _log_unexpected(job: str, exc: BaseException) -> None:
    if verdict(exc)[2]:
        logging.getLogger(job).error("failed", exc_info=exc)


def fail(prog: str, exc: BaseException, logged: bool = False) -> int:
    """Print `prog: <one line>` on stderr for `exc` and return its exit code (its traceback
    is logged first when it was unexpected, unless the caller already `logged` it)."""
    message, code, unexpected = verdict(exc)
    if unexpected and not logged:
        _log_unexpected(prog, exc)
    print(f"{prog}: {message}", file=sys.stderr)
    return code
