"""refine_silver on event tables: parse with the declared schema, upsert by key and sequence,
each expectation action, rescued fields, quarantine with lineage, per-rule metrics, and an
idempotent replay of a batch."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse import cli
from lakehouse.cli import tables as cli_tables
from lakehouse.core import fs
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings
from lakehouse.quality.expectations import ExpectationFailed
from lakehouse.silver import replay
from lakehouse.silver.refine import checkpoint_path
from lakehouse.silver.replay import replay_quarantine
from lakehouse.silver.transform import SchemaDriftError
from lakehouse.status import silver_summary
from tests.bronze.helpers import run_ingest
from tests.silver.helpers import (
    ORDER_SCHEMA,
    assert_current,
    current,
    events_pipeline,
    metrics,
    produce,
    quarantine,
    rule,
    run_refine,
    silver_table,
    with_silver,
)

RULES = (
    rule(
        "order_id_present", "drop", expect="expect_column_values_to_not_be_null", column="order_id"
    ),
    rule("amount_not_negative", "quarantine", sql="amount >= 0"),
    rule(
        "known_status",
        "warn",
        expect="expect_column_values_to_be_in_set",
        column="order_status",
        value_set=["created", "paid"],
    ),
)
SILVER = (
    "order_id bigint, customer_id bigint, order_status string, amount double, ts bigint, "
    "_rescued_data string"
)


def order(
    order_id: int | None, status: str, amount: object, ts: int | None, **extra: object
) -> dict[str, object]:
    return {
        "order_id": order_id,
        "customer_id": 7,
        "order_status": status,
        "amount": amount,
        "ts": ts,
        **extra,
    }


def test_upsert_expectations_quarantine_and_metrics(
    spark: SparkSession, kafka_up: Settings
) -> None:
    events: list[object] = [
        order(1, "created", 10.5, 100),  # offset 0
        order(1, "paid", 10.5, 200),  # 1: the latest version of order 1
        order(1, "created", 9.0, 150),  # 2: older than offset 1, arrives later: ignored
        order(2, "paid", -5.0, 100),  # 3: quarantined (amount_not_negative)
        order(None, "paid", 3.0, 100),  # 4: dropped (order_id_present)
        order(3, "weird", 1.0, 1),  # 5: kept, counted by the warn rule
        order(4, "paid", 2.0, 1, coupon="X", extra={"a": 1}),  # 6: unknown fields rescued
        order(5, "paid", "abc", 1),  # 7: mistyped amount: rescued, and fails amount >= 0
        b'{"order_id": 9, "amou',  # 8: not JSON: quarantined by the built-in rule
    ]
    source, topic, name, settings = events_pipeline(
        spark,
        kafka_up,
        events,
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        expectations=RULES,
    )
    result = run_refine(spark, settings, name)
    assert (result.rows_in, result.rows_written, result.rows_dropped, result.rows_quarantined) == (
        9,
        5,
        1,
        3,
    )

    expected = spark.createDataFrame(
        [
            (1, 7, "paid", 10.5, 200, None),
            (3, 7, "weird", 1.0, 1, None),
            (4, 7, "paid", 2.0, 1, '{"coupon":"X","extra":"{\\"a\\":1}"}'),
        ],
        SILVER,
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )

    q = quarantine(spark, settings, name).select(
        "topic", "partition", "offset", "failed_rules", "parse_error", "record", "status"
    )
    expected_q = spark.createDataFrame(
        [
            (
                topic,
                0,
                3,
                ["amount_not_negative"],
                None,
                '{"order_id":2,"customer_id":7,"order_status":"paid","amount":-5.0,"ts":100}',
                "quarantined",
            ),
            (
                topic,
                0,
                7,
                ["amount_not_negative"],
                None,
                '{"order_id":5,"customer_id":7,"order_status":"paid","ts":1,"_rescued_data":"{\\"amount\\":\\"abc\\"}"}',
                "quarantined",
            ),
            (topic, 0, 8, ["parsable"], "invalid_json", "{}", "quarantined"),
        ],
        "topic string, partition int, offset long, failed_rules array<string>, parse_error string, "
        "record string, status string",
    )
    assert_df_equality(q, expected_q, ignore_row_order=True, ignore_nullable=True)
    raw = quarantine(spark, settings, name).where("offset = 8").select("raw_value").collect()[0][0]
    assert bytes(raw) == b'{"order_id": 9, "amou'

    m = metrics(spark, settings, name).select(
        "batch_id", "rule", "action", "passed", "failed", "batch_rows", "batch_written"
    )
    expected_m = spark.createDataFrame(
        [
            (0, "parsable", "quarantine", 8, 1, 9, 5),
            (0, "order_id_present", "drop", 8, 1, 9, 5),
            (0, "amount_not_negative", "quarantine", 7, 2, 9, 5),
            (0, "known_status", "warn", 8, 1, 9, 5),
            (0, "decode:amount", "rescue", 8, 1, 9, 5),  # "abc" is not a DOUBLE
        ],
        "batch_id long, rule string, action string, passed long, failed long, batch_rows long, "
        "batch_written long",
    )
    assert_df_equality(m, expected_m, ignore_row_order=True, ignore_nullable=True)

    # A later batch moves order 1 forward; an older version of order 3 changes nothing.
    produce(settings, topic, [order(1, "paid", 11.0, 300), order(3, "created", 1.0, 0)])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)
    rows = {r["order_id"]: (r["amount"], r["ts"]) for r in current(spark, settings, name).collect()}
    assert rows == {1: (11.0, 300), 3: (1.0, 1), 4: (2.0, 1)}


def test_fail_action_commits_nothing_and_names_the_rule(
    spark: SparkSession, kafka_up: Settings
) -> None:
    events: list[object] = [order(1, "paid", 1.0, 1), order(2, "paid", -1.0, 1)]
    strict = (rule("amount_not_negative", "fail", sql="amount >= 0"),)
    _, _, name, settings = events_pipeline(
        spark,
        kafka_up,
        events,
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        expectations=strict,
    )
    with pytest.raises(ExpectationFailed) as failure:
        run_refine(spark, settings, name)
    assert (failure.value.rule, failure.value.failed) == ("amount_not_negative", 1)
    assert failure.value.sample[0]["order_id"] == 2
    assert silver_table(spark, settings, name).count() == 0
    assert metrics(spark, settings, name).count() == 0

    # With the rule relaxed to warn, the same batch (the checkpoint did not move) goes through.
    relaxed = replace(
        settings.silver[name],
        expectations=(rule("amount_not_negative", "warn", sql="amount >= 0"),),
    )
    settings = replace(settings, silver={**settings.silver, name: relaxed})
    assert run_refine(spark, settings, name).rows_written == 2
    assert sorted(r["order_id"] for r in current(spark, settings, name).collect()) == [1, 2]


def test_schema_drift_fail_and_evolve(spark: SparkSession, kafka_up: Settings) -> None:
    events: list[object] = [
        order(1, "paid", 1.0, 1),
        order(2, "paid", 2.0, 2, coupon="X", discount=5),
    ]
    source, topic, name, settings = events_pipeline(
        spark,
        kafka_up,
        events,
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        schema_drift="fail",
    )
    with pytest.raises(SchemaDriftError, match=r"\['coupon', 'discount'\].*schema_drift: fail"):
        run_refine(spark, settings, name)
    assert silver_table(spark, settings, name).count() == 0

    evolving = replace(settings.silver[name], schema_drift="evolve")
    settings = replace(settings, silver={**settings.silver, name: evolving})
    run_refine(spark, settings, name)
    expected = spark.createDataFrame(
        [(1, 7, "paid", 1.0, 1, None, None, None), (2, 7, "paid", 2.0, 2, None, "X", 5)],
        f"{SILVER}, coupon string, discount bigint",
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )
    # A later run (a restart: a new plan from the table) parses the evolved columns too.
    produce(settings, topic, [order(3, "paid", 3.0, 3, coupon="Y", discount=7)])
    run_ingest(spark, settings, source)
    assert run_refine(spark, settings, name).rows_written == 1
    row = current(spark, settings, name).where("order_id = 3").collect()[0]
    assert (row["coupon"], row["discount"], row["_rescued_data"]) == ("Y", 7, None)


def test_replayed_batch_commits_nothing_twice(spark: SparkSession, kafka_up: Settings) -> None:
    """Forget that batch 0 was committed (as after a crash between the writes and the
    checkpoint commit): the rerun must leave silver, quarantine and metrics as they were."""
    events: list[object] = [order(1, "paid", 1.0, 1), order(2, "paid", -1.0, 1), b"nope"]
    _, _, name, settings = events_pipeline(
        spark, kafka_up, events, schema=ORDER_SCHEMA, mode="append", expectations=RULES
    )
    run_refine(spark, settings, name)
    before = [
        t.collect()
        for t in (
            silver_table(spark, settings, name),
            quarantine(spark, settings, name),
            metrics(spark, settings, name),
        )
    ]
    commit = settings.storage.path("_checkpoints", "refine_silver", name, "commits", "0")
    assert fs.exists(spark, commit)
    fs.delete(spark, commit)
    assert run_refine(spark, settings, name).batches == 1  # the batch really ran again
    after = [
        t.collect()
        for t in (
            silver_table(spark, settings, name),
            quarantine(spark, settings, name),
            metrics(spark, settings, name),
        )
    ]
    assert [sorted(map(str, rows)) for rows in after] == [sorted(map(str, rows)) for rows in before]
    assert [len(rows) for rows in before] == [1, 2, 4]


def test_quarantine_replay_after_repair(spark: SparkSession, kafka_up: Settings) -> None:
    events: list[object] = [order(1, "paid", 1.0, 1), order(2, "paid", -5.0, 1), b"nope"]
    _, _, name, settings = events_pipeline(
        spark,
        kafka_up,
        events,
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        expectations=RULES,
    )
    run_refine(spark, settings, name)
    # Repair order 2's sign; the unparsable record (offset 2) is left out by the filter.
    result = replay_quarantine(
        spark, settings, name, fixes=[("amount", "abs(amount)")], where="offset = 1"
    )
    assert (result.considered, result.replayed, result.dropped, result.still_quarantined) == (
        1,
        1,
        0,
        0,
    )
    expected = spark.createDataFrame(
        [(1, 7, "paid", 1.0, 1, None), (2, 7, "paid", 5.0, 1, None)], SILVER
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )
    statuses = quarantine(spark, settings, name).select("offset", "status", "failed_rules")
    expected_q = spark.createDataFrame(
        [(1, "replayed", []), (2, "quarantined", ["parsable"])],
        "offset long, status string, failed_rules array<string>",
    )
    assert_df_equality(statuses, expected_q, ignore_row_order=True, ignore_nullable=True)
    # Replaying again finds nothing pending and changes nothing.
    again = replay_quarantine(spark, settings, name, where="offset = 1")
    assert again.considered == 0
    assert current(spark, settings, name).count() == 2

    # The unparsable record has nothing to replay: it stays quarantined, silver unchanged...
    unparsable = replay_quarantine(spark, settings, name, where="offset = 2")
    assert (unparsable.considered, unparsable.replayed, unparsable.still_quarantined) == (1, 0, 1)
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )
    # ...until an operator writes the record it should have been.
    spark.sql(
        f"UPDATE delta.`{settings.storage.path('_system', 'quarantine')}` SET record = "
        """'{"order_id": 3, "customer_id": 7, "order_status": "paid", "amount": 2.0, "ts": 1}' """
        f"WHERE `table` = '{name}' AND offset = 2"
    )
    fixed = replay_quarantine(spark, settings, name, where="offset = 2")
    assert (fixed.considered, fixed.replayed, fixed.still_quarantined) == (1, 1, 0)
    assert sorted(r["order_id"] for r in current(spark, settings, name).collect()) == [1, 2, 3]


def test_a_replay_cut_off_after_its_silver_write_finishes_without_writing_twice(
    spark: SparkSession, kafka_up: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay dies between its silver append and marking the rows replayed, and another
    table's refine commits to the shared quarantine before the rerun: the rerun finishes the
    same replay (same rows, same fixes) and appends nothing a second time."""
    events: list[object] = [order(1, "paid", 1.0, 1), order(2, "paid", -5.0, 1)]
    _, _, name, settings = events_pipeline(
        spark, kafka_up, events, schema=ORDER_SCHEMA, mode="append", expectations=RULES
    )
    run_refine(spark, settings, name)
    fix = [("amount", "abs(amount)")]

    def cut_off(*_args: object) -> None:
        raise RuntimeError("killed before the quarantine update")

    monkeypatch.setattr(replay, "_settle", cut_off)
    with pytest.raises(RuntimeError, match="killed"):
        replay_quarantine(spark, settings, name, fixes=fix)
    monkeypatch.undo()
    assert silver_table(spark, settings, name).count() == 2  # the append did land
    # Another table quarantines a row: the shared quarantine table moves on.
    other: list[object] = [order(5, "paid", -1.0, 1)]
    _, _, other_name, other_settings = events_pipeline(
        spark, kafka_up, other, schema=ORDER_SCHEMA, mode="append", expectations=RULES
    )
    run_refine(spark, other_settings, other_name)
    # A different replay must wait until the cut-off one is finished.
    with pytest.raises(UsageError, match=r"replay 1 of silver\.\w+ .*did not finish"):
        replay_quarantine(spark, settings, name)

    done = replay_quarantine(spark, settings, name, fixes=fix)

    assert (done.considered, done.replayed) == (1, 1)
    expected = spark.createDataFrame(
        [(1, 7, "paid", 1.0, 1), (2, 7, "paid", 5.0, 1)],
        "order_id long, customer_id long, order_status string, amount double, ts long",
    )
    got = silver_table(spark, settings, name).select(*expected.columns)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    statuses = quarantine(spark, settings, name).select("offset", "status")
    assert [tuple(r) for r in statuses.collect()] == [(1, "replayed")]
    assert replay_quarantine(spark, settings, name, fixes=fix).considered == 0


def test_status_summary_and_cli_replay(
    spark: SparkSession,
    kafka_up: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`lakehouse status` shows the last batch's failures and the pending quarantine;
    `lakehouse replay` repairs and applies them; a malformed --fix is a usage error (exit 2)."""
    events: list[object] = [
        order(1, "paid", 1.0, 1),
        order(2, "paid", -5.0, 1),
        order(3, "lost", -2.0, 1),
    ]
    _, _, name, settings = events_pipeline(
        spark,
        kafka_up,
        events,
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        expectations=RULES,
    )
    run_refine(spark, settings, name)

    def summary() -> list[tuple[object, ...]]:
        rows = silver_summary(spark, settings).where(f"table = 'silver.{name}'")
        cols = ("live_rows", "last_batch", "last_batch_rows", "last_batch_failed")
        return [(*tuple(r[c] for c in cols), r["quarantined_pending"]) for r in rows.collect()]

    assert summary() == [(1, 0, 3, "amount_not_negative=2, known_status=1", 2)]

    def shared_session(_s: Settings, _name: str, body: Callable[[SparkSession], None]) -> None:
        body(spark)

    loaded = [settings]
    monkeypatch.setattr(cli, "load_settings", lambda env: loaded[0])
    monkeypatch.setattr(cli_tables, "with_session", shared_session)
    assert cli.main(["--env", "test", "replay", name, "--fix", "amount"]) == 2
    assert "--fix 'amount': use COLUMN=SQL" in capsys.readouterr().err
    # A `fail` rule the repaired rows break: exit 5, the rule named, nothing applied.
    never_lost = rule("never_lost", "fail", sql="order_status <> 'lost'")
    table = settings.silver[name]
    loaded[0] = replace(
        settings,
        silver={**settings.silver, name: replace(table, expectations=(*RULES, never_lost))},
    )
    assert cli.main(["replay", name, "--fix", "amount=abs(amount)"]) == 5
    assert "expectation 'never_lost' (action fail) failed for 1 row(s)" in capsys.readouterr().err
    assert summary() == [(1, 0, 3, "amount_not_negative=2, known_status=1", 2)]
    loaded[0] = settings
    assert cli.main(["replay", f"silver.{name}", "--fix", "amount=abs(amount)"]) == 0
    assert "2 quarantined row(s) re-checked: 2 applied to silver" in capsys.readouterr().out
    expected = spark.createDataFrame(
        [(1, 7, "paid", 1.0, 1, None), (2, 7, "paid", 5.0, 1, None), (3, 7, "lost", 2.0, 1, None)],
        SILVER,
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )
    assert summary() == [(3, 0, 3, "amount_not_negative=2, known_status=1", 0)]

    # `lakehouse reset silver.X` is --full-refresh: data, checkpoint and quarantined rows go;
    # the next refine rebuilds from bronze (the two rows quarantined again, not replayed).
    assert cli.main(["reset", f"silver.{name}"]) == 0
    assert "reset (data, checkpoint and quarantined rows removed" in capsys.readouterr().out
    assert not fs.exists(spark, settings.storage.path("silver", name))
    assert not fs.exists(spark, checkpoint_path(settings, name))
    assert quarantine(spark, settings, name).count() == 0
    run_refine(spark, settings, name)
    assert_df_equality(
        current(spark, settings, name),
        spark.createDataFrame([(1, 7, "paid", 1.0, 1, None)], SILVER),
        ignore_nullable=True,
    )
    assert quarantine(spark, settings, name).count() == 2


def test_a_lost_checkpoint_loses_nothing_keyed_and_refuses_to_duplicate_append(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Delta remembers each transaction id's last batch: a new checkpoint restarts batch ids at
    0, so its batches must not carry the old stream's id, or they would all be skipped as
    already committed and every change since would be lost. The new stream's batch 0 records
    its metrics too: the old stream's batch 0 rows do not pass for them."""
    first: list[object] = [order(1, "paid", 1.0, 1), order(2, "paid", 2.0, 1)]
    source, topic, name, settings = events_pipeline(
        spark,
        kafka_up,
        first,
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        expectations=(rule("amount_not_negative", "quarantine", sql="amount >= 0"),),
    )
    run_refine(spark, settings, name)
    fs.delete(spark, settings.storage.path("_checkpoints", "refine_silver", name))
    produce(settings, topic, [order(2, "shipped", 2.0, 2), order(3, "paid", 3.0, 1)])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)
    expected = spark.createDataFrame(
        [
            (1, 7, "paid", 1.0, 1, None),
            (2, 7, "shipped", 2.0, 2, None),
            (3, 7, "paid", 3.0, 1, None),
        ],
        SILVER,
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )
    # Each run one batch 0: the first read two records, the new stream all four again.
    counted = (
        metrics(spark, settings, name)
        .where("rule = 'amount_not_negative'")
        .select("batch_id", "batch_rows", "passed")
    )
    assert sorted(tuple(r) for r in counted.collect()) == [(0, 2, 2), (0, 4, 4)]

    appended, settings = with_silver(settings, source, schema=ORDER_SCHEMA, mode="append")
    run_refine(spark, settings, appended)
    fs.delete(spark, settings.storage.path("_checkpoints", "refine_silver", appended))
    with pytest.raises(UsageError, match=r"checkpoint .* is gone: a new stream would append"):
        run_refine(spark, settings, appended)


@pytest.mark.parametrize(
    ("declared", "column"),
    [
        (
            rule(
                "has_coupon", "drop", expect="expect_column_values_to_not_be_null", column="coupon"
            ),
            "coupon",
        ),
        (rule("cheap", "quarantine", sql="price < 100"), "price"),
    ],
    ids=["expect_rule", "sql_rule"],
)
def test_a_rule_on_a_column_the_table_does_not_have_fails_at_start_naming_both(
    spark: SparkSession, kafka_up: Settings, declared: object, column: str
) -> None:
    """A misspelt or vanished column in a rule is a config error found before anything is
    read or written (exit 2), never a generic Spark failure mid-batch or rows dropped."""
    _, _, name, settings = events_pipeline(
        spark,
        kafka_up,
        [order(1, "paid", 1.0, 1)],
        schema=ORDER_SCHEMA,
        mode="append",
        expectations=(declared,),
    )
    with pytest.raises(UsageError) as err:
        run_refine(spark, settings, name)
    message = str(err.value)
    assert message.startswith(f"silver.{name}.expectations.{declared.name}: "), message  # type: ignore[attr-defined]
    assert f"`{column}`" in message, message
    assert "order_id, customer_id, order_status, amount, ts" in message, message
    assert not fs.exists(spark, settings.storage.path("silver", name))


def test_equal_sequence_values_are_settled_by_first_arrival_through_refine(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """README: versions of a key with the same `sequence_by` value, the first to arrive in
    bronze wins, within a batch, across batches and after a full refresh."""
    first: list[object] = [
        order(1, "created", 1.0, 100),
        order(1, "paid", 2.0, 100),
        order(2, "paid", 5.0, 7),
    ]
    source, topic, name, settings = events_pipeline(
        spark, kafka_up, first, schema=ORDER_SCHEMA, keys=("order_id",), sequence_by="ts"
    )

    def statuses() -> list[tuple[int, str]]:
        rows = current(spark, settings, name).select("order_id", "order_status").collect()
        return sorted((r[0], r[1]) for r in rows)

    run_refine(spark, settings, name)
    assert statuses() == [(1, "created"), (2, "paid")]
    produce(settings, topic, [order(1, "shipped", 3.0, 100), order(2, "lost", 0.0, 8)])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)
    assert statuses() == [(1, "created"), (2, "lost")]
    run_refine(spark, settings, name, full_refresh=True)  # all of bronze in one batch
    assert statuses() == [(1, "created"), (2, "lost")]


def test_an_exploded_batch_line_counts_the_records_read_not_the_rows_made(
    spark: SparkSession, kafka_up: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[object] = [
        {"order_id": 1, "items": [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}]},
        {"order_id": 2, "items": []},
    ]
    _source, _topic, name, settings = events_pipeline(
        spark,
        kafka_up,
        events,
        mode="append",
        schema="order_id BIGINT, items ARRAY<STRUCT<sku: STRING>>",
        explode=("items",),
    )
    caplog.set_level(logging.INFO, logger="lakehouse.core.streaming")
    run_refine(spark, settings, name)
    counts = re.findall(r"refine_silver_\w+ batch (\d+): (\d+) rows in", caplog.text)
    assert counts == [("0", "2")], caplog.text[-2000:]
    assert current(spark, settings, name).count() == 4  # three items, and the empty record


def test_batch_after_batch_of_one_run_each_refines_as_a_first_batch_would(
    spark: SparkSession, kafka_up: Settings
) -> None:
    # A run builds its parse on its first batch and replays it on the others
    # (`Plan.records`): each later batch, with its own kinds of records, must come out as a
    # first batch would (the same records in one batch: test_upsert_expectations_...).
    commits: list[list[object]] = [
        [order(1, "created", 10.5, 100), order(2, "paid", -5.0, 100)],  # offsets 0, 1
        [order(None, "paid", 3.0, 100), order(3, "weird", 1.0, 1)],  # 2, 3
        [order(4, "paid", 2.0, 1, coupon="X", extra={"a": 1}), order(5, "paid", "abc", 1)],
        [b'{"order_id": 9, "amou', order(1, "paid", 10.5, 200)],  # 6, 7
    ]
    source, topic, name, settings = events_pipeline(
        spark,
        kafka_up,
        commits[0],
        schema=ORDER_SCHEMA,
        mode="append",
        expectations=RULES,
        max_files_per_trigger=1,  # one bronze commit per batch
    )
    for events in commits[1:]:
        produce(settings, topic, events)
        run_ingest(spark, settings, source)
    result = run_refine(spark, settings, name)

    assert (result.batches, result.rows_in, result.rows_written) == (4, 8, 4)
    expected = spark.createDataFrame(
        [
            (1, 7, "created", 10.5, 100, None),
            (3, 7, "weird", 1.0, 1, None),
            (4, 7, "paid", 2.0, 1, '{"coupon":"X","extra":"{\\"a\\":1}"}'),
            (1, 7, "paid", 10.5, 200, None),
        ],
        SILVER,
    )
    assert_df_equality(
        silver_table(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )
    q = quarantine(spark, settings, name).select(
        "batch_id", "offset", "failed_rules", "parse_error", "record"
    )
    expected_q = spark.createDataFrame(
        [
            (
                0,
                1,
                ["amount_not_negative"],
                None,
                '{"order_id":2,"customer_id":7,"order_status":"paid","amount":-5.0,"ts":100}',
            ),
            (
                2,
                5,
                ["amount_not_negative"],
                None,
                '{"order_id":5,"customer_id":7,"order_status":"paid","ts":1,"_rescued_data":"{\\"amount\\":\\"abc\\"}"}',
            ),
            (3, 6, ["parsable"], "invalid_json", "{}"),
        ],
        "batch_id long, offset long, failed_rules array<string>, parse_error string, record string",
    )
    assert_df_equality(q, expected_q, ignore_row_order=True, ignore_nullable=True)
    failed = metrics(spark, settings, name).where("failed > 0").select("batch_id", "rule", "failed")
    expected_m = spark.createDataFrame(
        [
            (0, "amount_not_negative", 1),
            (1, "order_id_present", 1),
            (1, "known_status", 1),
            (2, "amount_not_negative", 1),
            (2, "decode:amount", 1),
            (3, "parsable", 1),
        ],
        "batch_id long, rule string, failed long",
    )
    assert_df_equality(failed, expected_m, ignore_row_order=True, ignore_nullable=True)


def test_an_upsert_record_without_its_sequence_value_is_quarantined_naming_the_column(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """A NULL `sequence_by` value cannot be ordered: stored, it pinned its key (no later version
    is newer than NULL). Such records are quarantined with the column named, unless a rule of
    the table already drops or quarantines them, and replay applies them once repaired."""
    first: list[object] = [
        order(1, "created", 1.0, None),  # offset 0: no sequence
        order(2, "paid", 2.0, 5),
        order(3, "paid", -1.0, None),  # 2: the table's quarantine rule already takes it
        order(2, "paid", 3.0, None),  # 3: no sequence for a key silver holds
    ]
    source, topic, name, settings = events_pipeline(
        spark,
        kafka_up,
        first,
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        expectations=(rule("amount_not_negative", "quarantine", sql="amount >= 0"),),
    )
    result = run_refine(spark, settings, name)
    assert (result.rows_written, result.rows_quarantined) == (1, 3)
    produce(settings, topic, [order(1, "paid", 5.0, 100)])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)
    assert_current(
        spark,
        settings,
        name,
        [(1, 7, "paid", 5.0, 100, None), (2, 7, "paid", 2.0, 5, None)],
        SILVER,
    )
    q = quarantine(spark, settings, name).select("offset", "failed_rules", "parse_error")
    expected = spark.createDataFrame(
        [
            (0, ["parsable"], "null_sequence_by: ts"),
            (2, ["amount_not_negative"], None),
            (3, ["parsable"], "null_sequence_by: ts"),
        ],
        "offset long, failed_rules array<string>, parse_error string",
    )
    assert_df_equality(q, expected, ignore_row_order=True, ignore_nullable=True)
    # Nothing is lost: without a position it stays quarantined; given one, order 1's first
    # version (now the newest) applies.
    still = replay_quarantine(spark, settings, name, where="offset = 3")
    assert (still.considered, still.replayed, still.still_quarantined) == (1, 0, 1)
    fixed = replay_quarantine(spark, settings, name, fixes=[("ts", "150")], where="offset = 0")
    assert (fixed.considered, fixed.replayed, fixed.still_quarantined) == (1, 1, 0)
    assert_current(
        spark,
        settings,
        name,
        [(1, 7, "created", 1.0, 150, None), (2, 7, "paid", 2.0, 5, None)],
        SILVER,
    )
