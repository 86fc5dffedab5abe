"""A silver table remembers the settings its rows were built by (mode, keys, sequence_by,
track_columns, explode): refine refuses to merge under changed ones, naming the change and the
fix, and `--full-refresh` rebuilds it under the new ones."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from lakehouse.core import tables
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings
from tests.silver.helpers import current, events_pipeline, run_refine

SCHEMA = "id BIGINT, line BIGINT, qty BIGINT, ts BIGINT"


def test_changed_keys_are_refused_until_a_full_refresh_rebuilds_the_table(
    spark: SparkSession, kafka_up: Settings
) -> None:
    events: list[object] = [
        {"id": 1, "line": 1, "qty": 5, "ts": 1},
        {"id": 1, "line": 2, "qty": 7, "ts": 2},
    ]
    _, _, name, settings = events_pipeline(
        spark, kafka_up, events, mode="upsert", schema=SCHEMA, keys=("id",), sequence_by="ts"
    )
    run_refine(spark, settings, name)
    assert [tuple(r) for r in current(spark, settings, name).drop("_rescued_data").collect()] == [
        (1, 2, 7, 2)
    ]

    table = replace(settings.silver[name], keys=("id", "line"))
    changed = replace(settings, silver={**settings.silver, name: table})
    with pytest.raises(UsageError) as refused:
        run_refine(spark, changed, name)
    message = str(refused.value)
    assert "keys ['id'] -> ['id', 'line']" in message
    assert f"refine_silver --table {name} --full-refresh" in message
    assert refused.value.exit_code == 2

    run_refine(spark, changed, name, full_refresh=True)
    assert_df_equality(
        current(spark, changed, name).drop("_rescued_data"),
        spark.createDataFrame([(1, 1, 5, 1), (1, 2, 7, 2)], SCHEMA),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    run_refine(spark, changed, name)  # the rebuilt table carries the new contract


def test_a_table_built_before_the_snapshot_column_is_refused_with_the_alter_that_adds_it(
    spark: SparkSession, kafka_up: Settings
) -> None:
    events: list[object] = [{"id": 1, "line": 1, "qty": 5, "ts": 1}]
    _, _, name, settings = events_pipeline(
        spark, kafka_up, events, mode="upsert", schema=SCHEMA, keys=("id",), sequence_by="ts"
    )
    run_refine(spark, settings, name)
    # The table as an older version built it: the same, without `__snapshot`.
    path = settings.storage.path("silver", name)
    built = spark.read.format("delta").load(path)
    older = StructType([f for f in built.schema.fields if f.name != "__snapshot"])
    props = tables.properties(spark, path)
    shutil.rmtree(path)
    tables.create_table(spark, path, older, props)

    with pytest.raises(UsageError) as refused:
        run_refine(spark, settings, name)
    alter = f"ALTER TABLE delta.`{path}` ADD COLUMNS (`__snapshot` boolean)"
    assert str(refused.value).endswith(alter)
    assert refused.value.exit_code == 2
    assert spark.read.format("delta").load(path).count() == 0  # nothing written

    spark.sql(alter)
    run_refine(spark, settings, name)  # not refused any more
    run_refine(spark, settings, name, full_refresh=True)
    assert_df_equality(
        current(spark, settings, name).drop("_rescued_data"),
        spark.createDataFrame([(1, 1, 5, 1)], SCHEMA),
        ignore_nullable=True,
    )
