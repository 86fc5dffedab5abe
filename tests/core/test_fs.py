"""Storage helpers against the real Hadoop file system Spark writes through."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import SparkSession

from lakehouse.core.fs import require_writable


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
