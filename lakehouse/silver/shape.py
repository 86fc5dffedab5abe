"""The columns a record becomes: declared arrays exploded into one row per element (with its
position), then nested structs flattened into `parent_child` columns. Pure DataFrame ->
DataFrame functions, and the names they make, which `plan` and `batch` check before a table
is given such columns."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from lakehouse.core.columns import named
from lakehouse.core.errors import UsageError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructField


def explode_arrays(df: DataFrame, columns: Sequence[str]) -> DataFrame:
    """One row per element of each declared array column, with its position as `<col>_pos`
    (so a line's key can be the parent key plus the position). A record whose array is empty
    or null keeps one row with a null element rather than vanishing (a record is never
    dropped silently; an expectation on the element decides what happens to it)."""
    from pyspark.sql import functions as F

    for name in columns:
        if name not in df.columns:
            raise UsageError(f"explode: {name!r} is not a column of the schema")
        others = [c for c in df.columns if c != name]
        df = df.select(
            *[named(c) for c in others],
            F.posexplode_outer(named(name)).alias(position_column(name), name),
        )
    return df


def position_column(array: str) -> str:
    """The column holding an exploded element's position in its `array`."""
    return f"{array}_pos"


def flatten(df: DataFrame, keep: Sequence[str] = ()) -> DataFrame:
    """Nested structs become top-level columns named `parent_child` (recursively); columns
    in `keep` are left alone."""
    from functools import reduce

    selected: list[Column] = []
    for f in df.schema.fields:
        if f.name in keep:
            selected.append(named(f.name))
            continue
        for column, path in _leaves(f.name, f.dataType):
            selected.append(reduce(lambda c, p: c[p], path, named(f.name)).alias(column))
    return df.select(*selected)


def flat_names(field: StructField) -> list[str]:
    """The columns `flatten` makes of `field`."""
    return [column for column, _ in _leaves(field.name, field.dataType)]


def _leaves(name: str, kind: DataType) -> Iterator[tuple[str, list[str]]]:
    """Each column `flatten` makes of a field `name` of type `kind`: its name and the path of
    field names to it."""
    from pyspark.sql.types import StructType

    if not isinstance(kind, StructType):
        yield name, []
        return
    for f in kind.fields:
        for column, path in _leaves(f"{name}_{f.name}", f.dataType):
            yield column, [f.name, *path]
