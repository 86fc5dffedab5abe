"""The session helpers: scoped runtime settings."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from lakehouse.core.spark import runtime_conf

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`


def test_runtime_conf_applies_inside_and_restores_after_an_error(spark: SparkSession) -> None:
    unset_key, set_key = "spark.sql.maxConcurrentOutputFileWriters", "spark.sql.shuffle.partitions"
    caller_value = spark.conf.get(set_key)
    default = spark.conf.get(unset_key)
    seen: list[tuple[str | None, str | None]] = []

    def fail_inside() -> None:
        with runtime_conf(spark, {unset_key: "2", set_key: "7"}):
            seen.append((spark.conf.get(unset_key), spark.conf.get(set_key)))
            raise RuntimeError("inside")

    try:
        spark.conf.set(set_key, "3")
        with pytest.raises(RuntimeError, match="inside"):
            fail_inside()
        assert seen == [("2", "7")]
        assert (spark.conf.get(unset_key), spark.conf.get(set_key)) == (default, "3")
    finally:
        assert caller_value is not None  # a registered setting always has a value
        spark.conf.set(set_key, caller_value)
