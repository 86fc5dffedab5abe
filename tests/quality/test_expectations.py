"""Expectations: one projection names every failed rule per row; actions split the batch."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.quality.expectations import (
    FAILED,
    Expectation,
    ExpectationError,
    ExpectationFailed,
    check_fail_rules,
    evaluate,
    great_expectation_sql,
    kept,
    mask_columns,
    metrics,
    quarantined,
    with_failed_names,
)

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`

ORDERS = "order_id long, status string, amount double"
RULES = [
    Expectation("amount_non_negative", "amount >= 0", "warn"),
    Expectation(
        "known_status",
        great_expectation_sql(
            "known_status",
            "expect_column_values_to_be_in_set",
            {"column": "status", "value_set": ["paid", "shipped"]},
        ),
        "quarantine",
    ),
    Expectation(
        "has_id",
        great_expectation_sql(
            "has_id", "expect_column_values_to_not_be_null", {"column": "order_id"}
        ),
        "drop",
    ),
]


RULES_2_AND_5 = ["amount_non_negative", "known_status"]


def orders(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(
        [
            (1, "paid", 10.0),  # passes everything
            (2, "lost", 5.0),  # unknown status -> quarantine
            (3, "paid", -1.0),  # negative -> warn only
            (None, "shipped", 1.0),  # no id -> drop
            # A NULL amount fails the SQL rule (NULL is not a pass); the status is unknown.
            (5, "lost", None),
        ],
        ORDERS,
    )


def test_evaluate_names_failed_rules_per_row(spark: SparkSession) -> None:
    expected = spark.createDataFrame(
        [
            (1, "paid", 10.0, []),
            (2, "lost", 5.0, ["known_status"]),
            (3, "paid", -1.0, ["amount_non_negative"]),
            (None, "shipped", 1.0, ["has_id"]),
            (5, "lost", None, ["amount_non_negative", "known_status"]),
        ],
        f"{ORDERS}, {FAILED} array<string>",
    )
    evaluated = evaluate(orders(spark), RULES)
    assert_df_equality(
        with_failed_names(evaluated, RULES), expected, ignore_row_order=True, ignore_nullable=True
    )
    # Inside, the failed rules are bits: rule i of the declarations is bit i.
    masks = {r[0]: r[1] for r in evaluated.select("order_id", *mask_columns(3)).collect()}
    assert masks == {1: 0, 2: 2, 3: 1, None: 4, 5: 3}


def test_actions_split_the_batch(spark: SparkSession) -> None:
    evaluated = evaluate(orders(spark), RULES)
    assert_df_equality(
        kept(evaluated, RULES),
        spark.createDataFrame([(1, "paid", 10.0), (3, "paid", -1.0)], ORDERS),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    assert_df_equality(
        quarantined(evaluated, RULES),
        spark.createDataFrame(
            [(2, "lost", 5.0, ["known_status"]), (5, "lost", None, RULES_2_AND_5)],
            f"{ORDERS}, {FAILED} array<string>",
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    assert metrics(evaluated, RULES) == {
        "amount_non_negative": (3, 2),
        "known_status": (3, 2),
        "has_id": (4, 1),
    }


def test_fail_rule_stops_with_rule_count_and_sample(spark: SparkSession) -> None:
    rules = [Expectation("positive_amount", "amount > 0", "fail")]
    evaluated = evaluate(orders(spark).where("order_id IN (1, 3)"), rules)
    with pytest.raises(ExpectationFailed) as err:
        check_fail_rules(evaluated, rules, metrics(evaluated, rules))
    assert (err.value.rule, err.value.failed) == ("positive_amount", 1)
    assert err.value.sample == [{"order_id": 3, "status": "paid", "amount": -1.0}]
    assert "nothing of this batch was committed" in str(err.value)


def test_fail_rule_passes_silently_when_met(spark: SparkSession) -> None:
    rules = [Expectation("positive_amount", "amount > 0", "fail")]
    evaluated = evaluate(orders(spark).where("order_id = 1"), rules)
    check_fail_rules(evaluated, rules, metrics(evaluated, rules))


@pytest.mark.parametrize(
    ("kind", "args", "sql"),
    [
        (
            "expect_column_values_to_be_between",
            {"column": "amount", "min_value": 0},
            "(`amount` IS NULL OR (`amount` >= 0))",
        ),
        (
            "expect_column_values_to_be_between",
            {"column": "amount", "min_value": 0, "max_value": 9.5},
            "(`amount` IS NULL OR (`amount` >= 0 AND `amount` <= 9.5))",
        ),
        (
            "expect_column_values_to_be_between",
            {"column": "amount", "min_value": 0, "max_value": 9.5, "strict_min": True},
            "(`amount` IS NULL OR (`amount` > 0 AND `amount` <= 9.5))",
        ),
        (
            "expect_column_values_to_match_regex",
            {"column": "s", "regex": "^a'b$"},
            "(`s` IS NULL OR (`s` RLIKE '^a\\'b$'))",
        ),
        (
            "expect_column_values_to_be_in_set",
            {"column": "s", "value_set": ["x", 1]},
            "(`s` IS NULL OR (`s` IN ('x', 1)))",
        ),
        (
            "expect_column_values_to_not_be_null",
            {"column": "s", "mostly": 0.9},
            "`s` IS NOT NULL",
        ),
    ],
)
def test_great_expectations_translation(kind: str, args: dict[str, object], sql: str) -> None:
    """A NULL passes every column rule but not_null: Great Expectations does not judge it."""
    assert great_expectation_sql("rule", kind, args) == sql


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Expectation("Bad Name", "x > 0"), "use lower_snake_case"),
        (lambda: Expectation("r", "x > 0", "explode"), "action 'explode' is not one of"),
        (lambda: Expectation("r", "  "), "empty rule"),
        (
            lambda: great_expectation_sql("r", "expect_table_row_count_to_equal", {"column": "a"}),
            "unsupported Great Expectations type",
        ),
        (
            lambda: great_expectation_sql(
                "r", "expect_column_values_to_not_be_null", {"column": "a;"}
            ),
            "'column' must name a column",
        ),
    ],
)
def test_malformed_declarations_are_named(build: object, message: str) -> None:
    with pytest.raises(ExpectationError, match=message):
        build()  # type: ignore[operator]


def test_no_expectations_keeps_everything(spark: SparkSession) -> None:
    evaluated = evaluate(orders(spark), [])
    assert_df_equality(
        kept(evaluated, []), orders(spark), ignore_row_order=True, ignore_nullable=True
    )
    assert [r[FAILED] for r in with_failed_names(evaluated, []).collect()] == [[]] * 5
    assert metrics(evaluated, []) == {}


def test_more_rules_than_one_mask_holds(spark: SparkSession) -> None:
    # 70 rules span two 63-bit masks; rule i fails for the order whose id is i % 64 (a
    # missing id counts as 0), so every order fails one rule in each mask.
    rules = [
        Expectation(f"rule_{i}", f"coalesce(order_id, 0) <> {i % 64}", "warn") for i in range(70)
    ]
    rules[66] = Expectation("rule_66", "coalesce(order_id, 0) <> 2", "quarantine")
    evaluated = evaluate(orders(spark), rules)
    assert mask_columns(70) == ["_lh_failed_mask0", "_lh_failed_mask1"]
    names = {r["order_id"]: r[FAILED] for r in with_failed_names(evaluated, rules).collect()}
    assert names == {
        1: ["rule_1", "rule_65"],
        2: ["rule_2", "rule_66"],
        3: ["rule_3", "rule_67"],
        None: ["rule_0", "rule_64"],
        5: ["rule_5", "rule_69"],
    }
    assert_df_equality(
        quarantined(evaluated, rules),
        spark.createDataFrame(
            [(2, "lost", 5.0, ["rule_2", "rule_66"])], f"{ORDERS}, {FAILED} array<string>"
        ),
        ignore_nullable=True,
    )
    assert kept(evaluated, rules).count() == 4
    counts = metrics(evaluated, rules)
    assert (counts["rule_63"], counts["rule_64"], counts["rule_66"], counts["rule_68"]) == (
        (5, 0),
        (4, 1),
        (4, 1),
        (5, 0),
    )
