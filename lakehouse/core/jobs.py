"""What every spark-submit job shares: common flags, the session lifecycle, and one clear
stderr line with a distinct exit code per kind of failure."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from lakehouse.bronze.offsets import DataLossError, StartFromError, parse_start_from
from lakehouse.core.settings import Settings, SettingsError, load_settings
from lakehouse.core.tables import ProtectedTableError
from lakehouse.quality.expectations import ExpectationFailed
from lakehouse.silver.transform import SchemaDriftError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1  # the job ran and failed (Spark error): see the log above the last line
EXIT_USAGE = 2  # a bad flag or config: nothing was run
EXIT_DATA_LOSS = 3  # Kafka no longer holds needed offsets: nothing was written
EXIT_PROTECTED = 4  # a destructive operation on a protected table was refused
EXIT_CONTRACT = 5  # data broke the table's contract (a `fail` expectation, schema drift)


def base_parser(job: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=job, description=description)
    parser.add_argument("--env", default="local", help="config overlay conf/ENV and .env.ENV")
    parser.add_argument(
        "--trigger",
        default="available-now",
        choices=("available-now", "continuous"),
        help="available-now: process what is there and exit (default); "
        "continuous: micro-batches until SIGTERM",
    )
    return parser


def ingest_parser(job: str, description: str) -> argparse.ArgumentParser:
    parser = base_parser(job, description)
    parser.add_argument("--source", required=True, help="a source from conf/*/sources.yml")
    parser.add_argument(
        "--start-from",
        type=_start_from,
        default=None,
        help='earliest | latest | bronze | offsets={"topic":{"0":42}} | timestamp=MS '
        "(only for a new checkpoint; default: the checkpoint, else earliest)",
    )
    parser.add_argument(
        "--historical",
        metavar="PATH_OR_TABLE",
        help="load this Delta snapshot into bronze first, then go live from --start-from",
    )
    parser.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="continue past offsets Kafka has expired (the gap is recorded)",
    )
    return parser


def _start_from(text: str) -> object:
    try:
        return parse_start_from(text)
    except StartFromError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_job(
    job: str,
    env: str,
    body: Callable[[SparkSession, Settings], T],
    argv_for_log: Sequence[str] | None = None,
) -> int:
    """Load settings, build the session, run `body`, always stop the session."""
    from lakehouse.core.spark import build_session

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # py4j logs every gateway connection at INFO, down to interpreter exit: noise in a job log.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        settings = load_settings(env)
    except SettingsError as exc:
        return _fail(job, exc, EXIT_USAGE)
    spark = build_session(settings, job)
    try:
        outcome = _outcome(job, lambda: body(spark, settings))
    finally:
        spark.stop()
    if outcome is None:
        return EXIT_OK
    # The verdict is printed after the session stopped, so it is the job's last line (Spark
    # and py4j log their shutdown).
    return _fail(job, *outcome)


def _outcome(job: str, run: Callable[[], object]) -> tuple[object, int] | None:
    """None when `run` succeeded, else (message, exit code) for what it raised."""
    try:
        run()
    except (SettingsError, StartFromError, ValueError) as exc:
        return exc, EXIT_USAGE
    except DataLossError as exc:
        return exc, EXIT_DATA_LOSS
    except ProtectedTableError as exc:
        return exc, EXIT_PROTECTED
    except (ExpectationFailed, SchemaDriftError) as exc:
        return exc, EXIT_CONTRACT
    except Exception as exc:
        logging.getLogger(job).exception("job failed")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{type(exc).__name__}: {first}", EXIT_FAILED
    return None


def _fail(job: str, message: object, code: int) -> int:
    print(f"{job}: {message}", file=sys.stderr)
    return code


def ingest_main(job: str, kind: str, description: str, argv: Sequence[str] | None) -> int:
    """`main()` of ingest_events and ingest_cdc: the same flags, a different source kind."""
    from lakehouse.bronze.ingest import IngestOptions, ingest

    args = ingest_parser(job, description).parse_args(argv)
    options = IngestOptions(
        args.source, args.start_from, args.trigger, args.historical, args.allow_data_loss
    )
    return run_job(job, args.env, lambda spark, settings: ingest(spark, settings, options, kind))


def refine_main(argv: Sequence[str] | None) -> int:
    """`main()` of refine_silver."""
    from lakehouse.silver.refine import RefineOptions, refine

    parser = base_parser("refine_silver", "bronze Change Data Feed -> silver table")
    parser.add_argument("--table", required=True, help="a silver table from conf/*/tables.yml")
    parser.add_argument(
        "--full-refresh",
        action="store_true",
        help="rebuild the silver table from bronze (drops silver, its checkpoint and its "
        "quarantined rows first)",
    )
    parser.add_argument(
        "--trigger-interval", default="10 seconds", help="micro-batch interval (continuous)"
    )
    args = parser.parse_args(argv)
    options = RefineOptions(args.table, args.trigger, args.full_refresh, args.trigger_interval)
    return run_job(
        "refine_silver", args.env, lambda spark, settings: refine(spark, settings, options)
    )
