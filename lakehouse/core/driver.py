"""What a local driver JVM starts with, so a job's console says what the job does:

- the JVM packages as the jar files the set-up resolved (`lakehouse setup` records them), not
  as Maven coordinates: no Ivy resolution, and no page of its report, at every start;
- a log4j2 configuration that shows warnings and errors but not Spark's routine ones (native
  Hadoop missing, plans truncated in a string, AQE off for a stream...), nor Spark's banner about
  its default profile. `--verbose` shows Spark's INFO lines and everything else.

Under spark-submit the JVM is already running: its command line decides both.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from lakehouse.core.settings import Settings

RESOLUTION_FILE = "lakehouse-resolved.json"

# Routine warnings every run prints that call for no action.
ROUTINE_WARNINGS = (
    "org.apache.hadoop.util.NativeCodeLoader",  # no native Hadoop library: the Java one is used
    "org.apache.spark.util.SparkStringUtils",  # a plan's string was truncated
    "org.apache.spark.sql.catalyst.util.SparkStringUtils",
    "org.apache.spark.sql.execution.streaming.ResolveWriteToStream",  # AQE is off in streams
    "org.apache.spark.sql.util.CaseInsensitiveStringMap",  # an option given twice
    "org.apache.spark.sql.catalyst.analysis.HintErrorLogger",  # a hint Spark could not use
    "org.apache.spark.rdd.MapPartitionsRDD",  # a locally checkpointed RDD was unpersisted
    "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
)


def resolved_jars(settings: Settings, ivy_dir: str) -> list[str] | None:
    """The jar files resolved for `settings.spark.packages` by the set-up, or None when it did
    not record them (or they are gone): the session then resolves the packages itself."""
    record = Path(ivy_dir) / RESOLUTION_FILE
    try:
        saved = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if saved.get("packages") != list(settings.spark.packages):
        return None
    jars = [str(Path(ivy_dir) / "jars" / name) for name in saved.get("jars", [])]
    return jars if jars and all(Path(j).is_file() for j in jars) else None


def record_resolution(settings: Settings, ivy_dir: str, spark_jars: str) -> None:
    """Remember the jars a session resolved for the packages (its `spark.jars`)."""
    names = [Path(j.removeprefix("file:").removeprefix("//")).name for j in spark_jars.split(",")]
    jars = Path(ivy_dir) / "jars"
    if not names or not all((jars / n).is_file() for n in names):
        return  # not jars of this Ivy cache: nothing worth recording
    record = Path(ivy_dir) / RESOLUTION_FILE
    record.write_text(json.dumps({"packages": list(settings.spark.packages), "jars": names}))


def log4j_options(verbose: bool) -> str:
    """The driver JVM option that points log4j2 at the console configuration."""
    return f"-Dlog4j2.configurationFile=file:{_log4j_file(verbose)}"


def _log4j_file(verbose: bool) -> Path:
    level = "info" if verbose else "warn"
    lines = [
        "status = error",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex",
        f"rootLogger.level = {level}",
        "rootLogger.appenderRef.console.ref = console",
        # PySpark counts as a Spark shell: Spark makes its gateway's logger level the root's
        # (WARN when unset, with a banner saying so). The same level, so neither happens.
        "logger.shell.name = org.apache.spark.api.python.PythonGatewayServer",
        f"logger.shell.level = {level}",
        # Parquet's and Jetty's chatter, as in Spark's own default profile.
        "logger.parquet.name = org.apache.parquet",
        "logger.parquet.level = error",
        "logger.jetty.name = org.sparkproject.jetty",
        "logger.jetty.level = warn",
    ]
    if not verbose:
        for i, name in enumerate(ROUTINE_WARNINGS):
            lines += [f"logger.routine{i}.name = {name}", f"logger.routine{i}.level = error"]
    text = "\n".join(lines) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = _private_dir() / f"log4j2-{level}-{digest}.properties"
    if not path.is_file():
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.replace(path)  # concurrent jobs never read half a file
    return path


def _private_dir() -> Path:
    """A directory in the temp dir only this user can write: the JVM executes what its log4j
    configuration names, so another user must not be able to plant one there first."""
    directory = Path(tempfile.gettempdir()) / f"lakehouse-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    info = directory.lstat()
    if directory.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return Path(tempfile.mkdtemp(prefix="lakehouse-"))  # taken by someone else: a fresh one
    return directory
