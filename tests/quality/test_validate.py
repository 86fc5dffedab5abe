"""`lakehouse validate`: real Great Expectations on real Delta tables, current rows only."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lakehouse import cli
from lakehouse.cli import tables as cli_tables
from lakehouse.core import system, tables
from lakehouse.core.settings import Settings
from lakehouse.core.specs import ExpectationSettings, SilverTableSettings
from lakehouse.quality.expectations import ExpectationError
from lakehouse.quality.report import ExpectationOutcome
from lakehouse.quality.suite import ValidateError, build_expectations, resolve_table
from lakehouse.quality.validate import gx_dir, validate

ORDER_COLUMNS = (
    "order_id BIGINT, order_status STRING, amount DECIMAL(12,2), ts BIGINT, _rescued_data STRING"
)
TOMBSTONES = "__seq BIGINT, __deleted BOOLEAN, __deleted_at TIMESTAMP"
HISTORY = (
    "__start_seq BIGINT, __end_seq BIGINT, __start_at TIMESTAMP, __end_at TIMESTAMP, __seq BIGINT"
)
DELETED_AT = datetime(2026, 1, 2, tzinfo=UTC)


def rule(
    name: str, sql: str = "", expect: str = "", action: str = "warn", **kwargs: Any
) -> ExpectationSettings:
    return ExpectationSettings(name, action, sql, expect, kwargs)


# The sample `orders` declarations (conf/base/tables.yml), plus a SQL rule with regex braces and
# a column contract that proves the bookkeeping columns are gone and `_rescued_data` stays.
ORDER_RULES = (
    rule("order_id_present", expect="expect_column_values_to_not_be_null", column="order_id"),
    rule("amount_not_negative", sql="amount >= 0", action="quarantine"),
    rule(
        "known_status",
        expect="expect_column_values_to_be_in_set",
        column="order_status",
        value_set=["created", "paid", "shipped", "cancelled"],
    ),
    rule("status_shaped", sql="order_status RLIKE '^[a-z]{4,9}$'"),
)
ORDER_TABLE_RULES = (
    rule("orders_unique", expect="expect_column_values_to_be_unique", column="order_id"),
    rule("orders_not_empty", expect="expect_table_row_count_to_be_between", min_value=1),
    rule(
        "orders_columns",
        expect="expect_table_columns_to_match_set",
        column_set=["order_id", "order_status", "amount", "ts", "_rescued_data"],
        exact_match=True,
    ),
)


# A rule GX cannot evaluate on this table: reported as an error, not a crash.
MISSING_COLUMN = rule(
    "customer_present", expect="expect_column_values_to_not_be_null", column="customer_id"
)
MISSING_COLUMN_ERROR = 'Error: The column "customer_id" in BatchData does not exist.'


def declare(settings: Settings, mode: str, schema: str, **fields: Any) -> tuple[str, Settings]:
    """A fresh silver table declaration added to a copy of `settings`."""
    name = f"v{uuid.uuid4().hex[:10]}"
    sequence_by = "ts" if mode == "upsert" else ""
    table = SilverTableSettings(
        source="orders", mode=mode, schema=schema, sequence_by=sequence_by, **fields
    )
    return name, replace(settings, silver={**settings.silver, name: table})


def write(
    spark: SparkSession, settings: Settings, name: str, rows: list[tuple[Any, ...]], ddl: str
) -> None:
    path = tables.table_path(settings, f"silver.{name}")
    spark.createDataFrame(rows, ddl).write.format("delta").mode("append").save(path)


@pytest.fixture(scope="module")
def passing(spark: SparkSession, settings: Settings) -> tuple[str, Settings]:
    """An upsert table whose live rows pass every rule; its tombstones would fail several (a
    duplicate key, a negative amount, an unknown status) but are not current rows."""
    name, declared = declare(
        settings,
        "upsert",
        ORDER_COLUMNS,
        keys=("order_id",),
        expectations=ORDER_RULES,
        table_expectations=ORDER_TABLE_RULES,
    )
    d = Decimal
    write(
        spark,
        declared,
        name,
        [
            (1, "paid", d("10.00"), 100, None, 1, False, None),
            (2, "created", d("0.00"), 101, None, 2, False, None),
            (3, "shipped", d("5.50"), 102, '{"coupon":"X1"}', 3, False, None),
            (2, "lost", d("-7.00"), 90, None, 4, True, DELETED_AT),
            (4, None, None, 95, None, 5, True, DELETED_AT),
        ],
        f"{ORDER_COLUMNS}, {TOMBSTONES}",
    )
    return name, declared


@pytest.fixture(scope="module")
def failing(spark: SparkSession, settings: Settings) -> tuple[str, Settings]:
    """An append table (no bookkeeping): every row is current, several break rules."""
    name, declared = declare(
        settings,
        "append",
        ORDER_COLUMNS,
        expectations=ORDER_RULES,
        table_expectations=(*ORDER_TABLE_RULES[:2], MISSING_COLUMN),
    )
    d = Decimal
    write(
        spark,
        declared,
        name,
        [
            (1, "paid", d("10.00"), 100, None),
            (1, "paid", d("10.00"), 100, None),  # a duplicate key
            (None, "created", d("5.00"), 101, None),  # no key
            (3, "lost", d("-2.00"), 102, None),  # negative, unknown status
            (4, None, None, 103, None),  # NULL amount and status: not a pass for SQL rules
            (5, "SHIPPED", d("1.00"), 104, None),  # unknown status, not lower-case
        ],
        ORDER_COLUMNS,
    )
    return name, declared


def outcome(
    name: str, kind: str, unexpected: int | None, observed: Any = None
) -> ExpectationOutcome:
    return ExpectationOutcome(name, kind, unexpected in (0, None), unexpected, observed)


NOT_NULL = "expect_column_values_to_not_be_null"
SQL = "unexpected_rows_expectation"
IN_SET = "expect_column_values_to_be_in_set"
UNIQUE = "expect_column_values_to_be_unique"
ROW_COUNT = "expect_table_row_count_to_be_between"


def test_passing_table_validates_only_current_rows(
    spark: SparkSession, passing: tuple[str, Settings]
) -> None:
    name, settings = passing
    report = validate(spark, settings, f"silver.{name}")

    assert (report.table, report.success, report.version, report.rows) == (
        f"silver.{name}",
        True,
        0,
        3,
    )
    columns = ["_rescued_data", "amount", "order_id", "order_status", "ts"]  # GX sorts them
    assert report.outcomes == (
        outcome("order_id_present", NOT_NULL, 0),
        outcome("amount_not_negative", SQL, 0, 0),
        outcome("known_status", IN_SET, 0),
        outcome("status_shaped", SQL, 0, 0),
        outcome("orders_unique", UNIQUE, 0),
        outcome("orders_not_empty", ROW_COUNT, None, 3),
        outcome("orders_columns", "expect_table_columns_to_match_set", None, columns),
    )
    assert report.failed == ()


def test_failing_table_names_each_failed_rule_and_its_count(
    spark: SparkSession, failing: tuple[str, Settings]
) -> None:
    name, settings = failing
    report = validate(spark, settings, name)  # a bare name is a silver table

    assert (report.table, report.success, report.version, report.rows) == (
        f"silver.{name}",
        False,
        0,
        6,
    )
    assert report.outcomes == (
        outcome("order_id_present", NOT_NULL, 1),
        outcome("amount_not_negative", SQL, 2, 2),  # -2.00 and NULL
        outcome("known_status", IN_SET, 2),  # lost, SHIPPED (GX skips NULLs)
        outcome("status_shaped", SQL, 2, 2),  # NULL, SHIPPED
        outcome("orders_unique", UNIQUE, 2),  # both rows of key 1
        outcome("orders_not_empty", ROW_COUNT, None, 6),
        ExpectationOutcome("customer_present", NOT_NULL, False, None, None, MISSING_COLUMN_ERROR),
    )
    assert [o.name for o in report.failed] == [
        "order_id_present",
        "amount_not_negative",
        "known_status",
        "status_shaped",
        "orders_unique",
        "customer_present",
    ]

    # The stored GX result, the Data Docs (index and this run's page, with the rule names)
    # and the validation log row all describe this run.
    stored = json.loads(Path(report.result_path).read_text(encoding="utf-8"))
    assert stored["success"] is False
    assert stored["suite_name"] == f"silver.{name}"
    project = gx_dir(settings)
    assert project == Path(settings.storage.root) / "_system" / "great_expectations"
    assert Path(report.result_path).is_relative_to(project)
    index = Path(report.data_docs)
    assert index.name == "index.html"
    assert index.is_relative_to(project)
    assert f"silver.{name}" in index.read_text(encoding="utf-8")
    # This run's page mirrors the stored result's path: silver/NAME/version-0/TIME/BATCH.
    run = Path(report.result_path).relative_to(project / "uncommitted" / "validations")
    assert run.parts[:3] == ("silver", name, "version-0")
    page = (index.parent / "validations" / run.with_suffix(".html")).read_text(encoding="utf-8")
    assert "amount_not_negative: every row satisfies amount >= 0" in page
    assert "status_shaped: every row satisfies order_status RLIKE '^[a-z]{4,9}$'" in page
    suite_page = index.parent / "expectations" / "silver" / f"{name}.html"
    for declared in (*ORDER_RULES, *ORDER_TABLE_RULES[:2], MISSING_COLUMN):
        assert f"rule <code>{declared.name}</code>" in suite_page.read_text(encoding="utf-8")

    logs = system.read_log(spark, settings, system.VALIDATION_LOG, f"silver.{name}")
    (logged,) = [r for r in logs if r["result_path"] == report.result_path]
    assert logged["event"] == "validated"
    assert (logged["success"], logged["version"], logged["rows"]) == (False, 0, 6)
    assert (logged["passed"], logged["failed"]) == (1, 6)
    assert logged["expectations"]["amount_not_negative"] == {
        "type": SQL,
        "success": False,
        "unexpected_count": 2,
        "observed_value": 2,
    }
    assert logged["expectations"]["orders_not_empty"] == {
        "type": ROW_COUNT,
        "success": True,
        "unexpected_count": None,
        "observed_value": 6,
    }
    assert logged["result_path"] == report.result_path


def test_scd2_history_validates_open_versions_at_the_latest_version(
    spark: SparkSession, settings: Settings
) -> None:
    schema = "customer_id INT, email STRING"
    name, declared = declare(
        settings,
        "scd2",
        schema,
        keys=("customer_id",),
        expectations=(
            rule(
                "email_shaped",
                expect="expect_column_values_to_match_regex",
                column="email",
                regex="^[^@ ]+@[^@ ]+$",
            ),
        ),
        table_expectations=(
            rule("customers_unique", expect=UNIQUE, column="customer_id"),
            rule("two_customers", expect=ROW_COUNT, min_value=2, max_value=2),
        ),
    )
    at = DELETED_AT
    ddl = f"{schema}, {HISTORY}"
    # Closed versions repeat keys and hold an old, malformed email: history, not current.
    write(spark, declared, name, [(1, "not an email", 1, 5, at, at, 1)], ddl)
    write(
        spark,
        declared,
        name,
        [
            (1, "ada@example.org", 5, None, at, None, 5),
            (2, "alan@example.org", 6, None, at, None, 6),
        ],
        ddl,
    )

    report = validate(spark, declared, f"silver.{name}")

    assert (report.success, report.version, report.rows) == (True, 1, 2)
    assert report.outcomes == (
        outcome("email_shaped", "expect_column_values_to_match_regex", 0),
        outcome("customers_unique", UNIQUE, 0),
        outcome("two_customers", ROW_COUNT, None, 2),
    )


@pytest.mark.pure
def test_unknown_expectation_type_fails_clearly_before_reading_the_table(
    spark: SparkSession, settings: Settings
) -> None:
    name, declared = declare(
        settings,
        "append",
        ORDER_COLUMNS,
        table_expectations=(rule("ids_unique", expect="expect_column_values_to_be_uniqe"),),
    )
    with pytest.raises(ExpectationError) as caught:
        validate(spark, declared, name)  # the table was never written: not reached
    assert str(caught.value) == (
        f"silver.{name}: expectation 'ids_unique' in table_expectations: "
        "'expect_column_values_to_be_uniqe' is not a Great Expectations type; did you mean "
        "expect_column_values_to_be_unique? (see https://greatexpectations.io/expectations/)"
    )


@pytest.mark.pure
def test_bad_kwargs_name_the_table_the_rule_and_the_problem(settings: Settings) -> None:
    name, declared = declare(
        settings,
        "append",
        ORDER_COLUMNS,
        expectations=(rule("ids_unique", expect=UNIQUE, colum="order_id"),),
    )
    with pytest.raises(ExpectationError) as caught:
        build_expectations(resolve_table(declared, name))
    message = str(caught.value)
    assert message.startswith(
        f"silver.{name}: expectation 'ids_unique' ({UNIQUE}): bad kwargs {{'colum': 'order_id'}}: "
    )
    assert "column; field required" in message
    assert "colum; extra fields not permitted" in message


def test_unknown_unbuilt_or_unsupported_tables_are_named(
    spark: SparkSession, settings: Settings
) -> None:
    name, declared = declare(settings, "append", ORDER_COLUMNS)
    with pytest.raises(ValidateError, match=r"silver\.nope: no such silver table .*known: .*"):
        resolve_table(declared, "silver.nope")
    with pytest.raises(ValidateError, match=r"'offline' has no table declarations"):
        resolve_table(declared, "offline.orders_offline")
    with pytest.raises(ValidateError, match=r"gold\.nope: no such gold table in conf/\*/gold\.yml"):
        resolve_table(declared, "gold.nope")
    with pytest.raises(ValidateError) as caught:
        validate(spark, declared, name)
    path = tables.table_path(declared, f"silver.{name}")
    assert str(caught.value) == (
        f"silver.{name}: no Delta table at {path} yet; build it first with "
        f"refine_silver --table {name}"
    )


def test_a_keyed_table_without_its_bookkeeping_is_refused(
    spark: SparkSession, settings: Settings
) -> None:
    name, declared = declare(settings, "scd1", ORDER_COLUMNS, keys=("order_id",))
    write(spark, declared, name, [(1, "paid", Decimal("1.00"), 1, None)], ORDER_COLUMNS)
    with pytest.raises(ValidateError, match=r"mode scd1 keeps a __deleted column"):
        validate(spark, declared, name)


@pytest.mark.pure
def test_gx_project_is_used_in_place_only_under_a_local_root(settings: Settings) -> None:
    """Any other root gets a scratch copy synced through Hadoop's FileSystem
    (tests/core/test_remote_root.py)."""

    def at(root: str) -> Path | None:
        return gx_dir(replace(settings, storage=replace(settings.storage, root=root)))

    assert at("/lake") == Path("/lake/_system/great_expectations")
    assert at("file:///lake") == Path("/lake/_system/great_expectations")
    assert at("s3a://bucket/lake") is None
    assert at("hdfs://namenode:8020/lake") is None


def run_cli(
    monkeypatch: pytest.MonkeyPatch, spark: SparkSession, settings: Settings, table: str
) -> int:
    """`lakehouse validate TABLE` in-process on the test session: the CLI's own session
    lifecycle would stop the shared session, so only that is replaced."""

    def shared_session(_s: Settings, _name: str, body: Callable[[SparkSession], None]) -> None:
        body(spark)

    monkeypatch.setattr(cli, "load_settings", lambda env: settings)
    monkeypatch.setattr(cli_tables, "with_session", shared_session)
    return cli.main(["--env", "test", "validate", table])


def test_cli_exits_1_and_prints_the_failed_rules(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spark: SparkSession,
    failing: tuple[str, Settings],
) -> None:
    name, settings = failing
    assert run_cli(monkeypatch, spark, settings, f"silver.{name}") == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[:10] == [
        f"silver.{name} at version 0: 6 current row(s), 7 expectation(s), 6 FAILED",
        "  expectation          type                                  result  unexpected",
        "  order_id_present     expect_column_values_to_not_be_null   FAIL    1",
        "  amount_not_negative  unexpected_rows_expectation           FAIL    2",
        "  known_status         expect_column_values_to_be_in_set     FAIL    2",
        "  status_shaped        unexpected_rows_expectation           FAIL    2",
        "  orders_unique        expect_column_values_to_be_unique     FAIL    2",
        "  orders_not_empty     expect_table_row_count_to_be_between  pass    - (observed 6)",
        "  customer_present     expect_column_values_to_not_be_null   ERROR   -",
        f"  customer_present: {MISSING_COLUMN_ERROR}",
    ]
    docs, result = lines[10].split(": ", 1)[1], lines[11].split(": ", 1)[1].strip()
    assert lines[10:] == [f"Data Docs: {docs}", f"Result:    {result}"]
    assert Path(docs).name == "index.html"
    assert Path(docs).is_file()
    assert Path(result).suffix == ".json"
    assert err.splitlines() == [
        f"lakehouse validate: silver.{name}: 6 of 7 expectation(s) failed (order_id_present, "
        f"amount_not_negative, known_status, status_shaped, orders_unique, customer_present); "
        "see "
        f"{docs}"
    ]


def test_cli_exits_0_when_all_pass_and_2_for_an_unknown_table(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spark: SparkSession,
    passing: tuple[str, Settings],
) -> None:
    name, settings = passing
    assert run_cli(monkeypatch, spark, settings, name) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"silver.{name} at version 0: 3 current row(s), 7 expectation(s), all")
    assert err == ""

    assert run_cli(monkeypatch, spark, settings, "silver.nope") == 2
    _, err = capsys.readouterr()
    assert err.startswith("lakehouse validate: silver.nope: no such silver table")


# The same Great Expectations rules judged by the per-batch engine (refine, replay, gold,
# backfill) and by `lakehouse validate` (Great Expectations itself) on the same rows.
PARITY_ROWS = [
    (1, "paid", Decimal("0.00"), 1, None),  # on the strict minimum
    (2, None, Decimal("10.00"), 2, None),  # a NULL status: not judged by the status rules
    (3, "PAID", None, 3, None),  # a NULL amount: not judged by the amount rules
    (None, "lost", Decimal("11.00"), 4, None),
    (5, "paid", Decimal("5.00"), 5, None),
    (6, "created", Decimal("7.00"), 6, None),
]
BETWEEN = "expect_column_values_to_be_between"
IN_SET = "expect_column_values_to_be_in_set"
NOT_NULL = "expect_column_values_to_not_be_null"
STATUSES = ["paid", "created", "lost"]
PARITY_RULES = (
    rule(
        "amount_range", expect=BETWEEN, column="amount", min_value=0, max_value=10, strict_min=True
    ),
    rule(
        "amount_mostly",
        expect=BETWEEN,
        column="amount",
        min_value=0,
        max_value=10,
        strict_min=True,
        mostly=0.5,  # 3 of the 5 judged pass
    ),
    rule("known_status", expect=IN_SET, column="order_status", value_set=STATUSES),
    rule(
        "lower_status",
        expect="expect_column_values_to_match_regex",
        column="order_status",
        regex="^[a-z]+$",
    ),
    rule("id_mostly", expect=NOT_NULL, column="order_id", mostly=0.8),  # 5 of 6
    rule("id_nearly_all", expect=NOT_NULL, column="order_id", mostly=0.9),
    # 4 of the 5 judged pass (0.8): fails; were the NULL judged as a pass, 5 of 6 would not.
    rule("status_mostly", expect=IN_SET, column="order_status", value_set=STATUSES, mostly=0.82),
)
# name: (verdict, unexpected rows), worked out by hand from the rows above.
PARITY_EXPECTED = {
    "amount_range": (False, 2),
    "amount_mostly": (True, 2),
    "known_status": (False, 1),
    "lower_status": (False, 1),
    "id_mostly": (True, 1),
    "id_nearly_all": (False, 1),
    "status_mostly": (False, 1),
}


def test_a_great_expectations_rule_gets_the_same_verdict_per_batch_and_in_validate(
    spark: SparkSession, settings: Settings
) -> None:
    from lakehouse.quality import expectations as engine

    name, declared = declare(settings, "append", ORDER_COLUMNS, expectations=PARITY_RULES)
    write(spark, declared, name, PARITY_ROWS, ORDER_COLUMNS)
    report = validate(spark, declared, name)
    assert {o.name: (o.success, o.unexpected_count) for o in report.outcomes} == PARITY_EXPECTED

    batch = spark.createDataFrame(PARITY_ROWS, ORDER_COLUMNS)
    verdicts = {}
    for declaration in PARITY_RULES:
        # As a `fail` rule: the batch stops exactly when the verdict fails.
        rules = engine.from_settings([replace(declaration, action="fail")])
        evaluated = engine.evaluate(batch, rules)
        counts = engine.metrics(evaluated, rules)
        try:
            engine.check_fail_rules(evaluated, rules, counts)
            verdict = True
        except engine.ExpectationFailed:
            verdict = False
        verdicts[declaration.name] = (verdict, counts[declaration.name][1])
    assert verdicts == PARITY_EXPECTED


@pytest.mark.pure
def test_a_kwarg_the_per_batch_engine_would_ignore_is_refused(settings: Settings) -> None:
    from lakehouse.quality import expectations as engine

    declared = rule(
        "r", expect=BETWEEN, column="amount", min_value=0, parse_strings_as_datetimes=True
    )
    with pytest.raises(
        ExpectationError, match=r"kwargs \['parse_strings_as_datetimes'\] are not supported"
    ):
        engine.from_settings([declared])
    with pytest.raises(ExpectationError, match="mostly must be a fraction"):
        engine.from_settings([rule("r", expect=NOT_NULL, column="amount", mostly=1.5)])
