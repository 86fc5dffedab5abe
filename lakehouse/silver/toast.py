"""Debezium's unchanged-TOAST placeholder: PostgreSQL does not log a large (TOASTed) value that
an UPDATE left unchanged, so Debezium sends `__debezium_unavailable_value` in its place. Silver
takes the key's previous value instead (earlier in the batch, else silver's live row)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING

from lakehouse.silver.changes import OP, SEQ, UPSERT_OPS
from lakehouse.silver.transform import RESCUED, TRANSIENT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

TOAST_PLACEHOLDER = "__debezium_unavailable_value"  # Debezium: unchanged TOASTed value


def toast_columns(changes: DataFrame, keys: Sequence[str]) -> list[str]:
    """The row's string columns that are not keys: where Debezium may send its unchanged-TOAST
    placeholder (PostgreSQL text, varchar and json(b) arrive as strings)."""
    from pyspark.sql.types import StringType

    return [
        f.name
        for f in changes.schema.fields
        if isinstance(f.dataType, StringType)
        and f.name not in (*TRANSIENT, *keys, RESCUED, OP)
        and not f.name.startswith("__")
    ]


def carries_toast_placeholder(columns: Sequence[str]) -> Column:
    from pyspark.sql import functions as F

    return reduce(
        lambda a, b: a | b,
        [F.col(f"`{c}`").eqNullSafe(F.lit(TOAST_PLACEHOLDER)) for c in columns],
        F.lit(False),
    )


def resolve_unchanged_toast(
    changes: DataFrame, current: DataFrame, keys: Sequence[str], columns: Sequence[str]
) -> DataFrame:
    """Replace Debezium's unchanged-TOAST placeholder in `columns` by the value the key had
    just before the change: the latest earlier upsert of the batch (in `_seq` order) that
    carried a real value, else the key's row in `current` (silver's live row). A placeholder
    with nothing to resolve it from stays as it is (visible, never silently nulled)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    base_flag, keyed = "_lh_base", [F.col(f"`{k}`") for k in keys]
    batch_keys = changes.select(*keyed).distinct()
    base = (
        current.join(batch_keys, list(keys), "left_semi")
        .select(*keyed, *[F.col(f"`{c}`") for c in columns])
        .withColumn(base_flag, F.lit(True))
    )
    both = changes.withColumn(base_flag, F.lit(False)).unionByName(base, allowMissingColumns=True)
    earlier = (
        Window.partitionBy(*keyed)
        .orderBy(F.col(base_flag).desc(), F.col(SEQ).asc_nulls_last())
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    is_value = F.col(base_flag) | F.col(OP).isin(*UPSERT_OPS)
    resolved = []
    for name in columns:
        column = F.col(f"`{name}`")
        placeholder = column.eqNullSafe(F.lit(TOAST_PLACEHOLDER))
        known = F.last(
            F.when(is_value & ~placeholder, F.struct(column.alias("v"))), ignorenulls=True
        ).over(earlier)
        resolved.append(
            F.when(placeholder & known.isNotNull(), known.getField("v"))
            .otherwise(column)
            .alias(name)
        )
    others = [F.col(f"`{c}`") for c in changes.columns if c not in columns]
    return (
        both.select(*others, *resolved, F.col(base_flag))
        .where(~F.col(base_flag))
        .select(*[F.col(f"`{c}`") for c in changes.columns])
    )
