"""File access through Hadoop's FileSystem (via the session's JVM), so the same code reads and
writes a local directory, HDFS or s3a:// alike. Used for Delta logs and streaming checkpoints."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.core.spark import java_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _fs_and_path(spark: SparkSession, path: str) -> tuple[Any, Any]:
    context: Any = spark.sparkContext  # py4j handles are untyped
    hadoop_path = java_class(spark, "org.apache.hadoop.fs.Path")(path)
    return hadoop_path.getFileSystem(context._jsc.hadoopConfiguration()), hadoop_path


def exists(spark: SparkSession, path: str) -> bool:
    fs, hadoop_path = _fs_and_path(spark, path)
    return bool(fs.exists(hadoop_path))


def list_names(spark: SparkSession, directory: str) -> list[str]:
    """File names directly under `directory` (empty if it does not exist)."""
    fs, hadoop_path = _fs_and_path(spark, directory)
    if not fs.exists(hadoop_path):
        return []
    return [str(status.getPath().getName()) for status in fs.listStatus(hadoop_path)]


def read_text(spark: SparkSession, path: str) -> str:
    fs, hadoop_path = _fs_and_path(spark, path)
    stream = fs.open(hadoop_path)
    try:
        data = java_class(spark, "org.apache.commons.io.IOUtils").toByteArray(stream)
    finally:
        stream.close()
    return bytes(data).decode("utf-8")


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write (or overwrite) a small text file."""
    fs, hadoop_path = _fs_and_path(spark, path)
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def delete(spark: SparkSession, path: str) -> None:
    """Recursive delete; a missing path is fine."""
    fs, hadoop_path = _fs_and_path(spark, path)
    if fs.exists(hadoop_path):
        fs.delete(hadoop_path, True)


def copy_to_local(spark: SparkSession, source: str, local_dir: Path) -> None:
    """Copy the file or directory `source` into the local directory `local_dir` (no `.crc`
    files: written through the raw local file system)."""
    fs, hadoop_path = _fs_and_path(spark, source)
    target = java_class(spark, "org.apache.hadoop.fs.Path")(str(local_dir))
    fs.copyToLocalFile(False, hadoop_path, target, True)


def copy_from_local(spark: SparkSession, local: Path, target: str) -> None:
    """Copy the local file `local` to the path `target`, replacing a file there. (File by
    file on purpose: Hadoop's copy of a directory nests it inside an existing one.)"""
    fs, hadoop_path = _fs_and_path(spark, target)
    source = java_class(spark, "org.apache.hadoop.fs.Path")(local.resolve().as_uri())
    fs.copyFromLocalFile(False, True, source, hadoop_path)


def require_writable(spark: SparkSession, root: str) -> None:
    """Fail at once, in one line, when the storage root cannot be written (a typo, a file where
    a folder should be, a read-only mount, missing credentials): the first Delta write would
    otherwise end the job with a page of Java stack. Creates the root, then writes and deletes
    a probe file in it, named for this process and call: jobs a scheduler starts together
    probe the same root at once, and must not delete each other's probe."""
    import os
    import uuid

    from py4j.protocol import Py4JJavaError

    from lakehouse.core.errors import UsageError

    probe = f"{root.rstrip('/')}/.lakehouse-write-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        fs, hadoop_path = _fs_and_path(spark, root)
        fs.mkdirs(hadoop_path)
        write_text(spark, probe, "")
        delete(spark, probe)
    except Py4JJavaError as error:
        cause = error.java_exception
        reason = f"{cause.getClass().getSimpleName()}: {cause.getMessage()}"
        raise UsageError(
            f"storage.root {root} cannot be written ({reason}); fix storage.root "
            "(LAKEHOUSE__STORAGE__ROOT), or the permissions or credentials of that location"
        ) from None


@dataclass(frozen=True)
class OffsetLogEntry:
    """One batch's file of a streaming query's offset log (`{checkpoint}/offsets/{batch}`):
    Spark writes a version line, the batch's metadata (`batchTimestampMs`, the conf), then one
    JSON line per source (`-` for a source with no offset yet)."""

    metadata: dict[str, Any]
    sources: list[dict[str, Any] | None]


def offset_log(spark: SparkSession, checkpoint: str, batch_id: int) -> OffsetLogEntry:
    """The offset log entry of `batch_id` in the query of `checkpoint`."""
    lines = read_text(spark, f"{checkpoint}/offsets/{batch_id}").splitlines()
    sources = [json.loads(line) if line.startswith("{") else None for line in lines[2:]]
    return OffsetLogEntry(json.loads(lines[1]), sources)


def committed_source_offset(spark: SparkSession, checkpoint: str) -> dict[str, Any] | None:
    """The end offset of a streaming query's source in its last *committed* batch (an
    uncommitted batch is planned again from the same start), as the source wrote it; None
    before the first commit (the queries here read one source)."""
    commits = [int(n) for n in list_names(spark, f"{checkpoint}/commits") if n.isdigit()]
    if not commits:
        return None
    return next(iter(offset_log(spark, checkpoint, max(commits)).sources), None)
