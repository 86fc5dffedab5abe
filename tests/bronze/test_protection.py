"""Reset protection: our commands refuse, Delta's appendOnly refuses everything else, and
lifting protection is an explicit, recorded operator action."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.bronze import ingest
from lakehouse.core import fs, kafka, protection, system, tables
from lakehouse.core.settings import Settings
from tests.bronze.helpers import bronze, new_source, run_ingest

# Delta refuses DELETE/UPDATE/overwrite on delta.appendOnly tables. (Not TRUNCATE: Delta
# refuses that on every table, so it tells nothing about protection; RESTORE, which appendOnly
# lets through, has its own test below.)
APPEND_ONLY = r"DELTA_CANNOT_MODIFY_APPEND_ONLY"


@pytest.fixture(scope="module")
def protected(spark: SparkSession, kafka_up: Settings) -> tuple[str, Settings]:
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(b"k", b'{"a":1}', 0), (b"k", b'{"a":2}', 0)])
    run_ingest(spark, settings, name)
    return name, settings


def offsets(spark: SparkSession, settings: Settings, name: str) -> list[int]:
    return sorted(r["offset"] for r in bronze(spark, settings, name).collect())


def test_our_reset_is_refused(spark: SparkSession, protected: tuple[str, Settings]) -> None:
    name, settings = protected
    with pytest.raises(protection.ProtectedTableError) as err:
        ingest.reset(spark, settings, f"bronze.{name}")
    assert str(err.value).startswith(f"reset of bronze.{name} refused: ")
    assert "lakehouse unprotect TABLE --reason" in str(err.value)
    assert offsets(spark, settings, name) == [0, 1]


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM {table} WHERE offset = 0",
        "UPDATE {table} SET value_error = 'x'",
        "DELETE FROM delta.`{path}`",
    ],
)
def test_delta_refuses_destructive_sql(
    spark: SparkSession, protected: tuple[str, Settings], statement: str
) -> None:
    name, settings = protected
    path = settings.storage.path("bronze", name)
    table = f"bronze_{name}"  # the same table by name, as a notebook would address it
    spark.sql(f"CREATE TABLE IF NOT EXISTS {table} USING delta LOCATION '{path}'")
    with pytest.raises(Exception, match=APPEND_ONLY):
        spark.sql(statement.format(path=path, table=table))
    assert offsets(spark, settings, name) == [0, 1]


def test_delta_refuses_overwrite(spark: SparkSession, protected: tuple[str, Settings]) -> None:
    name, settings = protected
    path = settings.storage.path("bronze", name)
    current = bronze(spark, settings, name)
    with pytest.raises(Exception, match=APPEND_ONLY):
        current.limit(1).write.format("delta").mode("overwrite").save(path)
    assert offsets(spark, settings, name) == [0, 1]


def test_unprotect_is_explicit_and_recorded(spark: SparkSession, kafka_up: Settings) -> None:
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(b"k", b"{}", 0)])
    run_ingest(spark, settings, name)
    table = f"bronze.{name}"
    with pytest.raises(ValueError, match="unprotect needs --reason"):
        protection.unprotect(spark, settings, table, "  ")

    version = protection.unprotect(spark, settings, table, "GDPR erasure ticket 42")
    spark.sql(f"DELETE FROM delta.`{settings.storage.path('bronze', name)}` WHERE offset = 0")
    assert bronze(spark, settings, name).count() == 0
    protection.protect(spark, settings, table)
    log = [
        (e["event"], e.get("reason"))
        for e in system.read_log(spark, settings, system.PROTECTION_LOG, table)
    ]
    assert log == [("unprotect", "GDPR erasure ticket 42"), ("protect", None)]
    assert version >= 1
    props = tables.properties(spark, settings.storage.path("bronze", name))
    assert (props["delta.appendOnly"], props["pipelines.reset.allowed"]) == ("true", "false")


def test_reset_after_unprotect_removes_data_and_checkpoint(
    spark: SparkSession, kafka_up: Settings
) -> None:
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(b"k", b"{}", 0)])
    run_ingest(spark, settings, name)
    checkpoint = tables.checkpoint_path(settings, "ingest", name)
    protection.unprotect(spark, settings, f"bronze.{name}", "rebuild from a fresh topic")
    ingest.reset(spark, settings, f"bronze.{name}")
    assert not tables.exists(spark, settings.storage.path("bronze", name))
    assert not fs.exists(spark, checkpoint)
    # A new run recreates the protected table and re-reads the topic from the start.
    run_ingest(spark, settings, name)
    assert_df_equality(
        bronze(spark, settings, name).selectExpr("offset"),
        spark.createDataFrame([(0,)], "offset long"),
        ignore_nullable=True,
    )


def test_status_summarises_each_source(spark: SparkSession, kafka_up: Settings) -> None:
    from datetime import datetime

    from pyspark.sql import functions as F

    from lakehouse.status import SUMMARY_SCHEMA, bronze_summary

    name, topic, settings = new_source(kafka_up, partitions=2)
    kafka.produce(settings.kafka, topic, [(b"a", b'{"a":1}', 0), (b"b", b"oops", 1)])
    run_ingest(spark, settings, name)
    idle, _, settings = new_source(settings)  # configured, never ingested
    summary = bronze_summary(spark, settings).where(F.col("source").isin(name, idle))
    last = bronze(spark, settings, name).agg(F.max("ingest_time")).collect()[0][0]
    assert isinstance(last, datetime)
    expected = spark.createDataFrame(
        [
            (name, f"bronze.{name}", 2, 1, 2, last, True, 0),
            (idle, f"bronze.{idle}", 0, 0, 0, None, None, 0),
        ],
        SUMMARY_SCHEMA,
    )
    assert_df_equality(summary, expected, ignore_row_order=True, ignore_nullable=True)


def test_protection_lifted_behind_our_back_stops_ingest_and_shows_in_status(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Any client can `ALTER TABLE ... SET TBLPROPERTIES ('delta.appendOnly'='false')`. Status
    shows the table unprotected, and ingest refuses to write into it (exit 4) until an operator
    either restores protection or records the change with `lakehouse unprotect`."""
    from pyspark.sql import functions as F

    from lakehouse.status import bronze_summary

    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(b"k", b"{}", 0)])
    run_ingest(spark, settings, name)
    path = settings.storage.path("bronze", name)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")
    kafka.produce(settings.kafka, topic, [(b"k", b"{}", 0)])

    def shown_protected() -> object:
        rows = bronze_summary(spark, settings).where(F.col("source") == name).collect()
        return rows[0]["protected"]

    assert shown_protected() is False
    with pytest.raises(protection.ProtectedTableError) as err:
        run_ingest(spark, settings, name)
    assert str(err.value) == (
        f"bronze.{name} is not protected (delta.appendOnly=false, pipelines.reset.allowed="
        "false) and no `lakehouse unprotect` recorded why: its properties were changed "
        "directly. Ingest will not write into it until you restore protection "
        f"(lakehouse protect bronze.{name}) or record the change "
        f"(lakehouse unprotect bronze.{name} --reason '...')"
    )
    assert offsets(spark, settings, name) == [0]

    protection.protect(spark, settings, f"bronze.{name}")
    run_ingest(spark, settings, name)
    assert offsets(spark, settings, name) == [0, 1]
    assert shown_protected() is True
    # Lifted the recorded way, ingest goes on writing.
    protection.unprotect(spark, settings, f"bronze.{name}", "erasure ticket 7")
    kafka.produce(settings.kafka, topic, [(b"k", b"{}", 0)])
    run_ingest(spark, settings, name)
    assert offsets(spark, settings, name) == [0, 1, 2]
    assert shown_protected() is False


def test_a_restore_to_an_older_version_stops_ingest_naming_the_version_to_restore(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Delta's RESTORE bypasses appendOnly: it empties bronze of rows Kafka may no longer
    hold, and ingest would go on from its checkpoint as if nothing happened. It refuses
    (exit 4), naming the version that undoes the restore; once undone and acknowledged with
    `lakehouse protect`, ingest goes on."""
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(b"k", b"{}", 0)])
    run_ingest(spark, settings, name)
    path = settings.storage.path("bronze", name)
    before = tables.latest_version(spark, path)
    spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF 0")
    assert bronze(spark, settings, name).count() == 0  # Delta let it through
    kafka.produce(settings.kafka, topic, [(b"k", b"{}", 0)])

    with pytest.raises(protection.ProtectedTableError) as err:
        run_ingest(spark, settings, name)
    assert str(err.value) == (
        f"bronze.{name} was restored to version 0 at version {before + 1}, outside "
        "`lakehouse unprotect`: rows it held are gone from it, and Kafka may no longer hold "
        f"them. Undo it (RESTORE TABLE delta.`{path}` TO VERSION AS OF {before}), or accept "
        f"it; then record that with `lakehouse protect bronze.{name}` and ingest goes on"
    )
    assert bronze(spark, settings, name).count() == 0

    spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF {before}")
    protection.protect(spark, settings, f"bronze.{name}")
    run_ingest(spark, settings, name)
    assert offsets(spark, settings, name) == [0, 1]
