"""A column by its whole name. Spark reads a name given to `F.col`, `select`, `partitionBy`
and the like as a path (`order.id` is field `id` of a struct `order`) and cannot take a
backtick unquoted; the names of a user's schema, keys and settings are whole names, so every
reference to one goes through `named` (`join(on=[...])`, `withColumn`, `alias`, `drop` and a
schema's `[name]` take names literally and need nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType


def quoted(name: str) -> str:
    """`name` quoted for Spark SQL, a backtick in it doubled."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """`text` as a Spark SQL string literal (backslash escapes are on by default, so a
    backslash is doubled as well as the quote)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def named(name: str) -> Column:
    """The column called `name`, whatever it holds."""
    from pyspark.sql import functions as F

    return F.col(quoted(name))


# Characters Delta refuses in a column name unless the table maps its columns
# (`delta.columnMapping.mode`, which the lakehouse does not turn on: README, Silver), and the
# backtick, which SQL the lakehouse writes (MERGE conditions, selects) does not escape yet.
_UNNAMEABLE = " ,;{}()\n\t=`"


def unnameable(column: str) -> list[str]:
    """The characters of `column` a lakehouse table cannot name a column with."""
    return sorted({c for c in column if c in _UNNAMEABLE})


def unnameable_fields(dtype: DataType, prefix: str = "") -> list[str]:
    """The field names, at any depth of `dtype` (structs in arrays and maps too), that a
    lakehouse table cannot hold, each as its dotted path."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(dtype, ArrayType):
        return unnameable_fields(dtype.elementType, prefix)
    if isinstance(dtype, MapType):
        return unnameable_fields(dtype.keyType, prefix) + unnameable_fields(dtype.valueType, prefix)
    if not isinstance(dtype, StructType):
        return []
    found = []
    for f in dtype.fields:
        path = f"{prefix}{f.name}"
        found += [path] if unnameable(f.name) else []
        found += unnameable_fields(f.dataType, f"{path}.")
    return found
