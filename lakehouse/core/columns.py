"""A column by its whole name. Spark reads a name given to `F.col`, `select`, `partitionBy`
and the like as a path (`order.id` is field `id` of a struct `order`) and cannot take a
backtick unquoted; the names of a user's schema, keys and settings are whole names, so every
reference to one goes through `named` (`join(on=[...])`, `withColumn`, `alias`, `drop` and a
schema's `[name]` take names literally and need nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def quoted(name: str) -> str:
    """`name` quoted for Spark SQL, a backtick in it doubled."""
    return "`" + name.replace("`", "``") + "`"


def named(name: str) -> Column:
    """The column called `name`, whatever it holds."""
    from pyspark.sql import functions as F

    return F.col(quoted(name))


# Characters Delta refuses in a column name unless the table maps its columns
# (`delta.columnMapping.mode`, which the lakehouse does not turn on: README, Silver).
_UNNAMEABLE = " ,;{}()\n\t="


def unnameable(column: str) -> list[str]:
    """The characters of `column` a Delta table cannot name a column with."""
    return sorted({c for c in column if c in _UNNAMEABLE})
