"""Gold's pure transforms: a gold table's groups and aggregates as Spark expressions, the rows
of some groups, and the MERGE source that sets those groups to their recomputed values.

A gold table is `SELECT <group_by>, <aggregates> FROM source GROUP BY <group_by>`. An
incremental run recomputes the groups a change touched from the source's current rows (unless
`lakehouse.gold.patch` can patch them): so any aggregate Spark SQL can compute stays exact
(sum, count, min, max, count(DISTINCT ...), percentile_approx, ...), and a group whose rows
are all gone is deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial, reduce
from typing import TYPE_CHECKING

from lakehouse.core.columns import named
from lakehouse.core.settings import SettingsError
from lakehouse.core.spark import analysis_error
from lakehouse.core.specs import GoldTableSettings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

PRESENT = "_lh_present"  # in the MERGE source: the group still has rows (else it is deleted)


def group_columns(gold: GoldTableSettings) -> list[Column]:
    from pyspark.sql import functions as F

    return [F.expr(sql).alias(name) for name, sql in gold.group_by.items()]


def aggregate_columns(gold: GoldTableSettings) -> list[Column]:
    from pyspark.sql import functions as F

    return [F.expr(sql).alias(name) for name, sql in gold.aggregates.items()]


def aggregate(rows: DataFrame, gold: GoldTableSettings) -> DataFrame:
    """The gold rows of `rows`: one per group."""
    return rows.groupBy(*group_columns(gold)).agg(*aggregate_columns(gold))


def group_keys(frames: Sequence[DataFrame], gold: GoldTableSettings) -> DataFrame:
    """The distinct groups the rows of `frames` belong to."""
    keyed = [frame.select(*group_columns(gold)) for frame in frames]
    return reduce(lambda a, b: a.unionByName(b), keyed).distinct()


def same_group(left: str, right: str, gold: GoldTableSettings) -> Column:
    from pyspark.sql import functions as F

    tests = [F.col(f"{left}.`{n}`").eqNullSafe(F.col(f"{right}.`{n}`")) for n in gold.group_by]
    return reduce(lambda a, b: a & b, tests)


def in_groups(rows: DataFrame, keys: DataFrame, gold: GoldTableSettings) -> DataFrame:
    """The rows of `rows` whose group is in `keys` (null group values match nulls). The keys
    are few and broadcast."""
    from pyspark.sql import functions as F

    grouped = rows.select(
        "*",
        *[c.alias(f"_lh_g_{n}") for c, n in zip(group_columns(gold), gold.group_by, strict=True)],
    )
    renamed = keys.select(*[named(n).alias(f"_lh_g_{n}") for n in gold.group_by])
    on = reduce(
        lambda a, b: a & b,
        [grouped[f"_lh_g_{n}"].eqNullSafe(renamed[f"_lh_g_{n}"]) for n in gold.group_by],
    )
    kept = grouped.join(F.broadcast(renamed), on, "left_semi")
    return kept.drop(*[f"_lh_g_{n}" for n in gold.group_by])


def merge_source(keys: DataFrame, recomputed: DataFrame, gold: GoldTableSettings) -> DataFrame:
    """One row per touched group: its recomputed values and `_lh_present`, or only its key with
    `_lh_present` false when the group has no rows any more (the MERGE deletes it)."""
    from pyspark.sql import functions as F

    values = recomputed.withColumn(PRESENT, F.lit(True)).alias("r")
    joined = keys.alias("k").join(values, same_group("k", "r", gold), "left")
    return joined.select(
        *[F.col(f"k.`{n}`").alias(n) for n in gold.group_by],
        *[F.col(f"r.`{n}`").alias(n) for n in gold.aggregates],
        F.coalesce(F.col(f"r.{PRESENT}"), F.lit(False)).alias(PRESENT),
    )


def merge_condition(gold: GoldTableSettings) -> str:
    return " AND ".join(f"t.`{n}` <=> s.`{n}`" for n in gold.group_by)


def check_sql(empty: DataFrame, gold: GoldTableSettings, name: str) -> None:
    """Every expression of the gold table analyses against the source's columns (an empty
    frame of its schema), each checked alone so the error names its key."""
    from pyspark.sql import functions as F

    groups = group_columns(gold)
    checks: list[tuple[str, Callable[[], DataFrame]]] = [
        (f"group_by.{n}", partial(empty.select, c))
        for n, c in zip(gold.group_by, groups, strict=True)
    ]
    checks += [
        (f"aggregates.{n}", partial(empty.groupBy(*groups).agg, F.expr(sql).alias(n)))
        for n, sql in gold.aggregates.items()
    ]
    for key, check in checks:
        reason = analysis_error(check)
        if reason is not None:
            raise SettingsError(
                f"conf/*/gold.yml: 'gold.{name}.{key}' is not valid against "
                f"{gold.source}'s columns ({', '.join(empty.columns)}): {reason}"
            )
