"""backfill against real Delta tables: exactly the window's partitions are replaced in one
commit, bad input is refused before anything is written, every run is recorded, a replay is a
no-op, and the boundary follows the newest offline data."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core import tables
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings
from lakehouse.offline import audit, boundary, hybrid, store
from lakehouse.offline import backfill as backfill_module
from lakehouse.offline.backfill import BackfillOptions, backfill
from lakehouse.offline.backfill_input import BackfillRefused
from lakehouse.offline.move import MoveOptions, realtime_to_offline
from lakehouse.status import offline_summary
from tests.offline.helpers import (
    T0,
    Order,
    frame,
    ms,
    offline_rows,
    offline_setup,
    order,
    upsert,
)

H = timedelta(hours=1)
NOW = T0 + 8 * H + timedelta(minutes=1)  # [00:00, 08:00) closed


def write_jsonl(path: Path, orders: list[Order], extra: dict[str, Any] | None = None) -> str:
    """JSON lines as a feed sends them: numbers as strings for the money."""
    with path.open("w") as out:
        for o in orders:
            record = {
                "order_id": o[0],
                "customer_id": o[1],
                "order_status": o[2],
                "amount": str(o[3]),
                "ts": o[4],
                **(extra or {}),
            }
            out.write(json.dumps(record) + "\n")
    return str(path)


def run(
    spark: SparkSession,
    settings: Settings,
    offline: str,
    path: str,
    start: datetime,
    end: datetime,
    **options: Any,
) -> Any:
    return backfill(spark, settings, BackfillOptions(offline, path, start, end, now=NOW, **options))


Moved = tuple[str, Settings, list[Order]]


def four_buckets_moved(spark: SparkSession, settings: Settings) -> Moved:
    """Four buckets of orders moved offline; the boundary at 08:00."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]  # one per 2h bucket
    upsert(spark, settings, offline, orders)
    realtime_to_offline(spark, settings, MoveOptions(offline, NOW))
    return offline, settings, orders


@pytest.fixture
def moved(spark: SparkSession, settings: Settings) -> Moved:
    """A table of its own, for a test that backfills it."""
    return four_buckets_moved(spark, settings)


@pytest.fixture(scope="module")
def refusing(spark: SparkSession, settings: Settings) -> Moved:
    """One table the module's refusal tests share (building it took 15 s a test in CI): each
    asserts the table's version unchanged, so a refusal that wrote fails its own test."""
    return four_buckets_moved(spark, settings)


def files_by_bucket(spark: SparkSession, path: str, version: int) -> dict[str, set[str]]:
    """The data files the log has at `version`, per partition value."""
    from delta.tables import DeltaTable  # noqa: F401 - the session has Delta

    files = spark.read.format("delta").option("versionAsOf", version).load(path).inputFiles()
    result: dict[str, set[str]] = {}
    for name in files:
        part = next(p for p in name.split("/") if p.startswith(f"{store.BUCKET}="))
        result.setdefault(part, set()).add(name)
    return result


def test_a_backfill_replaces_only_its_window_in_one_commit(
    spark: SparkSession, moved: Moved, tmp_path: Path
) -> None:
    offline, settings, orders = moved
    path = store.offline_path(settings, offline)
    before = tables.latest_version(spark, path)
    files_before = files_by_bucket(spark, path, before)
    fixed = [order(1, T0 + 2.5 * H, "12.34"), order(10, T0 + 3 * H, "5.00")]
    report = run(
        spark,
        settings,
        offline,
        write_jsonl(tmp_path / "fix.jsonl", fixed),
        T0 + 2 * H,
        T0 + 4 * H,
        reason="refund repriced",
    )

    after = tables.latest_version(spark, path)
    assert after == before + 1  # one commit
    files_after = files_by_bucket(spark, path, after)
    window = [k for k in files_after if "02%3A00" in k or "02:00" in k]
    assert len(window) == 1
    # Neighbouring buckets: the very same files, untouched.
    for part, names in files_before.items():
        if part not in window:
            assert files_after[part] == names
    expected = [orders[0], *fixed, orders[2], orders[3]]
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, expected),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    assert report.status == "applied"
    (record,) = audit.backfills(spark, settings, offline).collect()
    assert (
        record["status"],
        record["window_from"],
        record["window_to"],
        record["rows_before"],
        record["rows_after"],
        record["offline_version_before"],
        record["offline_version_after"],
        record["reason"],
        record["input_format"],
        record["content_hash"],
    ) == (
        "applied",
        T0 + 2 * H,
        T0 + 4 * H,
        1,
        2,
        before,
        after,
        "refund repriced",
        "json",
        report.content_hash,
    )
    assert record["user"]
    assert record["host"]
    assert record["input_path"].endswith("fix.jsonl")


def write_input(spark: SparkSession, directory: Path, kind: str, orders: list[Order]) -> str:
    """`orders` as a Delta table, a Parquet directory, or a CSV file (text, as exported)."""
    if kind in ("delta", "parquet"):
        path = str(directory / kind)
        frame(spark, orders).drop("_rescued_data").write.format(kind).save(path)
        return path
    path = str(directory / ("fix.csv" if kind == "csv" else "export.txt"))
    with open(path, "w") as out:
        out.write("order_id,customer_id,order_status,amount,ts\n")
        out.writelines(",".join(str(v) for v in o) + "\n" for o in orders)
    return path


@pytest.mark.parametrize(
    ("kind", "given", "stored"),
    [
        ("delta", None, "delta"),
        ("parquet", None, "parquet"),
        ("csv", None, "csv"),
        ("txt", "csv", "csv"),  # a name that tells nothing: --format says it
    ],
)
def test_delta_parquet_and_csv_inputs_backfill_alike(
    spark: SparkSession,
    moved: Moved,
    tmp_path: Path,
    kind: str,
    given: str | None,
    stored: str,
) -> None:
    offline, settings, orders = moved
    fixed = [order(1, T0 + 2.5 * H, "12.34"), order(10, T0 + 3 * H, "5.00")]
    source = write_input(spark, tmp_path, kind, fixed)
    if given is not None:
        with pytest.raises(UsageError, match=r"cannot tell its format.*pass --format"):
            run(spark, settings, offline, source, T0 + 2 * H, T0 + 4 * H)
    report = run(spark, settings, offline, source, T0 + 2 * H, T0 + 4 * H, format=given)
    assert report.status == "applied"
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, [orders[0], *fixed, orders[2], orders[3]]),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    assert [r["input_format"] for r in audit.backfills(spark, settings, offline).collect()] == [
        stored
    ]


def test_the_same_input_replayed_is_a_no_op(
    spark: SparkSession, moved: Moved, tmp_path: Path
) -> None:
    offline, settings, _orders = moved
    source = write_jsonl(tmp_path / "fix.jsonl", [order(1, T0 + 2.5 * H, "12.34")])
    run(spark, settings, offline, source, T0 + 2 * H, T0 + 4 * H)
    version = tables.latest_version(spark, store.offline_path(settings, offline))
    report = run(spark, settings, offline, source, T0 + 2 * H, T0 + 4 * H)
    assert report.status == "no-op"
    assert tables.latest_version(spark, store.offline_path(settings, offline)) == version
    statuses = [
        r["status"] for r in audit.backfills(spark, settings, offline).orderBy("seq").collect()
    ]
    assert statuses == ["applied", "no-op"]


def test_the_same_input_replayed_after_another_was_killed_after_its_commit_is_applied_again(
    spark: SparkSession, moved: Moved, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another input over the same window commits and is killed before its record: its rows
    are in the window, so replaying the first input must write it again, not be a no-op."""
    offline, settings, orders = moved
    fixed = [order(1, T0 + 2.5 * H, "12.34")]
    source = write_jsonl(tmp_path / "fix.jsonl", fixed)
    other = write_jsonl(tmp_path / "other.jsonl", [order(1, T0 + 2.5 * H, "77.00")])
    statuses = [run(spark, settings, offline, source, T0 + 2 * H, T0 + 4 * H).status]
    with monkeypatch.context() as patch:
        patch.setattr(backfill_module, "_record", killed)
        with pytest.raises(Killed):
            run(spark, settings, offline, other, T0 + 2 * H, T0 + 4 * H)

    statuses.append(run(spark, settings, offline, source, T0 + 2 * H, T0 + 4 * H).status)

    assert statuses == ["applied", "applied"]
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, [orders[0], *fixed, orders[2], orders[3]]),
        ignore_row_order=True,
    )


class Killed(Exception):
    pass


def killed(*_: Any) -> None:
    raise Killed


def test_dry_run_prints_the_plan_and_writes_nothing(
    spark: SparkSession, refusing: Moved, tmp_path: Path
) -> None:
    offline, settings, _orders = refusing
    version = tables.latest_version(spark, store.offline_path(settings, offline))
    fixed = [order(1, T0 + 2.5 * H, "12.34"), order(10, T0 + 3 * H, "5.00")]
    report = run(
        spark,
        settings,
        offline,
        write_jsonl(tmp_path / "f.jsonl", fixed),
        T0 + 2 * H,
        T0 + 4 * H,
        dry_run=True,
    )
    assert report.status == "dry-run"
    assert tables.latest_version(spark, store.offline_path(settings, offline)) == version
    assert audit.backfills(spark, settings, offline).count() == 0
    diff = report.buckets[T0 + 2 * H]
    assert (diff.before, diff.after, diff.only_before, diff.only_after) == (1, 2, 1, 2)
    assert "02:00:00" in report.render()


@pytest.mark.parametrize(
    ("rows", "extra", "message"),
    [
        ([order(1, T0 + 5 * H)], None, "records outside the window"),
        ([order(1, T0 + 2.5 * H), order(1, T0 + 3 * H)], None, "keys given more than once"),
        ([order(1, T0 + 2.5 * H)], {"note": "x"}, r"not in the table \['note'\]"),
        ([(1, 1, "paid", "lots", 0)], None, "values that do not fit"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    spark: SparkSession,
    refusing: Moved,
    tmp_path: Path,
    rows: list[Order],
    extra: dict[str, Any] | None,
    message: str,
) -> None:
    offline, settings, _orders = refusing
    version = tables.latest_version(spark, store.offline_path(settings, offline))
    with pytest.raises(BackfillRefused, match=message):
        run(
            spark,
            settings,
            offline,
            write_jsonl(tmp_path / "bad.jsonl", rows, extra),
            T0 + 2 * H,
            T0 + 4 * H,
        )
    assert tables.latest_version(spark, store.offline_path(settings, offline)) == version
    assert audit.backfills(spark, settings, offline).count() == 0


def write_records(path: Path, records: list[dict[str, Any]]) -> str:
    """JSON lines exactly as given (numbers and strings as a real feed mixes them)."""
    base = {"customer_id": 1, "order_status": "paid", "ts": ms(T0 + 2.5 * H)}
    path.write_text("".join(json.dumps({**base, **r}) + "\n" for r in records))
    return str(path)


@pytest.mark.parametrize(
    ("record", "amount"),
    [
        ({"order_id": 1, "amount": "13.290"}, "13.29"),
        ({"order_id": 1, "amount": "1.329e1"}, "13.29"),  # exponent form, exact
        ({"order_id": 1, "amount": 13.29}, "13.29"),  # a JSON number
        ({"order_id": "1.0", "amount": "7"}, "7.00"),  # an integer written as 1.0
    ],
)
def test_text_values_that_fit_exactly_are_backfilled(
    spark: SparkSession,
    moved: Moved,
    tmp_path: Path,
    record: dict[str, Any],
    amount: str,
) -> None:
    offline, settings, orders = moved
    run(
        spark,
        settings,
        offline,
        write_records(tmp_path / "f.jsonl", [record]),
        T0 + 2 * H,
        T0 + 4 * H,
    )
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, [orders[0], order(1, T0 + 2.5 * H, amount), orders[2], orders[3]]),
        ignore_row_order=True,
        ignore_nullable=True,
    )


@pytest.mark.parametrize(
    "record",
    [
        {"order_id": 1, "amount": "13.299"},  # three places in DECIMAL(12,2): not rounded
        {"order_id": 1, "amount": 13.299},
        {"order_id": 1, "amount": "1.3299e1"},
        {"order_id": 1, "amount": "100e2147483647"},  # far past any decimal: no crash either
        {"order_id": 1, "amount": "12345678901.00"},  # eleven integer digits in (12,2)
        {"order_id": "1.5", "amount": "7"},  # not an integer: not truncated to 1
        {"order_id": 1, "amount": "7", "ts": "1767234600000.5"},
    ],
)
def test_text_values_that_do_not_fit_exactly_refuse_the_backfill(
    spark: SparkSession,
    refusing: Moved,
    tmp_path: Path,
    record: dict[str, Any],
) -> None:
    offline, settings, _orders = refusing
    version = tables.latest_version(spark, store.offline_path(settings, offline))
    source = write_records(tmp_path / "f.jsonl", [record])
    with pytest.raises(BackfillRefused, match="values that do not fit"):
        run(spark, settings, offline, source, T0 + 2 * H, T0 + 4 * H)
    assert tables.latest_version(spark, store.offline_path(settings, offline)) == version


TYPED = "order_id {id}, customer_id BIGINT, order_status STRING, amount {amount}, ts BIGINT"


@pytest.mark.parametrize(
    ("id_type", "amount_type", "order_id", "amount", "fits"),
    [
        ("BIGINT", "DOUBLE", 1, 13.29, True),
        ("BIGINT", "DECIMAL(12,3)", 1, Decimal("13.290"), True),
        ("DOUBLE", "DECIMAL(12,2)", 1.0, Decimal("13.29"), True),
        ("BIGINT", "DOUBLE", 1, 13.299, False),  # a cast would round it to 13.30
        ("BIGINT", "DECIMAL(12,3)", 1, Decimal("13.299"), False),
        ("DOUBLE", "DECIMAL(12,2)", 1.5, Decimal("13.29"), False),  # a cast would truncate
    ],
)
def test_a_typed_input_value_is_backfilled_only_when_it_fits_exactly(
    spark: SparkSession,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    id_type: str,
    amount_type: str,
    order_id: Any,
    amount: Any,
    fits: bool,
) -> None:
    moved: Moved = request.getfixturevalue("moved" if fits else "refusing")
    offline, settings, orders = moved
    path = str(tmp_path / "typed")
    row = (order_id, 1, "paid", amount, ms(T0 + 2.5 * H))
    spark.createDataFrame([row], TYPED.format(id=id_type, amount=amount_type)).write.parquet(path)
    if not fits:
        version = tables.latest_version(spark, store.offline_path(settings, offline))
        with pytest.raises(BackfillRefused, match="values that do not fit"):
            run(spark, settings, offline, path, T0 + 2 * H, T0 + 4 * H)
        assert tables.latest_version(spark, store.offline_path(settings, offline)) == version
        return
    run(spark, settings, offline, path, T0 + 2 * H, T0 + 4 * H)
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, [orders[0], order(1, T0 + 2.5 * H, "13.29"), orders[2], orders[3]]),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_a_csv_input_is_read_by_its_header_names_whatever_their_order(
    spark: SparkSession, moved: Moved, tmp_path: Path
) -> None:
    offline, settings, orders = moved
    path = tmp_path / "fix.csv"
    at = ms(T0 + 2.5 * H)
    path.write_text(f"ts,amount,order_status,customer_id,order_id\n{at},13.29,paid,7,1\n")
    run(spark, settings, offline, str(path), T0 + 2 * H, T0 + 4 * H)
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(
            spark, [orders[0], order(1, T0 + 2.5 * H, "13.29", customer=7), orders[2], orders[3]]
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_decimal_text_is_read_as_text_even_where_the_feed_sends_debezium_bytes(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    """`1000` is valid base64 too: read as Debezium's unscaled bytes it would be -26672.12."""
    offline, settings = offline_setup(spark, settings, encodings={"amount": "base64"})
    path = tmp_path / "fix.csv"
    path.write_text(f"order_id,customer_id,order_status,amount,ts\n1,1,paid,1000,{ms(T0)}\n")
    run(spark, settings, offline, str(path), T0, T0 + 2 * H)
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline).where("order_id = 1"),
        frame(spark, [order(1, T0, "1000.00")]),
        ignore_nullable=True,
    )


TIMED = "order_id BIGINT, at TIMESTAMP, line STRUCT<price: DECIMAL(12,2), qty: INT>, ts BIGINT"


@pytest.mark.parametrize(
    ("given", "value", "encodings", "fits"),
    [
        # Epoch milliseconds for a TIMESTAMP: a cast would read them as seconds (year ~58000).
        ("at BIGINT", ms(T0 + H), {}, False),
        ("at BIGINT", ms(T0 + H), {"at": "epoch_ms"}, True),
        # A struct with its fields in another order: a cast pairs them by position.
        ("line STRUCT<qty: INT, price: DECIMAL(12,2)>", (3, Decimal("1.50")), {}, False),
        ("line STRUCT<price: DOUBLE, qty: INT>", (13.299, 3), {}, False),  # would round
        # A nested value as JSON text is decoded leaf by leaf: Spark's reading rounded it.
        ("line STRING", '{"price": 13.299, "qty": 3}', {}, False),
        ("line STRING", '{"price": 1.5, "qty": 3.5}', {}, False),
        ("line STRING", '{"price": "1.50", "qty": "3"}', {}, True),
        # A field the struct does not declare: a correction must not lose it silently.
        ("line STRING", '{"price": "1.50", "qty": "3", "discount": "0.10"}', {}, False),
    ],
)
def test_a_typed_value_of_another_kind_is_read_by_the_column_encoding_or_refused(
    spark: SparkSession,
    settings: Settings,
    tmp_path: Path,
    given: str,
    value: Any,
    encodings: dict[str, str],
    fits: bool,
) -> None:
    offline, settings = offline_setup(spark, settings, columns=TIMED, encodings=encodings)
    name = given.split(" ", 1)[0]
    columns = {
        "order_id BIGINT": 1,
        "at TIMESTAMP": T0 + H,
        "line STRUCT<price: DECIMAL(12,2), qty: INT>": (Decimal("1.50"), 3),
        "ts BIGINT": ms(T0 + H),
    }
    ddl = [given if c.startswith(f"{name} ") else c for c in columns]
    row = [value if c.startswith(f"{name} ") else v for c, v in columns.items()]
    path = str(tmp_path / "typed")
    spark.createDataFrame([tuple(row)], ", ".join(ddl)).write.parquet(path)
    if not fits:
        with pytest.raises(BackfillRefused, match=rf"values that do not fit.*'{name}'"):
            run(spark, settings, offline, path, T0, T0 + 2 * H)
        return
    run(spark, settings, offline, path, T0, T0 + 2 * H)
    stored = hybrid.read_hybrid(spark, settings, offline).select("at").collect()
    assert [r["at"] for r in stored] == [T0 + H]


BYTES = "order_id BIGINT, tag BINARY, ts BIGINT"


@pytest.mark.parametrize(
    ("text", "fits"),
    [
        ("3q2+7w==", True),  # padded base64, as silver reads a bytea
        ("3q2+7w", False),  # unpadded: Spark's decoder took it, silver does not
        ("99", False),  # a number's digits: Spark's decoder read one byte out of them
        ("3q2+ 7w==", False),  # with a space: Spark's decoder skipped it
    ],
)
def test_binary_text_is_read_only_as_padded_base64(
    spark: SparkSession, settings: Settings, tmp_path: Path, text: str, fits: bool
) -> None:
    offline, settings = offline_setup(spark, settings, columns=BYTES)
    path = tmp_path / "fix.csv"
    path.write_text(f"order_id,tag,ts\n1,{text},{ms(T0 + H)}\n")
    if not fits:
        with pytest.raises(BackfillRefused, match=r"values that do not fit.*'tag'"):
            run(spark, settings, offline, str(path), T0, T0 + 2 * H)
        return
    run(spark, settings, offline, str(path), T0, T0 + 2 * H)
    stored = hybrid.read_hybrid(spark, settings, offline).select("order_id", "tag", "ts")
    expected = spark.createDataFrame([(1, bytearray(b"\xde\xad\xbe\xef"), ms(T0 + H))], BYTES)
    assert_df_equality(stored, expected, ignore_nullable=True)


def test_a_csv_value_that_does_not_fit_exactly_refuses_the_backfill(
    spark: SparkSession, refusing: Moved, tmp_path: Path
) -> None:
    offline, settings, _orders = refusing
    version = tables.latest_version(spark, store.offline_path(settings, offline))
    path = tmp_path / "fix.csv"
    path.write_text(
        f"order_id,customer_id,order_status,amount,ts\n1,1,paid,13.299,{ms(T0 + 3 * H)}\n"
    )
    with pytest.raises(BackfillRefused, match=r"values that do not fit.*13\.299"):
        run(spark, settings, offline, str(path), T0 + 2 * H, T0 + 4 * H)
    assert tables.latest_version(spark, store.offline_path(settings, offline)) == version


def test_windows_off_the_edges_or_not_closed_are_refused(
    spark: SparkSession, refusing: Moved, tmp_path: Path
) -> None:
    offline, settings, _orders = refusing
    version = tables.latest_version(spark, store.offline_path(settings, offline))
    source = write_jsonl(tmp_path / "f.jsonl", [order(1, T0 + 2.5 * H)])
    with pytest.raises(UsageError, match="not on a bucket edge"):
        run(spark, settings, offline, source, T0 + H, T0 + 4 * H)
    with pytest.raises(UsageError, match=r"not closed yet: it closes at 2026-01-01T10:01:00"):
        run(spark, settings, offline, source, T0 + 8 * H, T0 + 10 * H)
    assert tables.latest_version(spark, store.offline_path(settings, offline)) == version


def test_a_window_past_the_boundary_moves_the_gap_and_the_boundary(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    """Buckets [00:00, 02:00) moved; a backfill of [04:00, 06:00) also moves [02:00, 04:00)
    from realtime in the same commit, so the view has no gap, and owns its window."""
    offline, settings = offline_setup(spark, settings)
    orders = [order(i, T0 + (2 * i + 0.5) * H) for i in range(4)]
    upsert(spark, settings, offline, orders)
    realtime_to_offline(spark, settings, MoveOptions(offline, T0 + 2 * H + timedelta(minutes=1)))
    assert boundary.current(spark, settings, offline).boundary == T0 + 2 * H  # type: ignore[union-attr]
    fixed = [order(2, T0 + 4.5 * H, "77.00")]
    report = run(
        spark, settings, offline, write_jsonl(tmp_path / "f.jsonl", fixed), T0 + 4 * H, T0 + 6 * H
    )
    assert report.gap == [T0 + 2 * H]
    assert boundary.current(spark, settings, offline).boundary == T0 + 6 * H  # type: ignore[union-attr]
    ids = sorted(r["order_id"] for r in offline_rows(spark, settings, offline).collect())
    assert ids == [0, 1, 2]
    expected = [orders[0], orders[1], fixed[0], orders[3]]
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, expected),
        ignore_row_order=True,
        ignore_nullable=True,
    )

    # A late realtime change to the backfilled bucket is counted, not applied; one to a
    # bucket the realtime path moved is moved again.
    late = [order(2, T0 + 4.75 * H, "1.00"), order(1, T0 + 2.5 * H, "2.00")]
    upsert(spark, settings, offline, late)
    # `lakehouse status`: the next move would move the one to 02:00 again, not the other.
    (row,) = offline_summary(spark, settings).where(f"table = 'offline.{offline}'").collect()
    assert row["late_changes_pending"] == 1
    realtime_to_offline(spark, settings, MoveOptions(offline, T0 + 6 * H + timedelta(minutes=1)))
    (last,) = [e for e in audit.move_events(spark, settings, offline) if e["event"] == "moved"][-1:]
    assert last["ignored"] == {(T0 + 4 * H).isoformat(): 1}
    assert last["late"] == [(T0 + 2 * H).isoformat()]
    expected = [orders[0], late[1], fixed[0], orders[3]]
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, expected),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    # `lakehouse status` shows the change that was not applied, and the bucket moved again.
    (row,) = offline_summary(spark, settings).where(f"table = 'offline.{offline}'").collect()
    assert (row["late_buckets_moved_again"], row["late_changes_not_applied"]) == (1, 1)


def test_expectations_of_the_realtime_table_guard_the_input(
    spark: SparkSession, moved: Moved, tmp_path: Path
) -> None:
    from dataclasses import replace

    from lakehouse.core.specs import ExpectationSettings

    offline, settings, _orders = moved
    realtime = settings.offline_table(offline).realtime
    rules = (
        ExpectationSettings("amount_not_negative", "quarantine", sql="amount >= 0"),
        ExpectationSettings("not_a_test", "drop", sql="customer_id <> 999"),
        ExpectationSettings("never_void", "fail", sql="order_status <> 'void'"),
    )
    settings = replace(
        settings,
        silver={
            **settings.silver,
            realtime: replace(settings.silver[realtime], expectations=rules),
        },
    )
    negative: Order = (5, 1, "paid", Decimal("-1.00"), order(5, T0 + 2.5 * H)[4])
    with pytest.raises(BackfillRefused, match=r"expectation 'amount_not_negative' \(quarantine\)"):
        run(
            spark,
            settings,
            offline,
            write_jsonl(tmp_path / "n.jsonl", [negative]),
            T0 + 2 * H,
            T0 + 4 * H,
        )
    void: Order = (8, 1, "void", Decimal("1.00"), order(8, T0 + 2.5 * H)[4])
    with pytest.raises(BackfillRefused, match=r"expectation 'never_void' \(fail\)"):
        run(
            spark,
            settings,
            offline,
            write_jsonl(tmp_path / "v.jsonl", [void, order(9, T0 + 3 * H)]),
            T0 + 2 * H,
            T0 + 4 * H,
        )
    assert audit.backfills(spark, settings, offline).count() == 0
    kept, dropped = order(6, T0 + 2.5 * H), order(7, T0 + 3 * H, customer=999)
    report = run(
        spark,
        settings,
        offline,
        write_jsonl(tmp_path / "d.jsonl", [kept, dropped]),
        T0 + 2 * H,
        T0 + 4 * H,
    )
    assert report.rule_failures == {"amount_not_negative": 0, "not_a_test": 1, "never_void": 0}
    window = offline_rows(spark, settings, offline).where(
        f"{store.BUCKET} = TIMESTAMP'2026-01-01 02:00:00'"
    )
    assert [r["order_id"] for r in window.collect()] == [6]
