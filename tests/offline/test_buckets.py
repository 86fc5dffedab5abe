"""Bucket arithmetic and time decoding: UTC, half-open buckets, every time encoding."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.core.settings import SettingsError, load_settings
from lakehouse.core.specs import parse_duration
from lakehouse.offline import backfill, buckets
from tests.silver.helpers import ISO_FORMS

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`

T = datetime(2026, 3, 29, 0, 0)  # a DST change day in Europe: nothing changes in UTC


def test_durations() -> None:
    assert [parse_duration(d) for d in ("30s", "15m", "2h", "1d", " 90m ")] == [
        30,
        900,
        7200,
        86400,
        5400,
    ]
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("2 hours")


def test_floor_edges_and_closed_buckets_with_a_buffer() -> None:
    two_h, minute = 7200, 60
    assert buckets.floor(T + timedelta(hours=3, minutes=59), two_h) == T + timedelta(hours=2)
    assert buckets.floor(T + timedelta(hours=4), two_h) == T + timedelta(hours=4)  # on the edge
    assert buckets.floor(datetime(1969, 12, 31, 23), two_h) == datetime(1969, 12, 31, 22)
    assert buckets.is_edge(T + timedelta(hours=2), two_h)
    assert not buckets.is_edge(T + timedelta(hours=1), two_h)
    assert not buckets.is_edge(T + timedelta(hours=2, microseconds=1), two_h)
    # [02:00, 04:00) closes at 04:01: not at 04:00:59, exactly at 04:01.
    assert buckets.closed_until(T + timedelta(hours=4, seconds=59), two_h, minute) == T + timedelta(
        hours=2
    )
    assert buckets.closed_until(T + timedelta(hours=4, minutes=1), two_h, minute) == T + timedelta(
        hours=4
    )
    # No buffer: a bucket is closed at its end.
    assert buckets.closed_until(T + timedelta(hours=4), two_h, 0) == T + timedelta(hours=4)
    assert buckets.starts(T, T + timedelta(hours=6), two_h) == [
        T,
        T + timedelta(hours=2),
        T + timedelta(hours=4),
    ]


def test_instants_from_flags() -> None:
    assert buckets.parse_instant("2026-01-01T04:00:00Z") == datetime(2026, 1, 1, 4)
    assert buckets.parse_instant("2026-01-01T05:00:00+01:00") == datetime(2026, 1, 1, 4)
    assert buckets.parse_instant("2026-01-01") == datetime(2026, 1, 1)
    assert buckets.parse_instant("1767240000000") == datetime(2026, 1, 1, 4)
    with pytest.raises(ValueError, match="not an instant"):
        buckets.parse_instant("tomorrow")


@pytest.mark.parametrize(
    ("time_format", "kind", "values"),
    [
        ("epoch_ms", "bigint", [1767240000000, 1767247199999, None]),
        ("epoch_ms", "string", ["1767240000000", "1767247199999", "soon"]),
        ("epoch_s", "bigint", [1767240000, 1767247199, None]),
        ("epoch_s", "string", ["1767240000", " 1767247199", "x"]),
        # Nanoseconds or a count past the year 9999 read as unreadable (Spark's own
        # conversion throws on the first: the move failed instead of naming the row).
        ("epoch_ms", "bigint", [1767240000000, 1767247199999, 1632463351123456789]),
        ("epoch_ms", "string", ["1767240000000", "1767247199999", "1632463351123456"]),
        ("epoch_s", "bigint", [1767240000, 1767247199, 9223372036854775807]),
        (
            "iso8601",
            "string",
            ["2026-01-01T04:00:00Z", "2026-01-01 05:59:59.999+00:00", "01/01/2026"],
        ),
        ("iso8601", "string", ["2026-01-01T05:00:00+01:00", "2026-01-01T05:59:59.999", ""]),
        ("timestamp", "timestamp", [datetime(2026, 1, 1, 4), datetime(2026, 1, 1, 5, 59), None]),
    ],
)
def test_every_encoding_lands_in_its_bucket_and_an_unreadable_one_is_null(
    spark: SparkSession, time_format: str, kind: str, values: list[object]
) -> None:
    frame = spark.createDataFrame([(i, v) for i, v in enumerate(values)], f"i int, t {kind}")
    time = buckets.event_time("t", time_format)
    got = frame.select("i", buckets.bucket_start(time, 7200).alias("bucket"))
    four = datetime(2026, 1, 1, 4)
    expected = spark.createDataFrame([(0, four), (1, four), (2, None)], "i int, bucket timestamp")
    assert_df_equality(got, expected, ignore_nullable=True, ignore_row_order=True)


def test_iso8601_times_read_the_forms_silver_reads(spark: SparkSession) -> None:
    """The same forms as silver's ISO timestamps (the hybrid view's SQL is another rendering
    of `instants.iso_timestamp`), padded with spaces as a hand-filled table may hold them."""
    texts = [(i, f" {text} " if i % 2 else text) for i, (text, _) in enumerate(ISO_FORMS)]
    frame = spark.createDataFrame(texts, "i int, t string")
    got = frame.select("i", buckets.event_time("t", "iso8601").alias("at"))
    expected = spark.createDataFrame(
        [(i, at) for i, (_, at) in enumerate(ISO_FORMS)], "i int, at timestamp"
    )
    assert_df_equality(got, expected, ignore_nullable=True, ignore_row_order=True)


def test_the_realtime_side_keeps_rows_from_the_boundary_on_and_unreadable_ones(
    spark: SparkSession,
) -> None:
    boundary = datetime(2026, 1, 1, 4)
    # 4: before the year 0001, an unreadable time (the move refuses it): it stays visible.
    rows = spark.createDataFrame(
        [(1, 1767239999999), (2, 1767240000000), (3, None), (4, -8640000000000000)],
        "i int, ts bigint",
    )
    sql = buckets.not_before_sql("ts", "epoch_ms", rows.schema["ts"].dataType, boundary)
    assert sorted(r["i"] for r in rows.where(F.expr(sql)).collect()) == [2, 3, 4]
    as_text = rows.selectExpr("i", "CAST(ts AS STRING) AS ts")
    sql = buckets.not_before_sql("ts", "epoch_ms", as_text.schema["ts"].dataType, boundary)
    assert sorted(r["i"] for r in as_text.where(F.expr(sql)).collect()) == [2, 3, 4]
    in_seconds = rows.selectExpr("i", "ts DIV 1000 AS ts")
    sql = buckets.not_before_sql("ts", "epoch_s", in_seconds.schema["ts"].dataType, boundary)
    assert sorted(r["i"] for r in in_seconds.where(F.expr(sql)).collect()) == [2, 3, 4]


DiffRow = tuple[datetime, int | None, str | None]  # bucket, value, note
DIFF_SCHEMA = "__bucket timestamp, v int, note string"
DiffCounts = tuple[datetime, int, int, int, int]  # bucket, before, after, only before/after
DIFF_COLUMNS = "__bucket timestamp, before long, after long, only_before long, only_after long"


def counted_diffs(old: list[DiffRow], new: list[DiffRow]) -> list[DiffCounts]:
    """The model: per bucket, both sides' sizes and each side's surplus of every whole row."""
    before, after = Counter(old), Counter(new)
    result: list[DiffCounts] = []
    for bucket in sorted({r[0] for r in old} | {r[0] for r in new}):
        only_before = sum(n for r, n in (before - after).items() if r[0] == bucket)
        only_after = sum(n for r, n in (after - before).items() if r[0] == bucket)
        size_before = sum(n for r, n in before.items() if r[0] == bucket)
        size_after = sum(n for r, n in after.items() if r[0] == bucket)
        result.append((bucket, size_before, size_after, only_before, only_after))
    return result


def test_bucket_diffs_counts_a_row_kept_fewer_times_and_nulls_as_equal(
    spark: SparkSession,
) -> None:
    two = datetime(2026, 1, 1, 2)
    old = [(T, 1, "a"), (T, 1, "a"), (T, 1, "a"), (T, None, None), (two, 5, "x")]
    new = [(T, 1, "a"), (T, None, None), (T, 2, "b"), (two, 5, "x"), (two, 5, "x")]
    got = backfill.bucket_diffs(
        spark.createDataFrame(old, DIFF_SCHEMA), spark.createDataFrame(new, DIFF_SCHEMA)
    )
    expected = spark.createDataFrame([(T, 4, 3, 2, 1), (two, 1, 2, 0, 1)], DIFF_COLUMNS)
    assert_df_equality(got, expected, ignore_nullable=True, ignore_row_order=True)


@pytest.mark.parametrize("seed", [3, 17, 2026])
def test_bucket_diffs_equal_a_multiset_model_on_random_sides(
    spark: SparkSession, seed: int
) -> None:
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not secrets
    starts = [T + timedelta(hours=2 * i) for i in range(3)]

    def side() -> list[DiffRow]:
        return [
            (rng.choice(starts), rng.choice([None, 1, 2]), rng.choice([None, "p", "q"]))
            for _ in range(rng.randint(0, 40))
        ]

    old, new = side(), side()
    got = backfill.bucket_diffs(
        spark.createDataFrame(old, DIFF_SCHEMA), spark.createDataFrame(new, DIFF_SCHEMA)
    )
    expected = spark.createDataFrame(counted_diffs(old, new), DIFF_COLUMNS)
    assert_df_equality(got, expected, ignore_nullable=True, ignore_row_order=True)


def write_offline_conf(tmp_path: Path, change: str) -> Path:
    fields = {"realtime": "orders", "time_column": "ts", "bucket": "2h", "buffer": "1m"}
    key, value = change.split(": ")
    fields[key] = value
    base = tmp_path / "conf" / "base"
    base.mkdir(parents=True)
    (base / "pipeline.yml").write_text(
        "sources: {o: {kind: events, topics: [o]}}\n"
        'silver: {orders: {source: o, mode: append, schema: "id BIGINT, ts BIGINT"}}\n'
        "offline:\n  orders_offline: {" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}\n"
    )
    return tmp_path / "conf"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("realtime: nope", r"'offline.orders_offline.realtime' 'nope': no such silver table"),
        ("bucket: 7h", r"'bucket' '7h' does not divide a day"),
        ("buffer: -1m", r"'buffer' '-1m' is negative"),
        ("time_format: epoch_us", r"'time_format' must be one of"),
        ("bucket: soon", r"'soon' is not a duration"),
    ],
)
def test_bad_offline_config_names_the_file_and_the_key(
    tmp_path: Path, change: str, message: str
) -> None:
    with pytest.raises(SettingsError, match=message) as err:
        load_settings("base", conf_dir=write_offline_conf(tmp_path, change))
    assert str(err.value).startswith("conf/base/pipeline.yml: ")


def test_good_offline_config_loads_with_its_view_name(tmp_path: Path) -> None:
    settings = load_settings("base", conf_dir=write_offline_conf(tmp_path, "bucket: 15m"))
    table = settings.offline["orders_offline"]
    assert (table.view, table.bucket_seconds, table.buffer_seconds) == ("orders_hybrid", 900, 60)
