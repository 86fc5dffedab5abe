"""Characters real feeds put in names that SQL gives a meaning: a backslash (Windows paths,
regular expressions as keys), a quote, and a dash or a colon in a nested name (HTTP headers'
`content-type`). Every one is an ordinary character of a column's name, declared or evolved.
(Column names with a dot or a space: `test_names.py`.)"""

from __future__ import annotations

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from tests.bronze.helpers import run_ingest
from tests.silver.helpers import events_pipeline, produce, run_refine, silver_table, with_silver


def test_evolved_fields_named_with_a_backslash_a_quote_or_a_dash_become_columns_so_named(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Windows paths, regular expressions and prose name fields too (`C:\\tmp`, `a\\d`,
    `it's`). Evolve keeps the added fields' DDL in a table property, written as a SQL string
    where a backslash starts an escape: the stored names lost theirs (`a\\d` became `ad`,
    `C:\\tmp` a tab), the batch failed on Delta's schema mismatch, and so did every batch
    after it. A quote kept its field in `_rescued_data`. Nested names (HTTP headers'
    `content-type`, `x:y`, in a struct and in an array's structs) were stored unquoted, which
    no DDL parser reads back: the batch failed on a ParseException, and every batch after it."""
    nested = {"meta": {"content-type": "a", "x:y": 1}, "lines": [{"sku-id": 7}]}
    first = {"id": 1, "C:\\tmp": "x", "a\\d": 1, "it's": True, **nested}
    source, topic, _, settings = events_pipeline(
        spark, kafka_up, [first], mode="append", schema="id INT"
    )
    name, settings = with_silver(
        settings, source, mode="append", schema="id INT", schema_drift="evolve"
    )
    run_refine(spark, settings, name)
    nested = {"meta": {"content-type": "b", "x:y": 2}, "lines": [{"sku-id": 8}]}
    produce(settings, topic, [{"id": 2, "C:\\tmp": "y", "a\\d": 2, "it's": False, **nested}])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)
    expected = spark.createDataFrame(
        [(1, None, "x", 1, True, "a", 1, [(7,)]), (2, None, "y", 2, False, "b", 2, [(8,)])],
        "id INT, _rescued_data STRING, `C:\\tmp` STRING, `a\\d` BIGINT, `it's` BOOLEAN, "
        "`meta_content-type` STRING, `meta_x:y` BIGINT, lines ARRAY<STRUCT<`sku-id`: BIGINT>>",
    )
    columns = ["id", "_rescued_data", "`C:\\tmp`", "`a\\d`", "`it's`"]
    columns += ["`meta_content-type`", "`meta_x:y`", "lines"]
    actual = silver_table(spark, settings, name).select(*columns)
    assert_df_equality(actual.orderBy("id"), expected, ignore_nullable=True)

    # Declared: keyed by `it's`, ordered by `a\d` (the MERGE's SQL names both).
    declared_schema = (
        "id INT, `C:\\tmp` STRING, `a\\d` BIGINT, `it's` BOOLEAN, "
        "meta STRUCT<`content-type`: STRING, `x:y`: BIGINT>, lines ARRAY<STRUCT<`sku-id`: BIGINT>>"
    )
    name, settings = with_silver(
        settings, source, mode="upsert", keys=("it's",), sequence_by="a\\d", schema=declared_schema
    )
    run_refine(spark, settings, name)
    actual = silver_table(spark, settings, name).select(*columns)
    assert_df_equality(actual.orderBy("id"), expected, ignore_nullable=True)
