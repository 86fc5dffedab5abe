"""The JVM side, pinned in one place.

Local sessions (`lakehouse.core.spark.build_session`), `lakehouse spark-submit-args` and the set-up
all read these coordinates, so a job that runs here resolves the same jars on a cluster.
Why these versions: see the README section "Versions".
"""

from __future__ import annotations

SPARK_VERSION = "4.0.0"
SCALA_BINARY = "2.13"
DELTA_VERSION = "4.0.0"

DELTA_PACKAGE = f"io.delta:delta-spark_{SCALA_BINARY}:{DELTA_VERSION}"
KAFKA_SOURCE_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}"

JVM_PACKAGES: tuple[str, ...] = (DELTA_PACKAGE, KAFKA_SOURCE_PACKAGE)
