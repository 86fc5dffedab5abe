"""`lakehouse`: the operator's command line.

    lakehouse setup                 resolve the JVM packages and service jars (idempotent)
    lakehouse services start|stop|status [kafka|postgres|connect|all]
    lakehouse demo                  start the services and run the demo pipeline
    lakehouse spark-submit-args     the --packages/--conf a cluster spark-submit needs
    lakehouse status                services, and per source what bronze holds
    lakehouse reset TABLE           full refresh (refused for protected tables such as bronze)
    lakehouse unprotect TABLE --reason TEXT / lakehouse protect TABLE   (recorded)
    lakehouse validate TABLE        Great Expectations over a table's current rows, Data Docs;
                                    exit 1 if an expectation failed
    lakehouse replay TABLE [--fix COLUMN=SQL ...] [--where SQL]
                                    re-check quarantined rows (after a repair) and apply those
                                    that now pass to silver

`main()` only parses arguments; each command loads validated settings and calls the library.
Errors print one line on stderr and exit non-zero.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lakehouse.core import tables
from lakehouse.core.settings import Settings, SettingsError, load_settings, project_root
from lakehouse.core.spark import build_session, session_conf
from lakehouse.devstack import services
from lakehouse.quality import validate

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SERVICE_NAMES = ("kafka", "postgres", "connect", "all")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakehouse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="local", help="config overlay conf/ENV and .env.ENV")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup", help="resolve JVM packages and service jars into .lakehouse/")
    svc = sub.add_parser("services", help="start, stop or inspect the local services")
    svc.add_argument("action", choices=("start", "stop", "status"))
    svc.add_argument("name", nargs="?", default="all", choices=SERVICE_NAMES)
    demo = sub.add_parser("demo", help="start the services and run the demo pipeline")
    demo.add_argument("--events", type=int, default=10, help="how many sample events (default 10)")
    sub.add_parser("spark-submit-args", help="print the spark-submit options for a cluster")
    sub.add_parser("status", help="services, and per source what bronze holds")
    reset = sub.add_parser("reset", help="full refresh of a table (refused if protected)")
    reset.add_argument("table", help="LAYER.TABLE, e.g. silver.orders")
    unprotect = sub.add_parser("unprotect", help="lift reset protection (recorded)")
    unprotect.add_argument("table")
    unprotect.add_argument("--reason", required=True, help="why; kept in _system/protection_log")
    protect = sub.add_parser("protect", help="restore reset protection (recorded)")
    protect.add_argument("table")
    check = sub.add_parser(
        "validate",
        help="Great Expectations over a table's current rows; renders Data Docs; "
        "exit 1 if an expectation failed",
    )
    check.add_argument("table", help="silver.TABLE (or just TABLE), declared in tables.yml")
    replay = sub.add_parser(
        "replay",
        help="re-check quarantined rows of a silver table, optionally repaired, and apply those "
        "that now pass",
    )
    replay.add_argument("table", help="silver.TABLE (or just TABLE), declared in tables.yml")
    replay.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="COLUMN=SQL",
        help="repair: set COLUMN to a SQL expression over the record, e.g. amount=abs(amount); "
        "repeatable",
    )
    replay.add_argument(
        "--where", help="only quarantined rows matching this SQL condition, e.g. 'offset = 42'"
    )
    return parser


def cmd_setup(settings: Settings, _args: argparse.Namespace) -> None:
    services.install(project_root())
    # Creating a session once makes Ivy resolve the Delta and Kafka packages into the cache.
    spark = build_session(settings, "lakehouse-setup")
    try:
        spark.range(1).count()
    finally:
        spark.stop()
    print(f"JVM packages ready in {settings.spark.ivy_dir}: {', '.join(settings.spark.packages)}")


def cmd_services(_settings: Settings, args: argparse.Namespace) -> None:
    root = project_root()
    starters: dict[str, Callable[[], None]] = {
        "kafka": lambda: services.start_kafka(root),
        "postgres": lambda: services.start_postgres(root),
        "connect": lambda: services.start_connect(root),
        "all": lambda: services.start_all(root),
    }
    stoppers: dict[str, Callable[[], None]] = {
        "kafka": lambda: services.stop_kafka(root),
        "postgres": lambda: services.stop_postgres(root),
        "connect": lambda: services.stop_connect(root),
        "all": lambda: services.stop_all(root),
    }
    if args.action == "start":
        starters[args.name]()
    elif args.action == "stop":
        stoppers[args.name]()
    for name, state in services.status(root).items():
        print(f"{name:10s} {state}")


def cmd_demo(settings: Settings, args: argparse.Namespace) -> None:
    from lakehouse.devstack import demo

    services.start_all(project_root())
    spark = build_session(settings, "lakehouse-demo")
    try:
        demo.run(spark, settings, events=args.events)
    finally:
        spark.stop()


def cmd_spark_submit_args(settings: Settings, _args: argparse.Namespace) -> None:
    conf = session_conf(settings)
    parts = ["--packages", conf.pop("spark.jars.packages")]
    for key in ("spark.app.name", "spark.master", "spark.driver.host", "spark.driver.bindAddress"):
        conf.pop(key, None)
    for key, value in sorted(conf.items()):
        parts += ["--conf", f"{key}={value}"]
    print(shlex.join(parts))


def _with_session(settings: Settings, name: str, body: Callable[[SparkSession], None]) -> None:
    spark = build_session(settings, name)
    try:
        body(spark)
    finally:
        spark.stop()


def cmd_status(settings: Settings, _args: argparse.Namespace) -> None:
    from lakehouse.status import bronze_summary, silver_summary

    for name, state in services.status(project_root()).items():
        print(f"{name:10s} {state}")

    def body(spark: SparkSession) -> None:
        print("\nbronze (per source):")
        bronze_summary(spark, settings).show(truncate=False)
        print("silver (per table; expectations of the last batch):")
        silver_summary(spark, settings).show(truncate=False)

    _with_session(settings, "lakehouse-status", body)


def _fixes(pairs: Sequence[str]) -> list[tuple[str, str]]:
    fixes = []
    for pair in pairs:
        column, sep, expression = pair.partition("=")
        if not sep or not column.strip() or not expression.strip():
            raise SettingsError(f"--fix {pair!r}: use COLUMN=SQL, e.g. --fix amount=abs(amount)")
        fixes.append((column.strip(), expression.strip()))
    return fixes


def cmd_replay(settings: Settings, args: argparse.Namespace) -> None:
    from lakehouse.silver.refine import replay_quarantine

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

    _with_session(settings, "lakehouse-replay", body)


def cmd_reset(settings: Settings, args: argparse.Namespace) -> None:
    table = args.table
    checkpoints = [
        tables.checkpoint_path(settings, "ingest", name)
        for name, source in settings.sources.items()
        if f"bronze.{source.bronze_table or name}" == table
    ]
    _with_session(
        settings, "lakehouse-reset", lambda s: tables.reset(s, settings, table, checkpoints)
    )
    print(f"{table}: reset (data and {len(checkpoints)} checkpoint(s) removed)")


def cmd_unprotect(settings: Settings, args: argparse.Namespace) -> None:
    def body(spark: SparkSession) -> None:
        version = tables.unprotect(spark, settings, args.table, args.reason)
        print(f"{args.table}: protection lifted at version {version} (recorded)")

    _with_session(settings, "lakehouse-unprotect", body)


def cmd_protect(settings: Settings, args: argparse.Namespace) -> None:
    def body(spark: SparkSession) -> None:
        version = tables.protect(spark, settings, args.table)
        print(f"{args.table}: protected again at version {version} (recorded)")

    _with_session(settings, "lakehouse-protect", body)


def cmd_validate(settings: Settings, args: argparse.Namespace) -> None:
    # GX logs hundreds of INFO lines about its own internals; the report is what matters.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    # An unknown table or a malformed declaration is reported before a JVM starts.
    validate.build_expectations(validate.resolve_table(settings, args.table))

    def body(spark: SparkSession) -> None:
        report = validate.validate(spark, settings, args.table)
        print(validate.format_report(report))
        if not report.success:
            raise validate.ValidationFailed(report)

    _with_session(settings, "lakehouse-validate", body)


COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], None]] = {
    "setup": cmd_setup,
    "services": cmd_services,
    "demo": cmd_demo,
    "spark-submit-args": cmd_spark_submit_args,
    "status": cmd_status,
    "reset": cmd_reset,
    "unprotect": cmd_unprotect,
    "protect": cmd_protect,
    "validate": cmd_validate,
    "replay": cmd_replay,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = load_settings(args.env)
        COMMANDS[args.command](settings, args)
    except validate.ValidationFailed as exc:
        print(f"lakehouse {args.command}: {exc}", file=sys.stderr)
        return 1
    except tables.ProtectedTableError as exc:
        print(f"lakehouse {args.command}: {exc}", file=sys.stderr)
        return 4
    except (SettingsError, services.ServiceError, ValueError) as exc:
        print(f"lakehouse {args.command}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
