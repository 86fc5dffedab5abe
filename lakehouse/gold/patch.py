"""Gold's patch path: when every aggregate is a `sum` or a `count` of an exact type (and one is
`count(*)`), a run adds the changed rows' post-images to the touched groups' gold rows and
subtracts their pre-images, instead of recomputing those groups from the source. Its cost then
follows the changes, not the source: the recompute reads every file holding a touched group's
rows, which is nearly the whole table when changes are spread over it.

Still exact: integer and decimal sums and counts do not depend on the order of their terms
(a floating-point sum does, so a `double` sum is recomputed), and the `count(*)` tells a group
that lost its last row (deleted). A sum is NULL over no non-null value: a group whose sum was
NULL knows its count of non-null values (none), one that was not knows it has some left when
the patched sum is not zero; a patched zero after removals could be either, and that group is
recomputed from the source (as is one whose patched count went below zero, which only a gold
table edited by hand could give). Any other aggregate (`max`, `count(DISTINCT ...)`, ...),
or an expectation that keeps groups out of gold (`drop`, `quarantine`: gold lacks the rows to
patch), keeps the recompute path; so does a run over a hybrid view whose boundary moved
(`lakehouse.gold.source.images`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from lakehouse.gold.aggregate import PRESENT, group_columns, same_group

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

    from lakehouse.core.specs import GoldTableSettings

WEIGHT = "_lh_w"  # +1: a post-image (the row is in the group now), -1: a pre-image
AMBIGUOUS = "_lh_ambiguous"  # the patched group must be recomputed
_CALL = re.compile(r"\s*(sum|count)\s*\((.*)\)\s*", re.IGNORECASE | re.DOTALL)
_QUALIFIER = re.compile(r"(distinct|all)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Term:
    name: str  # the gold column
    kind: str  # count | sum
    inner: str  # the SQL inside the call; "*" for count(*)


def terms(gold: GoldTableSettings, empty: DataFrame) -> list[Term] | None:
    """The gold table's aggregates as terms a run can patch (analysed against `empty`, a frame
    of the source's columns), or None when one cannot be patched."""
    if any(e.action in ("drop", "quarantine") for e in gold.expectations):
        return None
    found = [_term(name, sql, empty) for name, sql in gold.aggregates.items()]
    if any(t is None for t in found):
        return None
    patchable = [t for t in found if t is not None]
    if not any(t.kind == "count" and t.inner == "*" for t in patchable):
        return None
    return patchable


def _term(name: str, sql: str, empty: DataFrame) -> Term | None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType, IntegralType

    call = _CALL.fullmatch(sql)
    if call is None:
        return None
    kind, inner = call.group(1).lower(), call.group(2).strip()
    if inner == "*":
        return Term(name, kind, inner) if kind == "count" else None
    if not _one_argument(inner) or _QUALIFIER.match(inner):
        return None
    try:
        value_type = empty.select(F.expr(inner).alias("v")).schema["v"].dataType
    except Exception:  # not one expression over the source: not patchable
        return None
    if kind == "sum" and not isinstance(value_type, IntegralType | DecimalType):
        return None
    return Term(name, kind, inner)


def _one_argument(inner: str) -> bool:
    """Whether `inner` (the text between the outer call's parentheses) keeps its parentheses
    balanced outside quotes: `sum(a) + sum(b)` matches the call pattern with `a) + sum(b`."""
    depth, quote, escaped = 0, "", False
    for char in inner:
        if quote:
            escaped = char == "\\" and not escaped
            if char == quote and not escaped:
                quote = ""
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0 and not quote


def deltas(images: DataFrame, gold: GoldTableSettings, found: list[Term]) -> DataFrame:
    """Per touched group, each term's change: `_lh_d<i>` (the count's, or the sum's over
    non-null values; NULL when none changed) and, for a sum, `_lh_n<i>` (the change in its
    number of non-null values). `images` are source rows with `_lh_w`."""
    from pyspark.sql import functions as F

    weight = F.col(WEIGHT)
    changes: list[Column] = []
    for i, term in enumerate(found):
        if term.kind == "count":
            counted = (
                weight if term.inner == "*" else F.when(F.expr(term.inner).isNotNull(), weight)
            )
            changes.append(F.coalesce(F.sum(counted), F.lit(0)).cast("long").alias(f"_lh_d{i}"))
            continue
        value = F.expr(term.inner)
        changes.append(F.sum(F.when(weight > 0, value).otherwise(-value)).alias(f"_lh_d{i}"))
        present = F.when(value.isNotNull(), weight).otherwise(0)
        changes.append(F.sum(present).cast("long").alias(f"_lh_n{i}"))
    return images.groupBy(*group_columns(gold)).agg(*changes)


def patched(
    changes: DataFrame,
    old: DataFrame,
    gold: GoldTableSettings,
    found: list[Term],
    types: dict[str, DataType],
) -> DataFrame:
    """The touched groups' new gold rows from their old ones (`old`: the gold table; absent:
    a new group) and `changes` (`deltas`), with `_lh_present` (the group has rows) and
    `_lh_ambiguous` (recompute it)."""
    from pyspark.sql import functions as F

    joined = changes.alias("d").join(old.alias("o"), same_group("d", "o", gold), "left")
    columns = [F.col(f"d.`{n}`").alias(n) for n in gold.group_by]
    unsure: list[Column] = []
    rows: Column | None = None
    for i, term in enumerate(found):
        prior, change = F.col(f"o.`{term.name}`"), F.col(f"d._lh_d{i}")
        if term.kind == "count":
            value = F.coalesce(prior, F.lit(0)) + change
            unsure.append(value < 0)
            rows = value if term.inner == "*" else rows
        else:
            values = F.col(f"d._lh_n{i}")
            total = prior + F.coalesce(change, F.lit(0))
            value = F.when(prior.isNull(), F.when(values > 0, change)).otherwise(total)
            unsure.append((values < 0) & (prior.isNull() | (total == 0)))
        columns.append(value.cast(types[term.name]).alias(term.name))
    assert rows is not None  # `terms` requires count(*)
    return joined.select(
        *columns,
        (rows > 0).alias(PRESENT),
        F.coalesce(reduce(lambda a, b: a | b, unsure), F.lit(False)).alias(AMBIGUOUS),
    )
