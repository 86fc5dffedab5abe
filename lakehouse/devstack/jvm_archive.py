"""The class archive the test suite's driver JVMs share (`./dev test`).

The suite starts a driver JVM for every job it runs as a process: each loads and verifies
tens of thousands of Spark, Hadoop and Delta classes again, and two cores pay for it. Java's
class data sharing maps them from an archive instead. `./dev test` runs this module once,
under `-XX:ArchiveClassesAtExit=FILE` in SPARK_SUBMIT_OPTS, and then starts every driver with
`-XX:SharedArchiveFile=FILE`: a job that wrote, read and merged a Delta table here took 30 CPU
seconds instead of 39 (C2) and 17 instead of 35 with C1 alone (2026-11-30). An archive a JVM
cannot use (another JDK, another class path) is ignored: the classes load as before.

Run as `python -m lakehouse.devstack.jvm_archive`: a local session of the test settings does
what a job does (a Delta write, a read, a MERGE) on a throwaway root, and exits.
"""

from __future__ import annotations

import tempfile
from typing import Any


def exercise() -> None:
    from delta.tables import DeltaTable
    from pyspark import SparkContext

    from lakehouse.core.settings import load_settings
    from lakehouse.core.spark import build_session

    with tempfile.TemporaryDirectory() as root:
        settings = load_settings("test", overrides={"storage.root": root})
        spark = build_session(settings, "class-archive")
        jvm: Any = getattr(SparkContext._gateway, "proc", None)  # py4j handles are untyped
        try:
            path = settings.storage.path("bronze", "archive")
            spark.range(100).write.format("delta").save(path)
            spark.read.format("delta").load(path).count()
            target = DeltaTable.forPath(spark, path).alias("t")
            target.merge(spark.range(50).alias("s"), "t.id = s.id").whenMatchedDelete().execute()
        finally:
            spark.stop()
    # The JVM writes the archive as it exits, which it does when its stdin closes: wait for
    # it, or the caller would look for the file before it is there.
    if jvm is not None:
        jvm.stdin.close()
        jvm.wait(timeout=240)


if __name__ == "__main__":
    exercise()
