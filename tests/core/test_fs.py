"""Storage helpers against the real Hadoop file system Spark writes through."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import SparkSession

from lakehouse.core.fs import committed_source_offset, offset_log, require_writable


def test_jobs_starting_together_each_probe_the_storage_root_without_tripping_the_others(
    spark: SparkSession, tmp_path: Path
) -> None:
    # A scheduler starts a stage's jobs at once; each job's start-up check writes and deletes
    # a probe file in the root. Found by the fault test: with one probe name for all, a job
    # deleted another's probe under it and that job stopped, "storage.root cannot be written".
    root = str(tmp_path / "lake")

    def probe_often(_worker: int) -> int:
        for _ in range(30):
            require_writable(spark, root)
        return 30

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert sum(pool.map(probe_often, range(4))) == 120
    assert sorted(p.name for p in (tmp_path / "lake").iterdir()) == []  # no probe left behind


def test_an_offset_log_entry_gives_the_batch_planning_time_and_the_source_offset(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Read from a real query's checkpoint: the time Spark planned each batch (what a replay
    keeps) and the source's end offset, the same as the file's own lines say."""
    source, target, checkpoint = (str(tmp_path / n) for n in ("source", "target", "checkpoint"))
    planned: list[tuple[int, int]] = []
    for rows in (3, 2):  # two runs, one batch each: batches 0 and 1
        spark.range(rows).write.format("delta").mode("append").save(source)
        before = int(time.time() * 1000)
        query = (
            spark.readStream.format("delta")
            .load(source)
            .writeStream.format("delta")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(target)
        )
        query.awaitTermination()
        planned.append((before, int(time.time() * 1000)))

    for batch_id, (before, after) in enumerate(planned):
        entry = offset_log(spark, checkpoint, batch_id)
        lines = (tmp_path / "checkpoint" / "offsets" / str(batch_id)).read_text().splitlines()
        assert lines[0] == "v1"
        assert entry.sources == [json.loads(lines[2])]
        assert entry.sources[0] is not None
        assert entry.sources[0]["reservoirVersion"] == batch_id + 1  # past the version read
        assert before <= entry.metadata["batchTimestampMs"] <= after
    assert committed_source_offset(spark, checkpoint) == offset_log(spark, checkpoint, 1).sources[0]
