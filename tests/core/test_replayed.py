"""A transform recorded on its first input and replayed on later ones (`core.replayed`),
against real Spark DataFrames: a replay must give exactly what the transform gives."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.replayed import Replayed

Rows = list[tuple[object, ...]]
SCHEMA = "id BIGINT, amount STRING"


def counted(transform: Callable[[DataFrame], DataFrame]) -> tuple[Replayed, list[int]]:
    """`transform` replayed, with how often it was really called."""
    calls: list[int] = []

    def called(df: DataFrame) -> DataFrame:
        calls.append(1)
        return transform(df)

    return Replayed(called), calls


def branching(df: DataFrame) -> DataFrame:
    """Two DataFrames made from the input, joined and filtered: a recording is a tree."""
    columns = [F.col("id"), F.col("amount").try_cast("decimal(10,2)").alias("value")]
    parsed = df.select(columns)
    big = parsed.where(F.col("value") > 10).select("id", F.lit(True).alias("big"))
    joined = parsed.join(big, on="id", how="left").withColumns(
        {"big": F.coalesce("big", F.lit(False))}
    )
    picked = [c for c in joined.columns if c != "value"]
    picked.append("value")
    result = joined.select(picked).drop("missing")
    picked.append("big")  # changed after its call: must not reach a replay
    return result


def test_a_replay_gives_what_the_transform_gives_without_calling_it_again(
    spark: SparkSession,
) -> None:
    replayed, calls = counted(branching)
    first = spark.createDataFrame([(1, "5.5"), (2, "20")], SCHEMA)
    second = spark.createDataFrame([(3, "11.25"), (4, "x"), (5, None)], SCHEMA)

    assert_df_equality(replayed(first), branching(first), ignore_row_order=True)
    replay = replayed(second)
    assert calls == [1]
    expected = spark.createDataFrame(
        [(3, True, Decimal("11.25")), (4, False, None), (5, False, None)],
        "id BIGINT, big BOOLEAN, value DECIMAL(10,2)",
    )
    assert_df_equality(replay, expected, ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(replay, branching(second), ignore_row_order=True)


def test_an_input_of_another_schema_is_transformed_afresh(spark: SparkSession) -> None:
    replayed, calls = counted(lambda df: df.select("*", F.lit(1).alias("one")))
    replayed(spark.createDataFrame([(1, "a")], SCHEMA))
    wider = spark.createDataFrame([(2, "b", "extra")], f"{SCHEMA}, note STRING")

    expected = spark.createDataFrame([(2, "b", "extra", 1)], f"{SCHEMA}, note STRING, one INT")
    assert_df_equality(replayed(wider), expected, ignore_nullable=True)
    assert calls == [1, 1]


@pytest.mark.parametrize("call", ["count", "collect", "first", "persist"])
def test_a_transform_that_reads_its_data_is_refused_by_name(spark: SparkSession, call: str) -> None:
    # An answer read from the first batch would be replayed on every other one.
    def reads(df: DataFrame) -> DataFrame:
        getattr(df, call)()
        return df

    with pytest.raises(TypeError, match=rf"DataFrame\.{call} in a replayed transform"):
        Replayed(reads)(spark.createDataFrame([(1, "a")], SCHEMA))


def test_a_transform_must_return_a_dataframe_made_from_its_input(spark: SparkSession) -> None:
    other = spark.createDataFrame([(9, "z")], SCHEMA)
    with pytest.raises(TypeError, match="made from its input"):
        Replayed(lambda _df: other)(spark.createDataFrame([(1, "a")], SCHEMA))
