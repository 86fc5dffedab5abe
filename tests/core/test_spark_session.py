"""The session helpers: scoped runtime settings, the JVM options every session gets."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings, SparkSettings
from lakehouse.core.spark import CALL_SITES, JIT_OPTIONS, runtime_conf, session_conf
from lakehouse.explore import notebook_settings

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


def test_the_driver_jvm_compiles_huge_generated_methods(spark: SparkSession) -> None:
    # HotSpot's own answer, not our configuration's: the flag reached the running JVM.
    context: Any = spark.sparkContext  # py4j handles are untyped
    management = context._jvm.java.lang.management.ManagementFactory
    hotspot = management.getPlatformMXBean(
        context._jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    assert hotspot.getVMOption("DontCompileHugeMethods").getValue() == "false"


def test_dataframe_functions_send_no_python_call_site(spark: SparkSession) -> None:
    # PySpark's own answer, cached at its first DataFrame function call: the setting reached
    # it, so no call costs the call-site round trips (bench/README.md, 2026-12-01).
    from pyspark.errors.utils import is_debugging_enabled

    assert spark.conf.get(CALL_SITES) == "false"
    assert is_debugging_enabled() is False


def test_a_notebook_names_the_failing_python_line_unless_its_settings_say_otherwise() -> None:
    said_no = replace(Settings(), spark=replace(SparkSettings(), conf={CALL_SITES: "false"}))

    assert session_conf(Settings())[CALL_SITES] == "false"
    assert session_conf(notebook_settings(Settings()))[CALL_SITES] == "true"
    assert session_conf(notebook_settings(said_no))[CALL_SITES] == "false"


def test_a_jvm_option_from_the_settings_keeps_the_jit_option() -> None:
    settings = replace(
        Settings(),
        spark=replace(
            SparkSettings(), conf={"spark.executor.extraJavaOptions": "-Dlakehouse.test=1"}
        ),
    )

    conf = session_conf(settings)

    assert conf["spark.executor.extraJavaOptions"] == f"{JIT_OPTIONS} -Dlakehouse.test=1"
    assert conf["spark.driver.extraJavaOptions"] == JIT_OPTIONS
