"""`lakehouse status`, `reset`, `protect`/`unprotect`, `validate`, `replay` and
`spark-submit-args`: the commands about the tables, each a call into the library."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakehouse.cli.common import Command, with_session
from lakehouse.core import protection
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings, SettingsError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def spark_submit_args(settings: Settings, _args: argparse.Namespace) -> None:
    from lakehouse.core.deploy import library_archive, submit_args

    print(shlex.join(submit_args(settings, library_archive())))


def pipeline(settings: Settings, args: argparse.Namespace) -> None:
    """The jobs of one pipeline run, stage by stage (what a scheduler runs)."""
    from dataclasses import asdict

    from lakehouse.core.pipeline import plan

    steps = plan(settings)
    if args.json:
        print(json.dumps([{**asdict(s), "task_id": s.task_id} for s in steps], indent=2))
        return
    width = max((len(step.task_id) for step in steps), default=0)
    for step in steps:
        # The task id is the name `run_pipeline --only` takes.
        command = f"jobs/{step.job}.py {shlex.join(step.args)}"
        print(f"{step.stage:8s} {step.task_id:{width}s}  {command}")


def _json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="as JSON, for a scheduler")


def status(settings: Settings, args: argparse.Namespace) -> None:
    """Each section as a table, or (`--json`) one JSON document with the same rows."""
    from lakehouse import status as summaries

    services = _services(settings)

    def body(spark: SparkSession) -> None:
        sections: dict[str, tuple[str, DataFrame | str]] = {
            "kafka": (
                "kafka (per source partition; lag = records not yet in bronze):",
                _kafka(spark, settings),
            ),
            "bronze": ("bronze (per source):", summaries.bronze_summary(spark, settings)),
            "silver": (
                "silver (per table; lag = bronze commits not refined, age of the oldest; "
                "last batch's rules):",
                summaries.silver_summary(spark, settings),
            ),
        }
        if settings.offline:
            sections["offline"] = (
                "offline (per table; late changes to backfilled buckets are not applied):",
                summaries.offline_summary(spark, settings),
            )
        if settings.gold:
            sections["gold"] = (
                "gold (per table; lag = source commits not yet built):",
                summaries.gold_summary(spark, settings),
            )
        if args.json:
            document: dict[str, object] = {"services": services}
            for key, (_title, frame) in sections.items():
                document[key] = frame if isinstance(frame, str) else _records(frame)
            print(json.dumps(document, indent=2, default=str))
            return
        for name, state in services.items():
            print(f"{name:10s} {state}")
        for title, frame in sections.values():
            print(f"\n{title}" if title.startswith("kafka") else title)
            if isinstance(frame, str):
                print(f"  {frame}\n")
            else:
                frame.show(truncate=False)

    with_session(settings, "lakehouse-status", body)


def _kafka(spark: SparkSession, settings: Settings) -> DataFrame | str:
    """The lag per partition, or why it cannot be had (status still shows the tables)."""
    from lakehouse.core.kafka import KafkaError
    from lakehouse.status import kafka_summary

    try:
        return kafka_summary(spark, settings)
    except KafkaError as error:
        return str(error)


def _records(frame: DataFrame) -> list[dict[str, object]]:
    """Rows as JSON-ready dicts (times as ISO-8601 strings)."""
    return [
        {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in row.asDict().items()}
        for row in frame.collect()
    ]


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="one JSON document (for monitoring) instead of tables"
    )


def _services(settings: Settings) -> dict[str, str]:
    """The local services' state, when this machine runs the dev stack (a cluster or a
    production host has none; status then shows only the tables)."""
    try:
        from lakehouse.cli.stack import services_status
    except ImportError:  # pragma: no cover - a deployment without the dev stack
        return {}
    return services_status(settings)


def _table_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="LAYER.TABLE, e.g. silver.orders")


def reset(settings: Settings, args: argparse.Namespace) -> None:
    """A full refresh, done by the layer that owns the table (the same as its job's
    --full-refresh); protected tables refuse it."""
    layer, _, name = args.table.partition(".")

    def body(spark: SparkSession) -> None:
        if layer == "bronze":
            from lakehouse.bronze.ingest import reset as reset_bronze

            removed = reset_bronze(spark, settings, args.table)
            print(f"{args.table}: reset (data and {removed} checkpoint(s) removed)")
        elif layer == "silver":
            from lakehouse.silver.refine import full_refresh

            full_refresh(spark, settings, name)
            print(
                f"{args.table}: reset (data, checkpoint and quarantined rows removed; the next "
                f"refine_silver --table {name} rebuilds it from bronze)"
            )
        elif layer == "gold":
            from lakehouse.gold.build import full_refresh as refresh_gold

            settings.gold_table(name)
            refresh_gold(spark, settings, name)
            print(f"{args.table}: reset (the next build_gold --table {name} rebuilds it)")
        elif layer == "offline":
            raise UsageError(
                f"lakehouse reset {args.table}: offline tables hold backfilled corrections that "
                "exist nowhere else; correct a window with backfill, or serve more from "
                "realtime with lakehouse boundary TABLE --set"
            )
        else:
            raise UsageError(f"lakehouse reset {args.table}: use LAYER.TABLE, e.g. silver.orders")

    with_session(settings, "lakehouse-reset", body)


def _unprotect_arguments(parser: argparse.ArgumentParser) -> None:
    _table_argument(parser)
    parser.add_argument("--reason", required=True, help="why; kept in _system/protection_log")


def unprotect(settings: Settings, args: argparse.Namespace) -> None:
    def body(spark: SparkSession) -> None:
        version = protection.unprotect(spark, settings, args.table, args.reason)
        print(f"{args.table}: protection lifted at version {version} (recorded)")

    with_session(settings, "lakehouse-unprotect", body)


def protect(settings: Settings, args: argparse.Namespace) -> None:
    def body(spark: SparkSession) -> None:
        version = protection.protect(spark, settings, args.table)
        print(f"{args.table}: protected again at version {version} (recorded)")

    with_session(settings, "lakehouse-protect", body)


def _declared_table_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="silver.TABLE (or just TABLE), declared in tables.yml")


def validate(settings: Settings, args: argparse.Namespace) -> None:
    from lakehouse.quality.report import ValidationFailed, format_report
    from lakehouse.quality.suite import build_expectations, resolve_table
    from lakehouse.quality.validate import validate as run_validation

    # GX logs hundreds of INFO lines about its own internals; the report is what matters.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    # An unknown table or a malformed declaration is reported before a JVM starts.
    build_expectations(resolve_table(settings, args.table))

    def body(spark: SparkSession) -> None:
        report = run_validation(spark, settings, args.table)
        print(format_report(report))
        if not report.success:
            raise ValidationFailed(report)

    with_session(settings, "lakehouse-validate", body)


def _replay_arguments(parser: argparse.ArgumentParser) -> None:
    _declared_table_argument(parser)
    parser.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="COLUMN=SQL",
        help="repair: set COLUMN to a SQL expression over the record, e.g. amount=abs(amount); "
        "repeatable",
    )
    parser.add_argument(
        "--where", help="only quarantined rows matching this SQL condition, e.g. 'offset = 42'"
    )


def _fixes(pairs: Sequence[str]) -> list[tuple[str, str]]:
    fixes = []
    for pair in pairs:
        column, sep, expression = pair.partition("=")
        if not sep or not column.strip() or not expression.strip():
            raise SettingsError(f"--fix {pair!r}: use COLUMN=SQL, e.g. --fix amount=abs(amount)")
        fixes.append((column.strip(), expression.strip()))
    return fixes


def replay(settings: Settings, args: argparse.Namespace) -> None:
    from lakehouse.silver.replay import replay_quarantine

    name = args.table.removeprefix("silver.")
    settings.silver_table(name)  # an unknown table fails before a JVM starts
    fixes = _fixes(args.fix)

    def body(spark: SparkSession) -> None:
        result = replay_quarantine(spark, settings, name, fixes, args.where)
        print(
            f"silver.{name}: {result.considered} quarantined row(s) re-checked: "
            f"{result.replayed} applied to silver, {result.dropped} dropped by a drop rule, "
            f"{result.still_quarantined} still quarantined (recorded in _system/refine_log)"
        )

    with_session(settings, "lakehouse-replay", body)


COMMANDS = {
    "spark-submit-args": Command(
        "build the library archive; print the spark-submit options for a cluster", spark_submit_args
    ),
    "pipeline": Command(
        "the jobs of one pipeline run, stage by stage, from the configuration",
        pipeline,
        _json_argument,
    ),
    "status": Command(
        "services, Kafka lag, and per layer what the tables hold and how far behind they are",
        status,
        _status_arguments,
    ),
    "reset": Command(
        "full refresh of a table, as its job's --full-refresh (refused if protected)",
        reset,
        _table_argument,
    ),
    "unprotect": Command("lift reset protection (recorded)", unprotect, _unprotect_arguments),
    "protect": Command("restore reset protection (recorded)", protect, _table_argument),
    "validate": Command(
        "Great Expectations over a table's current rows; renders Data Docs; exit 1 if an "
        "expectation failed",
        validate,
        _declared_table_argument,
    ),
    "replay": Command(
        "re-check quarantined rows of a silver table, optionally repaired, and apply those "
        "that now pass",
        replay,
        _replay_arguments,
    ),
}
