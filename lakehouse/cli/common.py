"""What every `lakehouse` command module shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse.core.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def no_arguments(_parser: argparse.ArgumentParser) -> None:
    """For commands without arguments of their own."""


@dataclass(frozen=True)
class Command:
    help: str
    run: Callable[[Settings, argparse.Namespace], None]
    arguments: Callable[[argparse.ArgumentParser], None] = no_arguments


# `lakehouse --verbose`: Spark's INFO lines too (set once by `lakehouse.cli.main`; one
# command runs per process).
_verbose = [False]


def set_verbose(verbose: bool) -> None:
    _verbose[0] = verbose


def with_session(settings: Settings, name: str, body: Callable[[SparkSession], object]) -> None:
    """Run `body` with a session that is stopped afterwards, whatever happens."""
    from lakehouse.core.spark import build_session

    spark = build_session(settings, name, _verbose[0])
    try:
        body(spark)
    finally:
        spark.stop()
