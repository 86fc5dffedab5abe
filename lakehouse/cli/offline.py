"""`lakehouse boundary TABLE [--set TS --reason TEXT]`: an offline table's time boundary, its
history, and moving it by hand (recorded like every other move)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from lakehouse.cli.common import Command, with_session
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _boundary_arguments(parser: argparse.ArgumentParser) -> None:
    from lakehouse.offline.buckets import instant_argument

    parser.add_argument("table", help="an offline table (or its hybrid view) from offline.yml")
    parser.add_argument(
        "--set", dest="to", type=instant_argument, help="move the boundary to this bucket edge"
    )
    parser.add_argument("--reason", default="", help="why (required with --set); recorded")


def boundary(settings: Settings, args: argparse.Namespace) -> None:
    from lakehouse.offline import boundary as boundaries
    from lakehouse.offline.hybrid import resolve

    table, _spec = resolve(settings, args.table)
    if args.to is not None and not args.reason.strip():
        raise UsageError("lakehouse boundary --set needs --reason: say why, it is recorded")

    def body(spark: SparkSession) -> None:
        if args.to is not None:
            moved = boundaries.set_by_hand(spark, settings, table, args.to, args.reason)
            print(f"offline.{table}: boundary set to {moved.boundary.isoformat()} (recorded)")
        now = boundaries.current(spark, settings, table)
        print(
            f"offline.{table}: boundary "
            + (f"{now.boundary.isoformat()} (seq {now.seq})" if now else "none: all realtime")
        )
        boundaries.history(spark, settings, table).orderBy("seq").select(
            "seq",
            "boundary",
            "previous",
            "job",
            "run_id",
            "offline_version",
            "reason",
            "user",
            "at",
        ).show(50, truncate=False)

    with_session(settings, "lakehouse-boundary", body)


COMMANDS = {
    "boundary": Command(
        "an offline table's time boundary and its history; --set moves it by hand (recorded)",
        boundary,
        _boundary_arguments,
    ),
}
