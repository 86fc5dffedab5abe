"""Spark session factory. Nothing here runs at import time: callers pass settings in.

`configure_builder` follows delta's `configure_spark_with_delta_pip`: it configures a builder
you hand it, so notebooks and tests can add their own options before `getOrCreate()`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.core.settings import Settings, project_root

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Whether PySpark names the Python line of a failing DataFrame call in Spark's errors.
CALL_SITES = "spark.python.sql.dataFrameDebugging.enabled"

# Options that make Delta behave as a lakehouse user expects, and keep small local runs fast.
_BASE_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Event time is epoch ms; render and bucket it in UTC, never in the machine's zone.
    "spark.sql.session.timeZone": "UTC",
    # A small local log table does not need 50 partitions to reconstruct its snapshot.
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.adaptive.enabled": "true",
    # Spark keeps 100 compiled generated classes: fewer than repeated refine batches need, so
    # evicted classes were compiled again and again (Janino was 28% of a driver's CPU in a
    # profile of the scd1 property test; with 1,000 that test ran in 68 s, not 108 s).
    "spark.sql.codegen.cache.maxEntries": "1000",
    # Parquet's standard INT64 timestamps, not Spark's legacy INT96 (12-byte values hashed and
    # compared per row): ~50 ns less per timestamp written, and every reader understands them.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # PySpark 4 sends the Python call site of every DataFrame function call to the JVM for
    # error messages (about five more round trips per call): a refine batch builds its parse
    # from ~500 such calls, 0.41 s of it per batch against 0.19 s without (bench/README.md,
    # 2026-12-01). Spark's errors still name the failing expression; `spark.conf` in the
    # settings (or `--conf`) can turn the Python line back on, as notebooks do
    # (`lakehouse.explore.notebook_settings`).
    CALL_SITES: "false",
    # Jobs write logs, not terminals: no progress bars interleaved with log lines.
    "spark.ui.showConsoleProgress": "false",
}


# HotSpot JIT-compiles no method over 8,000 bytes of bytecode (DontCompileHugeMethods): the
# whole-stage code Spark generates for ingest_cdc's CDC columns is larger and ran interpreted:
# 7.1 s per million records against 4.9-5.2 s (bench/README.md, 2026-11-27; silver measured
# within noise either way). Every driver and executor JVM the lakehouse starts or submits lifts
# that limit, ahead of the JVM options the settings give.
JIT_OPTIONS = "-XX:-DontCompileHugeMethods"
JAVA_OPTION_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")

# Options a cluster's spark-submit decides (`--master`); a local session sets them itself.
CLUSTER_OWNED = frozenset({"spark.master", "spark.driver.host", "spark.driver.bindAddress"})


def ivy_dir(settings: Settings) -> str:
    path = Path(settings.spark.ivy_dir)
    return str(path if path.is_absolute() else project_root() / path)


def session_conf(settings: Settings, app_name: str | None = None) -> dict[str, str]:
    """Every Spark option the lakehouse sets, as a plain mapping (also used for spark-submit)."""
    spark = settings.spark
    conf = dict(_BASE_CONF)
    conf.update(
        {
            "spark.app.name": app_name or spark.app_name,
            "spark.jars.packages": ",".join(spark.packages),
            "spark.jars.ivy": ivy_dir(settings),
            "spark.sql.shuffle.partitions": str(spark.shuffle_partitions),
            "spark.ui.enabled": str(spark.ui_enabled).lower(),
            "spark.sql.warehouse.dir": settings.storage.path("_warehouse"),
        }
    )
    if spark.master.startswith("local"):
        conf["spark.master"] = spark.master
        conf["spark.driver.host"] = spark.driver_host
        conf["spark.driver.bindAddress"] = spark.driver_host
    conf.update(spark.conf)
    for key in JAVA_OPTION_KEYS:
        conf[key] = f"{JIT_OPTIONS} {conf.get(key, '')}".strip()
    return conf


def use_utc() -> None:
    """Make this process's local zone UTC. PySpark turns a naive datetime into a TIMESTAMP
    (`F.lit`, `createDataFrame`) and back (`collect`) in its process's zone, while the
    lakehouse's datetimes are naive UTC, as its session renders them: on a host in New York, a
    move stored its buckets five hours late (tests/offline/test_move.py)."""
    os.environ["TZ"] = "UTC"
    time.tzset()


def configure_builder(
    builder: SparkSession.Builder, settings: Settings, app_name: str | None = None
) -> SparkSession.Builder:
    use_utc()
    for key, value in session_conf(settings, app_name).items():
        builder = builder.config(key, value)
    return builder


def build_session(
    settings: Settings, app_name: str | None = None, verbose: bool = False
) -> SparkSession:
    """The session for a job, a test or a notebook. Under spark-submit the JVM already exists
    with the options given on its command line (`--master`, `--conf`, `--jars`): those win,
    the settings only fill the gaps (a builder option would otherwise replace them, and a local
    master would silently take a job off the cluster). A local driver starts quiet unless
    `verbose` (`lakehouse.core.driver`). This process's zone becomes UTC (`use_utc`)."""
    from pyspark.sql import SparkSession

    use_utc()
    conf = session_conf(settings, app_name)
    if submitted():
        given = _submitted_conf() | {"spark.jars.packages", "spark.jars.ivy"}
        conf = {k: v for k, v in conf.items() if k not in given and k not in CLUSTER_OWNED}
    else:
        if settings.spark.master.startswith("local"):
            # The JVM picks its own address before it reads any option: keep it on loopback.
            os.environ.setdefault("SPARK_LOCAL_IP", settings.spark.driver_host)
        conf = _local_driver(settings, conf, verbose)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("INFO" if verbose else "WARN")
    return session


def _local_driver(settings: Settings, conf: dict[str, str], verbose: bool) -> dict[str, str]:
    """The options only a driver JVM this process starts can take: the set-up's resolved jars
    instead of the packages, and the console's log4j2 configuration."""
    from lakehouse.core.driver import log4j_options, resolved_jars

    conf = dict(conf)
    jars = resolved_jars(settings, conf["spark.jars.ivy"])
    if jars:
        del conf["spark.jars.packages"]
        conf["spark.jars"] = ",".join([*filter(None, [conf.get("spark.jars")]), *jars])
    extra = conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = f"{log4j_options(verbose)} {extra}".strip()
    return conf


def submitted() -> bool:
    """Whether this Python process was started by spark-submit (which hands it the gateway of
    the JVM it launched)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _submitted_conf() -> frozenset[str]:
    """The option names spark-submit gave the JVM (its command line and spark-defaults)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; starts nothing
    return frozenset(key for key, _ in SparkConf().getAll())


def java_class(spark: SparkSession, name: str) -> Any:
    """The JVM class `name` (fully qualified), for the few things PySpark has no API for.

    `spark._jvm.org.apache...` would make py4j try "org", "org.apache", ... as classes first,
    and each miss searches every jar on the class path: ~2 ms per call, four times what a
    whole Hadoop file probe costs."""
    from py4j.java_gateway import JavaClass

    context: Any = spark.sparkContext  # py4j handles are untyped
    return JavaClass(name, context._jvm._gateway_client)


@contextmanager
def runtime_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Runtime SQL settings for the duration of the block, then the caller's values again."""
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def analysis_error(plan: Callable[[], DataFrame]) -> str | None:
    """Spark's reason (its first line) when building and analysing `plan` fails, else None:
    how SQL from the configuration is checked against a table's columns before anything
    runs (analysis only, no Spark job)."""
    from pyspark.errors import PySparkException

    try:
        plan().schema  # noqa: B018 - analysing is the check
    except PySparkException as exc:
        return str(exc).strip().splitlines()[0]
    return None
