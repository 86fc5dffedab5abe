"""A `DataFrame -> DataFrame` transform built once and applied to every input of one schema.

A micro-batch's parse is a pure function of its input's schema: every batch builds the same
several hundred Columns, each a few Py4J round trips (0.16 s of a 50-row refine batch,
bench/README.md). `Replayed` runs the transform on its first input while recording the
DataFrame calls it makes, and makes the same calls, with the same Column objects, on each
later input of the same schema: Spark analyses the result as it would the transform's own.

While recording, the transform may only build DataFrames from Columns and names (`RECORDED`)
and read the schema (`READABLE`): an action, or anything else whose answer could differ from
one batch to the next, fails loudly instead of being replayed with the first batch's answer.
A Column bound to a DataFrame (`df["x"]`) is not offered either: it would name the first
batch's plan.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

# DataFrame methods that return a new DataFrame built from Columns, names and other
# DataFrames of the same recording.
RECORDED = frozenset(
    {
        "alias",
        "drop",
        "filter",
        "join",
        "select",
        "selectExpr",
        "union",
        "unionByName",
        "where",
        "withColumn",
        "withColumnRenamed",
        "withColumns",
    }
)
READABLE = frozenset({"columns", "dtypes", "schema"})  # the same for every input of a schema


class _Recorded:
    """A DataFrame of a recording: the real one (the first input's), and how it was made from
    the input: `call` (method, args, kwargs) on `parent`, or nothing for the input itself."""

    def __init__(
        self,
        df: DataFrame,
        parent: _Recorded | None = None,
        call: tuple[str, tuple[Any, ...], dict[str, Any]] | None = None,
    ) -> None:
        self.df, self.parent, self.call = df, parent, call

    def __getattr__(self, name: str) -> Any:
        if name in READABLE:
            return getattr(self.df, name)
        if name not in RECORDED:
            raise TypeError(
                f"DataFrame.{name} in a replayed transform: only {sorted(RECORDED)} and "
                f"{sorted(READABLE)} give the same answer for every input of one schema"
            )
        method = getattr(self.df, name)

        def recorded(*args: Any, **kwargs: Any) -> _Recorded:
            real = method(*_unwrapped(args), **{k: _unwrap(v) for k, v in kwargs.items()})
            # Kept as they are now: a list the transform changes later must not change a replay.
            kept = tuple(map(_kept, args)), {k: _kept(v) for k, v in kwargs.items()}
            return _Recorded(real, self, (name, *kept))

        return recorded


def _unwrap(value: Any) -> Any:
    return value.df if isinstance(value, _Recorded) else value


def _unwrapped(args: tuple[Any, ...]) -> list[Any]:
    return [_unwrap(a) for a in args]


def _kept(value: Any) -> Any:
    return copy.copy(value) if isinstance(value, list | dict) else value


def _replay(node: _Recorded, source: DataFrame, done: dict[int, DataFrame]) -> DataFrame:
    """`node` made from `source` instead of the recorded input (`done`: by node, those made
    already, so a DataFrame read twice is made once)."""
    if id(node) in done:
        return done[id(node)]
    if node.parent is None or node.call is None:
        return source
    name, args, kwargs = node.call
    parent = _replay(node.parent, source, done)

    def again(value: Any) -> Any:
        return _replay(value, source, done) if isinstance(value, _Recorded) else value

    made = cast(
        "DataFrame",
        getattr(parent, name)(*map(again, args), **{k: again(v) for k, v in kwargs.items()}),
    )
    done[id(node)] = made
    return made


class Replayed:
    """`transform`, recorded on its first input and replayed on later ones of that schema
    (an input of another schema is recorded afresh)."""

    def __init__(self, transform: Callable[[DataFrame], DataFrame]) -> None:
        self._transform = transform
        self._schema: StructType | None = None
        self._result: _Recorded | None = None

    def __call__(self, source: DataFrame) -> DataFrame:
        schema = source.schema
        if self._result is not None and schema == self._schema:
            return _replay(self._result, source, {})
        result = self._transform(cast("DataFrame", _Recorded(source)))
        if not isinstance(result, _Recorded):  # made by calls that were not recorded
            raise TypeError("a replayed transform must return a DataFrame made from its input")
        self._schema, self._result = schema, result
        return result.df
