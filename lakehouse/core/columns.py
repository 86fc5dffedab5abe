"""A column by its whole name. Spark reads a name given to `F.col`, `select`, `partitionBy`
and the like as a path (`order.id` is field `id` of a struct `order`) and cannot take a
backtick unquoted; the names of a user's schema, keys and settings are whole names, so every
reference to one goes through `named` (`join(on=[...])`, `withColumn`, `alias`, `drop` and a
schema's `[name]` take names literally and need nothing)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType, StructType


def quoted(name: str) -> str:
    """`name` quoted for Spark SQL, a backtick in it doubled."""
    return "`" + name.replace("`", "``") + "`"


def type_ddl(dtype: DataType) -> str:
    """`dtype` as Spark SQL DDL with every field name quoted, at any depth: `simpleString`
    leaves nested names bare, and `struct<content-type:string>` does not parse."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(dtype, StructType):
        fields = ", ".join(f"{quoted(f.name)}: {type_ddl(f.dataType)}" for f in dtype.fields)
        return f"struct<{fields}>"
    if isinstance(dtype, ArrayType):
        return f"array<{type_ddl(dtype.elementType)}>"
    if isinstance(dtype, MapType):
        return f"map<{type_ddl(dtype.keyType)}, {type_ddl(dtype.valueType)}>"
    return dtype.simpleString()


def sql_string(text: str) -> str:
    """`text` as a Spark SQL string literal (backslash escapes are on by default, so a
    backslash is doubled as well as the quote)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def named(name: str) -> Column:
    """The column called `name`, whatever it holds."""
    from pyspark.sql import functions as F

    return F.col(quoted(name))


# The prefix of every column the lakehouse adds to a frame of a record's or a table's columns
# while it works on it (a change's `_lh_seq`, a window's `_lh_rank`, ...), never written to a
# table: no record field or table column takes such a name, so none is overwritten or dropped.
WORKING = "_lh_"

# Characters Delta refuses in a column name unless the table maps its columns
# (`delta.columnMapping.mode`, which the lakehouse does not turn on: README, Silver), and the
# backtick, which SQL the lakehouse writes (MERGE conditions, selects) does not escape yet.
_UNNAMEABLE = " ,;{}()\n\t=`"


def unnameable(column: str) -> list[str]:
    """The characters of `column` a lakehouse table cannot name a column with."""
    return sorted({c for c in column if c in _UNNAMEABLE})


def _structs(dtype: DataType, prefix: str = "") -> Iterator[tuple[str, StructType]]:
    """Every struct in `dtype` (structs in arrays and maps too), each with the dotted path
    its fields' names follow."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(dtype, ArrayType):
        yield from _structs(dtype.elementType, prefix)
    elif isinstance(dtype, MapType):
        yield from _structs(dtype.keyType, prefix)
        yield from _structs(dtype.valueType, prefix)
    elif isinstance(dtype, StructType):
        yield prefix, dtype
        for f in dtype.fields:
            yield from _structs(f.dataType, f"{prefix}{f.name}.")


def unnameable_fields(dtype: DataType) -> list[str]:
    """The field names, at any depth of `dtype` (structs in arrays and maps too), that a
    lakehouse table cannot hold, each as its dotted path: an empty one too (JSON allows it)."""
    return [
        f"{p}{f.name}"
        for p, s in _structs(dtype)
        for f in s.fields
        if not f.name or unnameable(f.name)
    ]


def case_colliding_fields(dtype: DataType) -> list[str]:
    """The field names, at any depth of `dtype`, equal to a sibling's but for case, each as
    its dotted path (`case_collisions`)."""
    return [f"{p}{n}" for p, s in _structs(dtype) for n in case_collisions(s.names)]


def case_collisions(names: Sequence[str], taken: Iterable[str] = ()) -> list[str]:
    """The `names` that cannot be columns beside `taken` and each other: Spark and Delta tell
    column names apart without case (`ID` and `id` are one column, and both of two such new
    names collide: neither is the right one to keep)."""
    counts = Counter(n.lower() for n in names)
    used = {t.lower() for t in taken}
    return [n for n in names if counts[n.lower()] > 1 or n.lower() in used]
