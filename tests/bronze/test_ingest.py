"""Bronze ingest against the real broker and real Delta tables."""

from __future__ import annotations

import json
import shutil
import signal
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from lakehouse.bronze.offsets import (
    DataLossError,
    Gap,
    StartFrom,
    StartFromError,
    TopicDeleted,
    TopicRewound,
)
from lakehouse.bronze.transform import BRONZE_PROPERTIES, bronze_schema, kafka_to_bronze
from lakehouse.core import kafka, system, tables
from lakehouse.core.faults import FAULT_ENV
from lakehouse.core.settings import Settings
from lakehouse.core.spark import java_class
from lakehouse.core.specs import SourceSettings
from lakehouse.status import bronze_summary
from tests.bronze.helpers import (
    bronze,
    delete_records,
    job_env,
    new_source,
    run_ingest,
    run_job,
)

LINEAGE = StructType(
    [
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("value_error", StringType()),
    ]
)
OFFSETS = StructType([StructField("partition", IntegerType()), StructField("offset", LongType())])


def lineage(spark: SparkSession, settings: Settings, name: str):  # type: ignore[no-untyped-def]
    return bronze(spark, settings, name).select(
        "partition", "offset", "key", "value", "value_error"
    )


def test_bad_input_lands_in_bronze_byte_for_byte(spark: SparkSession, kafka_up: Settings) -> None:
    name, topic, settings = new_source(kafka_up, max_value_bytes=64)
    corpus: list[tuple[bytes | None, bytes | None]] = [
        (b"k1", b'{"order_id": 1, "amount": 9.5}'),  # fine
        (b"k2", b"this is not json"),
        (b"k3", b'{"order_id": 3, "amou'),  # truncated
        (b"k4", b""),  # empty value
        (b"k5", None),  # null value
        (None, b'{"order_id": 6}'),  # null key, fine value
        (b"k7", b"\xff\xfe\x00garbage\x9c"),  # binary garbage
        (b"k8", json.dumps({"pad": "x" * 100}).encode()),  # bigger than max_value_bytes
    ]
    kafka.produce(settings.kafka, topic, [(k, v, 0) for k, v in corpus])

    result = run_ingest(spark, settings, name)

    errors = [
        None,
        "invalid_json",
        "invalid_json",
        "empty_value",
        "null_value",
        None,
        "invalid_utf8",
        "oversize",
    ]
    expected = spark.createDataFrame(
        [
            (0, i, None if k is None else bytearray(k), None if v is None else bytearray(v), s)
            for i, ((k, v), s) in enumerate(zip(corpus, errors, strict=True))
        ],
        LINEAGE,
    )
    assert_df_equality(
        lineage(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )
    assert (result.rows, result.gaps) == (8, [])


def test_the_run_summary_counts_every_batch_not_only_sparks_last_100_reports(
    spark: SparkSession, kafka_up: Settings
) -> None:
    name, topic, settings = new_source(kafka_up, max_offsets_per_trigger=2)
    kafka.produce(settings.kafka, topic, [(None, b'{"n": 1}', 0)] * 11)
    # Spark keeps this many progress reports (100 by default): 3 here, so 6 batches are
    # more than it remembers, as 106 would be by default.
    key = "spark.sql.streaming.numRecentProgressUpdates"
    spark.conf.set(key, "3")
    try:
        result = run_ingest(spark, settings, name)
    finally:
        spark.conf.unset(key)
    assert (result.batches, result.rows) == (6, 11)


@pytest.mark.pure
def test_value_error_shape_check_and_source_quoting(spark: SparkSession) -> None:
    """The projection is SQL text: the shape check's edge cases, and a source name that
    needs quoting, come out as written (a pure transformation, no broker)."""
    # The last two: JSON-shaped at the size limit (64 bytes) and one byte over it.
    at_limit, over = b"{" + b"x" * 62 + b"}", b"[" + b"x" * 63 + b"]"
    values = [b"[1, 2]", b"  {}\n", b"{", b"}{", b"[}", b"\t[]", at_limit, over]
    raw = spark.createDataFrame(
        [(None, bytearray(v), None, "t", 0, i, None, 0) for i, v in enumerate(values)],
        "key binary, value binary, headers array<struct<key:string,value:binary>>, "
        "topic string, partition int, offset long, timestamp timestamp, timestampType int",
    )
    source = "it's a \\ name"
    rows = kafka_to_bronze(raw, source, "events", 64).select("offset", "source", "value_error")
    errors = [None, None, "invalid_json", "invalid_json", "invalid_json", None, None, "oversize"]
    expected = spark.createDataFrame(
        [(i, source, e) for i, e in enumerate(errors)],
        "offset long, source string, value_error string",
    )
    assert_df_equality(rows, expected, ignore_row_order=True, ignore_nullable=True)


def test_bronze_table_contract(spark: SparkSession, kafka_up: Settings) -> None:
    name, topic, settings = new_source(kafka_up)
    # Repeated records, so Parquet would dictionary-encode any column it is allowed to.
    kafka.produce(settings.kafka, topic, [(b"k", b"{}", 0)] * 20)
    run_ingest(spark, settings, name)
    path = settings.storage.path("bronze", name)
    props = tables.properties(spark, path)
    assert {k: props[k] for k in ("delta.appendOnly", "delta.enableChangeDataFeed")} == {
        "delta.appendOnly": "true",
        "delta.enableChangeDataFeed": "true",
    }
    assert props["pipelines.reset.allowed"] == "false"
    # File statistics only on the columns bronze is searched by (not the raw bytes).
    assert props["delta.dataSkippingStatsColumns"] == "partition,offset,kafka_timestamp,value_error"
    detail = DeltaTable.forPath(spark, path).detail().collect()[0]
    assert detail["partitionColumns"] == ["source", "ingest_date"]
    table = bronze(spark, settings, name)
    assert table.schema == bronze_schema("events")
    row = table.collect()[0]
    # historical_version is not in a live file at all; Delta reads it as null.
    assert (row["topic"], row["source"], row["historical_version"]) == (topic, name, None)
    assert row["ingest_date"] == row["ingest_time"].date()
    (data_file,) = Path(path).rglob("*.parquet")
    footer = parquet_columns(spark, str(data_file))
    # What a live file stores: not the partition columns (they are in the Delta log) and not
    # historical_version.
    assert sorted(footer) == sorted(
        [
            "key",
            "value",
            "headers.list.element.key",
            "headers.list.element.value",
            "topic",
            "partition",
            "offset",
            "kafka_timestamp",
            "kafka_timestamp_type",
            "ingest_time",
            "value_error",
        ]
    )
    # (physical type, min/max statistics written, dictionary-encoded). Timestamps are Parquet's
    # INT64 micros, not the legacy INT96; the raw bytes carry no statistics, and `value` no
    # dictionary (bronze.PARQUET_CONF).
    assert {c: footer[c] for c in ("key", "value", "topic", "kafka_timestamp", "ingest_time")} == {
        "key": ("BINARY", False, True),
        "value": ("BINARY", False, False),
        "topic": ("BINARY", True, True),
        "kafka_timestamp": ("INT64", True, True),
        "ingest_time": ("INT64", True, True),
    }


def test_a_table_from_an_older_version_is_refused_with_the_fix(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """A bronze table created before `value_status` became `value_error`: the job names the
    missing column and the statement that adds it, writes nothing, and runs once it is added."""
    name, topic, settings = new_source(kafka_up)
    path = settings.storage.path("bronze", name)
    old = StructType(
        [
            StructField("value_status", StringType()) if f.name == "value_error" else f
            for f in bronze_schema("events").fields
        ]
    )
    tables.create_table(spark, path, old, BRONZE_PROPERTIES, ("ingest_date",))
    kafka.produce(settings.kafka, topic, [(b"k", b"{}", 0), (b"k", b"nope", 0)])
    alter = f"ALTER TABLE delta.`{path}` ADD COLUMNS (`value_error` string)"
    with pytest.raises(tables.OutdatedTableError, match="lacks column") as refused:
        run_ingest(spark, settings, name)
    assert str(refused.value).endswith(alter)
    assert bronze(spark, settings, name).count() == 0
    spark.sql(alter)
    run_ingest(spark, settings, name)
    assert_df_equality(
        bronze(spark, settings, name).select("offset", "value_status", "value_error"),
        spark.createDataFrame(
            [(0, None, None), (1, None, "invalid_json")],
            "offset long, value_status string, value_error string",
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def parquet_columns(spark: SparkSession, file: str) -> dict[str, tuple[str, bool, bool]]:
    """Per column of a Parquet file's first row group, from its footer (Spark's schema hides
    this): (physical type, min/max statistics written, dictionary-encoded)."""
    context = spark.sparkContext
    input_file = java_class(spark, "org.apache.parquet.hadoop.util.HadoopInputFile").fromPath(
        java_class(spark, "org.apache.hadoop.fs.Path")(file),
        context._jsc.hadoopConfiguration(),
    )
    reader = java_class(spark, "org.apache.parquet.hadoop.ParquetFileReader").open(input_file)
    try:
        columns = reader.getFooter().getBlocks().get(0).getColumns()
        return {
            str(c.getPath().toDotString()): (
                str(c.getPrimitiveType().getPrimitiveTypeName().name()),
                bool(c.getStatistics().hasNonNullValue()),
                any("DICTIONARY" in str(e.name()) for e in c.getEncodings()),
            )
            for c in columns
        }
    finally:
        reader.close()


def test_available_now_is_incremental_and_replay_free(
    spark: SparkSession, kafka_up: Settings
) -> None:
    name, topic, settings = new_source(kafka_up, partitions=2)
    kafka.produce(settings.kafka, topic, [(None, b'{"n":1}', p) for p in (0, 1, 1)])
    run_ingest(spark, settings, name)
    run_ingest(spark, settings, name)  # nothing new: nothing written twice
    kafka.produce(settings.kafka, topic, [(None, b'{"n":2}', 0)])
    run_ingest(spark, settings, name)
    assert_df_equality(
        bronze(spark, settings, name).select("partition", "offset"),
        spark.createDataFrame([(0, 0), (1, 0), (1, 1), (0, 1)], OFFSETS),
        ignore_row_order=True,
        ignore_nullable=True,
    )


@pytest.mark.parametrize("flag", ["bronze", None], ids=["start_from_bronze", "no_flag"])
def test_lost_checkpoint_resumes_from_bronze(
    spark: SparkSession, kafka_up: Settings, flag: str | None
) -> None:
    """With --start-from bronze, and also without a flag: a source that already wrote to
    bronze resumes one past its last offset there, since re-reading Kafka from earliest would
    land every record still retained a second time."""
    name, topic, settings = new_source(kafka_up, partitions=2)
    kafka.produce(settings.kafka, topic, [(None, b"{}", i % 2) for i in range(6)])
    run_ingest(spark, settings, name)
    shutil.rmtree(tables.checkpoint_path(settings, "ingest", name))
    kafka.produce(settings.kafka, topic, [(None, b"{}", i % 2) for i in range(4)])

    run_ingest(spark, settings, name, start_from=StartFrom(flag) if flag else None)

    assert_df_equality(
        bronze(spark, settings, name).select("partition", "offset"),
        spark.createDataFrame([(p, o) for p in (0, 1) for o in range(5)], OFFSETS),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_start_from_is_refused_when_a_checkpoint_exists(
    spark: SparkSession, kafka_up: Settings
) -> None:
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0)])
    run_ingest(spark, settings, name)
    with pytest.raises(StartFromError, match="already records where"):
        run_ingest(spark, settings, name, start_from=StartFrom("earliest"))


def test_start_from_explicit_offsets_and_timestamp(spark: SparkSession, kafka_up: Settings) -> None:
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(5)])
    run_ingest(spark, settings, name, start_from=StartFrom("offsets", offsets={topic: {0: 3}}))
    assert_df_equality(
        bronze(spark, settings, name).select("partition", "offset"),
        spark.createDataFrame([(0, 3), (0, 4)], OFFSETS),
        ignore_nullable=True,
        ignore_row_order=True,
    )

    name2, topic2, settings2 = new_source(kafka_up)
    kafka.produce(settings2.kafka, topic2, [(None, b"{}", 0) for _ in range(2)])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    kafka.produce(settings2.kafka, topic2, [(None, b"{}", 0) for _ in range(3)])
    run_ingest(spark, settings2, name2, start_from=StartFrom("timestamp", timestamp_ms=cut))
    assert_df_equality(
        bronze(spark, settings2, name2).select("partition", "offset"),
        spark.createDataFrame([(0, 2), (0, 3), (0, 4)], OFFSETS),
        ignore_nullable=True,
        ignore_row_order=True,
    )


def test_start_from_a_timestamp_with_a_partition_quiet_since_then(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """A partition with no record at or after the timestamp starts at its end (its next
    record is after the timestamp), instead of failing the job (Spark's default)."""
    name, topic, settings = new_source(kafka_up, partitions=2)
    kafka.produce(settings.kafka, topic, [(None, b"{}", p) for p in (0, 1, 0, 1)])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0)])
    run_ingest(spark, settings, name, start_from=StartFrom("timestamp", timestamp_ms=cut))
    kafka.produce(settings.kafka, topic, [(None, b"{}", 1)])
    run_ingest(spark, settings, name)
    assert_df_equality(
        bronze(spark, settings, name).select("partition", "offset"),
        spark.createDataFrame([(0, 2), (1, 2)], OFFSETS),
        ignore_nullable=True,
        ignore_row_order=True,
    )


@pytest.mark.parametrize("given_as", ["path", "table name"])
def test_historical_snapshot_then_live(
    spark: SparkSession, kafka_up: Settings, given_as: str
) -> None:
    """A snapshot holds what offsets 0..41 carried; live starts at 42: each record once. The
    snapshot is a Delta path or a table name in the catalog."""
    name, topic, settings = new_source(kafka_up)
    kafka.produce(
        settings.kafka, topic, [(None, json.dumps({"n": i}).encode(), 0) for i in range(50)]
    )
    snapshot = settings.storage.path("snapshots", name)
    spark.createDataFrame(
        [(topic, 0, i, json.dumps({"n": i})) for i in range(42)],
        "topic string, partition int, offset long, value string",
    ).write.format("delta").save(snapshot)

    if given_as == "table name":
        spark.sql(f"CREATE TABLE snapshot_{name} USING delta LOCATION '{snapshot}'")
    options = {"historical": snapshot if given_as == "path" else f"snapshot_{name}"}
    start = StartFrom("offsets", offsets={topic: {0: 42}})
    first = run_ingest(spark, settings, name, start_from=start, **options)

    rows = bronze(spark, settings, name).selectExpr(
        "offset", "CAST(value AS STRING) AS value", "historical_version"
    )
    expected = spark.createDataFrame(
        [(i, json.dumps({"n": i}), 0 if i < 42 else None) for i in range(50)],
        "offset long, value string, historical_version long",
    )
    assert_df_equality(rows, expected, ignore_row_order=True, ignore_nullable=True)
    assert first.historical_rows == 42
    handoff = [
        (e["event"], e.get("version"), e.get("rows"), e.get("first_live_offsets"))
        for e in system.read_log(spark, settings, system.INGEST_LOG, name)
    ]
    assert handoff == [
        ("historical_loaded", 0, 42, None),
        ("live_started", None, None, {topic: {"0": 42}}),
    ]


def test_a_historical_snapshot_of_any_table_is_loaded_as_each_rows_json_under_its_own_names(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """A snapshot that is not Kafka-shaped (no `value`) is loaded row by row as JSON, under
    the columns' own names, a dot or a dash in them too (the load failed on `order.id`)."""
    name, topic, settings = new_source(kafka_up)
    snapshot = settings.storage.path("snapshots", name)
    spark.createDataFrame(
        [(1, 2.5), (2, None)], "`order.id` INT, `unit-price` DOUBLE"
    ).write.format("delta").save(snapshot)
    start = StartFrom("offsets", offsets={topic: {0: 0}})
    first = run_ingest(spark, settings, name, start_from=start, historical=snapshot)

    rows = bronze(spark, settings, name).selectExpr(
        "CAST(value AS STRING) AS value", "historical_version"
    )
    expected = spark.createDataFrame(
        [('{"order.id":1,"unit-price":2.5}', 0), ('{"order.id":2}', 0)],
        "value string, historical_version long",
    )
    assert_df_equality(rows, expected, ignore_row_order=True, ignore_nullable=True)
    assert first.historical_rows == 2


def test_a_historical_load_cut_off_before_its_log_row_is_not_loaded_again(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    """The job dies after appending the snapshot, before recording it; the snapshot table
    gets a new commit before the rerun. Bronze already holds the snapshot: the rerun records
    that load and goes live, it does not append the newer version on top."""
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(3)])
    snapshot = str(tmp_path / "snapshot")
    spark.createDataFrame([(i,) for i in range(4)], "n int").write.format("delta").save(snapshot)
    flags = [
        "--source",
        name,
        "--historical",
        snapshot,
        "--start-from",
        f'offsets={{"{topic}":{{"0":1}}}}',
    ]
    died = run_job(
        "ingest_events",
        flags,
        {**job_env(settings, name, topic), FAULT_ENV: "after_historical_append"},
    )
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    spark.createDataFrame([(4,)], "n int").write.format("delta").mode("append").save(snapshot)

    result = run_ingest(
        spark,
        settings,
        name,
        start_from=StartFrom("offsets", offsets={topic: {0: 1}}),
        historical=snapshot,
    )

    rows = bronze(spark, settings, name).selectExpr(
        "CAST(value AS STRING) AS value", "historical_version", "offset"
    )
    expected = spark.createDataFrame(
        [*((f'{{"n":{i}}}', 0, None) for i in range(4)), ("{}", None, 1), ("{}", None, 2)],
        "value string, historical_version long, offset long",
    )
    assert_df_equality(rows, expected, ignore_row_order=True, ignore_nullable=True)
    assert result.historical_rows == 0
    loaded = [
        (e["version"], e["rows"])
        for e in system.read_log(spark, settings, system.INGEST_LOG, name)
        if e["event"] == "historical_loaded"
    ]
    assert loaded == [(0, 4)]


def test_a_snapshot_without_kafka_offsets_cannot_start_from_bronze(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    """Bronze would hold no offset after such a snapshot, so `bronze` would mean earliest:
    all of Kafka on top of the history. Refused before anything is written."""
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0)])
    snapshot = str(tmp_path / "snapshot")
    spark.createDataFrame([(1,)], "n int").write.format("delta").save(snapshot)
    with pytest.raises(StartFromError) as err:
        run_ingest(spark, settings, name, start_from=StartFrom("bronze"), historical=snapshot)
    assert str(err.value) == (
        f"--historical {snapshot} has no Kafka lineage (topic, partition, offset), so "
        "--start-from bronze cannot know where live data starts; give the first live "
        'offsets instead: --start-from offsets={"TOPIC":{"PARTITION":OFFSET}}'
    )
    assert bronze(spark, settings, name).count() == 0


def test_expired_offsets_refused_then_recorded(spark: SparkSession, kafka_up: Settings) -> None:
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(None, b"x" * 20, 0) for _ in range(30)])
    # What retention does to a partition's head, at once: offsets below `low` are gone.
    low = 17
    delete_records(settings, topic, 0, low)
    kafka.produce(settings.kafka, topic, [(None, b"live", 0) for _ in range(5)])

    start = StartFrom("offsets", offsets={topic: {0: 0}})
    with pytest.raises(DataLossError) as err:
        run_ingest(spark, settings, name, start_from=start)
    assert err.value.gaps == [Gap(topic, 0, 0, low - 1)]
    assert f"{topic} partition 0 offsets 0..{low - 1}" in str(err.value)
    assert bronze(spark, settings, name).count() == 0  # nothing written

    result = run_ingest(spark, settings, name, start_from=start, allow_data_loss=True)
    assert result.gaps == [Gap(topic, 0, 0, low - 1)]
    offsets_seen = sorted(r["offset"] for r in bronze(spark, settings, name).collect())
    assert offsets_seen == list(range(low, 35))
    gaps = [
        (e["event"], e["first_missing"], e["last_missing"])
        for e in system.read_log(spark, settings, system.INGEST_LOG, name)
    ]
    assert gaps == [("gap", 0, low - 1)]


def test_bad_flag_fails_fast_with_one_line(tmp_path: Path) -> None:
    done = run_job("ingest_events", ["--source", "orders", "--start-from", "yesterday"], {})
    assert done.returncode == 2
    assert "--start-from 'yesterday': use one of earliest | latest | bronze" in done.stderr


def test_expired_offsets_after_the_checkpoint_are_named(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """The restart path: the checkpoint says resume at 5, retention already removed 5..low-1."""
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(5)])
    run_ingest(spark, settings, name)  # checkpoint: next offset 5
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(15)])
    low = 12
    delete_records(settings, topic, 0, low)
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(2)])
    end = 22

    with pytest.raises(DataLossError) as err:
        run_ingest(spark, settings, name)
    assert err.value.gaps == [Gap(topic, 0, 5, low - 1)]

    # A run that accepts the loss dies right after recording it; its retry records it once.
    died = run_job(
        "ingest_events",
        ["--source", name, "--allow-data-loss"],
        {**job_env(settings, name, topic), FAULT_ENV: "after_gaps_recorded"},
    )
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    run_ingest(spark, settings, name, allow_data_loss=True)
    offsets_seen = sorted(r["offset"] for r in bronze(spark, settings, name).collect())
    assert offsets_seen == [*range(5), *range(low, end)]
    gaps = [
        (e["event"], e["first_missing"], e["last_missing"])
        for e in system.read_log(spark, settings, system.INGEST_LOG, name)
    ]
    assert gaps == [("gap", 5, low - 1)]


@pytest.mark.parametrize("mode", ["earliest", "latest"])
def test_first_run_with_nothing_new_still_pins_the_start(
    spark: SparkSession, kafka_up: Settings, mode: str
) -> None:
    """A first run that finds nothing to read must still record where it started, or the next
    run (no flag, checkpoint present) would silently begin at 'latest' and skip records."""
    name, topic, settings = new_source(kafka_up)
    before = 3 if mode == "latest" else 0
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(before)])
    run_ingest(spark, settings, name, start_from=StartFrom(mode))
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(2)])
    run_ingest(spark, settings, name)
    offsets_seen = sorted(r["offset"] for r in bronze(spark, settings, name).collect())
    assert offsets_seen == ([3, 4] if mode == "latest" else [0, 1])


def test_start_from_bronze_resumes_each_source_of_a_shared_table_from_its_own_rows(
    spark: SparkSession, kafka_up: Settings
) -> None:
    shared = f"shared_{uuid.uuid4().hex[:8]}"
    fast, topic, settings = new_source(kafka_up, bronze_table=shared)
    slow, _, settings = new_source(settings, bronze_table=shared)
    settings = replace(
        settings,
        sources={**settings.sources, slow: replace(settings.sources[slow], topics=(topic,))},
    )
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(10)])
    run_ingest(spark, settings, fast)
    # The slow source never ran: resuming from bronze must start it at the beginning, not
    # after the rows the fast source wrote from the same topic.
    run_ingest(spark, settings, slow, start_from=StartFrom("bronze"))
    table = spark.read.format("delta").load(settings.storage.path("bronze", shared))
    counts = {r["source"]: r["count"] for r in table.groupBy("source").count().collect()}
    assert counts == {fast: 10, slow: 10}


@pytest.mark.parametrize("isolation", [None, "read_uncommitted"], ids=["default", "configured"])
def test_records_of_an_aborted_transaction_are_not_data(
    spark: SparkSession, kafka_up: Settings, isolation: str | None
) -> None:
    """A transactional producer's aborted records stay in the log: a consumer reading
    uncommitted data would land them in bronze as if they had happened. Sources read
    committed data unless `kafka_options` says otherwise."""
    from confluent_kafka import Producer

    options = {"isolation.level": isolation} if isolation else {}
    name, topic, settings = new_source(kafka_up, kafka_options=options)
    producer = Producer(kafka.client_config(settings.kafka, **{"transactional.id": f"{name}-tx"}))
    producer.init_transactions(30)
    for value, commit in (("a", True), ("aborted", False), ("b", True)):
        producer.begin_transaction()
        producer.produce(topic, value=json.dumps({"v": value}).encode(), partition=0)
        producer.flush(30)  # on the broker before the abort (else it is never sent at all)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    run_ingest(spark, settings, name)

    values = sorted(
        json.loads(r["value"])["v"]
        for r in bronze(spark, settings, name)
        .selectExpr("CAST(value AS STRING) AS value")
        .collect()
    )
    assert values == (["a", "b"] if isolation is None else ["a", "aborted", "b"])


def test_a_topic_pattern_source_reads_every_match_and_a_new_topic_from_its_start(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """README: `topic_pattern` sources. The pattern matches anywhere in a topic's name, as
    Spark's Kafka source applies it, and the topics the job checks for loss and gives start
    offsets are exactly those it reads; partitions no start names begin at earliest, so a
    topic created after the checkpoint loses none of its first records."""
    from lakehouse.bronze.offsets import topic_partitions

    prefix = f"pat{uuid.uuid4().hex[:8]}"
    first, later, inside, anchored = f"{prefix}.a", f"{prefix}.b", f"x{prefix}.c", f"{prefix}x"
    for topic in (first, inside, anchored):
        kafka.ensure_topic(kafka_up.kafka, topic, partitions=2)
    name = f"s{prefix}"
    source = SourceSettings(kind="events", topic_pattern=rf"{prefix}\.")
    settings = replace(kafka_up, sources={**kafka_up.sources, name: source})
    kafka.produce(settings.kafka, first, [(None, b"a0", 0), (None, b"a1", 1)])
    kafka.produce(settings.kafka, inside, [(None, b"c0", 0)])  # matches inside the name
    kafka.produce(settings.kafka, anchored, [(None, b"x0", 0)])  # does not match
    run_ingest(spark, settings, name)
    kafka.ensure_topic(settings.kafka, later, partitions=1)
    kafka.produce(settings.kafka, later, [(None, b"b0", 0), (None, b"b1", 0)])
    kafka.produce(settings.kafka, first, [(None, b"a2", 0)])
    run_ingest(spark, settings, name)

    landed = bronze(spark, settings, name).selectExpr(
        "topic", "partition", "offset", "CAST(value AS STRING) AS value"
    )
    assert sorted(tuple(r) for r in landed.collect()) == [
        (first, 0, 0, "a0"),
        (first, 0, 1, "a2"),
        (first, 1, 0, "a1"),
        (later, 0, 0, "b0"),
        (later, 0, 1, "b1"),
        (inside, 0, 0, "c0"),
    ]
    assert sorted(topic_partitions(settings.kafka, source)) == sorted([first, later, inside])


def recreate_topic(settings: Settings, topic: str) -> None:
    """Delete `topic` and create it again (its offsets start over at 0)."""
    kafka.delete_topics(settings.kafka, [topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            kafka.ensure_topic(settings.kafka, topic, partitions=1)
            if kafka.end_offsets(settings.kafka, topic) == {0: 0}:
                return
        except kafka.KafkaError:
            pass  # still being deleted
        time.sleep(0.5)
    raise AssertionError(f"{topic} was not recreated")


@pytest.mark.parametrize("allow_data_loss", [False, True])
def test_a_recreated_topic_is_named_and_never_resumed_past_its_new_records(
    spark: SparkSession, kafka_up: Settings, allow_data_loss: bool
) -> None:
    """The checkpoint resumes at 10; the topic was deleted and created again and its log ends
    at 3: resuming would skip the new records 0..2 (and bronze's lineage would repeat their
    offsets). Refused with exit 3 naming the partition, also with --allow-data-loss."""
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(None, b"old", 0) for _ in range(10)])
    run_ingest(spark, settings, name)
    recreate_topic(settings, topic)
    kafka.produce(settings.kafka, topic, [(None, b"new", 0) for _ in range(3)])

    with pytest.raises(TopicRewound) as err:
        run_ingest(spark, settings, name, allow_data_loss=allow_data_loss)
    assert err.value.exit_code == 3
    assert (
        f"{topic} partition 0: bronze resumes at offset 10 but the partition now ends at 3"
        in str(err.value)
    )
    assert "deleted and created again" in str(err.value)
    assert sorted(r["offset"] for r in bronze(spark, settings, name).collect()) == list(range(10))


def delete_topic(settings: Settings, topic: str) -> None:
    kafka.delete_topics(settings.kafka, [topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if topic not in kafka.topic_names(settings.kafka):
            return
        time.sleep(0.5)
    raise AssertionError(f"{topic} was not deleted")


@pytest.mark.parametrize(
    ("allow_data_loss", "checkpoint_lost"), [(False, False), (False, True), (True, False)]
)
def test_a_deleted_topic_of_a_pattern_source_is_named_and_the_others_go_on_when_allowed(
    spark: SparkSession, kafka_up: Settings, allow_data_loss: bool, checkpoint_lost: bool
) -> None:
    """A topic matched by `topic_pattern` was deleted after bronze read it up to offset 1:
    whatever it received after that is gone. Refused with exit 3 naming the topic and where
    bronze stopped (also when the job resumes from bronze, its checkpoint lost); with
    --allow-data-loss recorded once in the ingest log, and the other topics go on (a later
    run without the flag too)."""
    prefix = f"del{uuid.uuid4().hex[:8]}"
    kept, doomed = f"{prefix}.kept", f"{prefix}.doomed"
    for topic in (kept, doomed):
        kafka.ensure_topic(kafka_up.kafka, topic, partitions=1)
    name = f"s{prefix}"
    source = SourceSettings(kind="events", topic_pattern=rf"^{prefix}\.")
    settings = replace(kafka_up, sources={**kafka_up.sources, name: source})
    kafka.produce(settings.kafka, kept, [(None, b"k0", 0)])
    kafka.produce(settings.kafka, doomed, [(None, b"d0", 0), (None, b"d1", 0)])
    run_ingest(spark, settings, name)
    delete_topic(settings, doomed)
    kafka.produce(settings.kafka, kept, [(None, b"k1", 0)])
    if checkpoint_lost:
        shutil.rmtree(tables.checkpoint_path(settings, "ingest", name))

    def landed() -> list[tuple[str, int, str]]:
        rows = bronze(spark, settings, name).selectExpr(
            "topic", "offset", "CAST(value AS STRING) AS value"
        )
        return sorted(tuple(r) for r in rows.collect())

    before = [(doomed, 0, "d0"), (doomed, 1, "d1"), (kept, 0, "k0")]
    if not allow_data_loss:
        with pytest.raises(TopicDeleted) as err:
            run_ingest(spark, settings, name)
        assert err.value.exit_code == 3
        assert f"{doomed} partition 0 no longer exists; bronze holds it up to offset 1" in str(
            err.value
        )
        assert "--allow-data-loss" in str(err.value)
        assert landed() == before
        return
    run_ingest(spark, settings, name, allow_data_loss=True)
    kafka.produce(settings.kafka, kept, [(None, b"k2", 0)])
    run_ingest(spark, settings, name)  # no flag needed any more
    assert landed() == [*before, (kept, 1, "k1"), (kept, 2, "k2")]
    events = [
        (e["event"], e["topic"], e["partition"], e["first_missing"])
        for e in system.read_log(spark, settings, system.INGEST_LOG, name)
        if e["event"] == "topic_deleted"
    ]
    assert events == [("topic_deleted", doomed, 0, 2)]
    summary = bronze_summary(spark, settings).where(f"source = '{name}'")
    assert [r["gaps_recorded"] for r in summary.collect()] == [1]  # `lakehouse status` shows it
