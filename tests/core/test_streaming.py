"""The per-batch console line of a continuous job, from a real streaming query's progress
reports: Spark reports an idle trigger under the id the next batch will run with, so a batch
that follows a quiet spell must still get its line."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakehouse.core.streaming import _ProgressLines


def wait(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_a_batch_after_idle_triggers_gets_its_line(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = str(tmp_path / "source")
    spark.range(3).write.format("delta").save(source)
    query = (
        spark.readStream.format("delta")
        .load(source)
        .writeStream.format("noop")
        .queryName("progress_lines")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        lines = _ProgressLines(query)
        with caplog.at_level(logging.INFO, logger="lakehouse.core.streaming"):
            wait(lambda: any(r.get("numInputRows") for r in query.recentProgress))
            lines.log_new()
            # Idle triggers: reported, with no rows, until new data arrives.
            wait(lambda: sum(1 for r in query.recentProgress if not r.get("numInputRows")) >= 2)
            lines.log_new()
            spark.range(5).write.format("delta").mode("append").save(source)
            wait(lambda: sum(1 for r in query.recentProgress if r.get("numInputRows")) >= 2)
            lines.log_new()
    finally:
        query.stop()
    said = [r.getMessage().split(",")[0] for r in caplog.records]
    assert said == ["progress_lines batch 0: 3 rows in", "progress_lines batch 1: 5 rows in"]
