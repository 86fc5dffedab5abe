"""Debezium's unchanged-TOAST placeholder: PostgreSQL does not log a large (TOASTed) value that
an UPDATE left unchanged, so Debezium sends a placeholder in its place, shaped by the column's
type: `__debezium_unavailable_value` for text, its bytes for bytea, a map of it to itself for
an hstore, and so on (`_placeholders` lists every shape). Silver takes
the key's previous value instead: earlier in the batch, else silver's live row. A primary-key
update reaches Kafka as a delete of the old key plus a create of the new one at the same
position, the create carrying placeholders: those take the old key's value. A placeholder with
no value to take (its old key's history is in another batch) makes the change unusable; it is
quarantined as `unresolved_toast: <columns>`, never stored."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING

from lakehouse.core.columns import named
from lakehouse.core.connector_specs import TOAST_PLACEHOLDER
from lakehouse.core.current import TARGET_SEQ, is_bookkeeping
from lakehouse.silver.changes import DELETE, OP, SEQ, UPSERT_OPS
from lakehouse.silver.transform import ERROR, OFFSET, PARTITION, RESCUED, TOPIC, TRANSIENT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

_BASE, _LOOKUP, _OLD = "_lh_base", "_lh_lookup", "_lh_old_key"


# An hstore in `hstore.handling.mode: json` is a string column: its placeholder is the JSON
# of the map Debezium sends in `map` mode, as Jackson writes it (compact).
_HSTORE_JSON = json.dumps({TOAST_PLACEHOLDER: TOAST_PLACEHOLDER}, separators=(",", ":"))


def _name_uuid(data: bytes) -> str:
    """Java's `UUID.nameUUIDFromBytes`: an MD5 (version 3) UUID of `data`, no namespace."""
    digest = bytearray(hashlib.md5(data, usedforsecurity=False).digest())
    digest[6] = digest[6] & 0x0F | 0x30
    digest[8] = digest[8] & 0x3F | 0x80
    return str(uuid.UUID(bytes=bytes(digest)))


# Debezium sends a uuid[]'s placeholder as a one-element array of this UUID.
_UUID_PLACEHOLDER = _name_uuid(TOAST_PLACEHOLDER.encode())


def _placeholders(dtype: DataType) -> list[Column]:
    """Every shape Debezium gives its placeholder in a column read as `dtype` (its
    UnchangedToastedPlaceholder): the text for text, varchar, json(b), xml and an hstore's
    JSON; the bytes for bytea (their base64 text in a STRING column); a one-element array of
    the text for text[] (or of a UUID for uuid[]), of the bytes for bytea[] (of their base64
    text in an ARRAY<STRING>); the bytes' codes for integer[], bigint[] and date[] (read as
    integers, floating point numbers or wide enough decimals, as epoch days, or as text in an
    ARRAY<STRING>). A MAP (an hstore in `map` mode) is matched by `is_placeholder` itself.
    Debezium sends NULL instead for other types it cannot shape it in (numeric[], timestamp[],
    ...): see README."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DateType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegralType,
        StringType,
    )

    codes = TOAST_PLACEHOLDER.encode()
    binary = F.lit(bytearray(codes))
    base64_text = F.lit(base64.b64encode(codes).decode())
    if isinstance(dtype, StringType):
        return [F.lit(TOAST_PLACEHOLDER), F.lit(_HSTORE_JSON), base64_text]
    if isinstance(dtype, BinaryType):
        return [binary]
    if not isinstance(dtype, ArrayType):
        return []
    element = dtype.elementType
    if isinstance(element, StringType):
        return [
            F.array(F.lit(TOAST_PLACEHOLDER)),
            F.array(F.lit(_UUID_PLACEHOLDER)),
            F.array(base64_text),
            F.array(*[F.lit(str(b)) for b in codes]),
        ]
    if isinstance(element, BinaryType):
        return [F.array(binary)]
    # An int[] may be declared ARRAY<DOUBLE> or ARRAY<DECIMAL>. A DECIMAL too narrow for the
    # codes (up to 118: three integer digits) cannot hold them: there they fail to decode and
    # the change is quarantined, as under `precise`, whose decimal leaves refuse JSON numbers.
    if isinstance(element, IntegralType | FloatType | DoubleType) or (
        isinstance(element, DecimalType) and element.precision - element.scale >= 3
    ):
        return [F.array(*[F.lit(b).cast(element) for b in codes])]
    if isinstance(element, DateType):
        return [F.array(*[F.date_from_unix_date(F.lit(b)) for b in codes])]
    return []


def _hstore_map(dtype: DataType) -> bool:
    from pyspark.sql.types import MapType, StringType

    return (
        isinstance(dtype, MapType)
        and isinstance(dtype.keyType, StringType)
        and isinstance(dtype.valueType, StringType)
    )


def takes_placeholder(dtype: DataType) -> bool:
    """Whether Debezium may send its placeholder in a column read as `dtype`."""
    return _hstore_map(dtype) or bool(_placeholders(dtype))


def is_placeholder(value: Column, dtype: DataType) -> Column:
    """True where `value` (of `dtype`) is Debezium's placeholder, false elsewhere (NULL too)."""
    from pyspark.sql import functions as F

    assert takes_placeholder(dtype), f"{dtype.simpleString()}: Debezium sends no placeholder"
    if _hstore_map(dtype):
        # {placeholder: placeholder}; maps cannot be compared, their keys and values can.
        one = F.array(F.lit(TOAST_PLACEHOLDER))
        match = (F.map_keys(value) == one) & (F.map_values(value) == one)
        return F.coalesce(match, F.lit(False))
    return reduce(lambda a, b: a | b, [value.eqNullSafe(p) for p in _placeholders(dtype)])


def toast_columns(changes: DataFrame, keys: Sequence[str]) -> list[str]:
    """The row's non-key columns where Debezium may send its placeholder."""
    return [
        f.name
        for f in changes.schema.fields
        if takes_placeholder(f.dataType)
        and f.name not in (*TRANSIENT, *keys, RESCUED, OP)
        and not is_bookkeeping(f.name)
    ]


def _is_placeholder(changes: DataFrame, name: str) -> Column:

    return is_placeholder(named(name), changes.schema[name].dataType)


def carries_toast_placeholder(changes: DataFrame, columns: Sequence[str]) -> Column:
    from pyspark.sql import functions as F

    return reduce(lambda a, b: a | b, [_is_placeholder(changes, c) for c in columns], F.lit(False))


def with_old_keys(changes: DataFrame, keys: Sequence[str], columns: Sequence[str]) -> DataFrame:
    """`_lh_old_key`: for the create half of a primary-key update (an upsert at the position
    of a delete of exactly one other key), that key; else null."""
    from pyspark.sql import functions as F

    key = F.struct(*[named(k) for k in keys])
    deletes = (
        changes.where((F.col(OP) == DELETE) & F.col(ERROR).isNull())
        .groupBy(F.col(SEQ).alias("_lh_del_seq"))
        .agg(F.count_distinct(key).alias("_lh_n"), F.first(key).alias("_lh_del_key"))
        .where("_lh_n = 1")
    )
    # Only the positions of upserts that carry a placeholder can matter.
    wanted = changes.where(carries_toast_placeholder(changes, columns))
    deletes = deletes.join(
        wanted.select(F.col(SEQ).alias("_lh_del_seq")).distinct(), "_lh_del_seq", "left_semi"
    )
    joined = changes.join(deletes, F.col(SEQ) == F.col("_lh_del_seq"), "left")
    old = F.when(
        F.col(OP).isin(*UPSERT_OPS) & ~F.col("_lh_del_key").eqNullSafe(key), F.col("_lh_del_key")
    )
    return joined.select(*[named(c) for c in changes.columns], old.alias(_OLD))


def resolve_unchanged_toast(
    changes: DataFrame,
    current: DataFrame,
    keys: Sequence[str],
    columns: Sequence[str],
    rounds: int = 2,
) -> DataFrame:
    """Replace the placeholder in `columns` by the value the key had just before the change:
    the latest earlier upsert of the batch (in `_lh_seq` order, not across a delete of the key)
    that carried a real value, else the key's row in `current` (silver's live rows) when it is
    older than the change; for the create of a primary-key update, the old key's value. Each
    round lets a resolved value feed the next link of a chain of key updates. A placeholder
    left sets `_lh_error` (quarantine)."""
    from pyspark.sql import functions as F

    changes = with_old_keys(changes, keys, columns)
    own = F.struct(*[named(k) for k in keys])
    changes = changes.withColumn(_LOOKUP, F.coalesce(F.col(_OLD), own))
    wanted = changes.select(F.col(_LOOKUP)).union(changes.select(own.alias(_LOOKUP)))
    base = (
        current.select(
            own.alias(_LOOKUP),
            *[named(c) for c in columns],
            F.col(TARGET_SEQ).alias(SEQ),
        )
        .join(wanted.distinct(), _LOOKUP, "left_semi")
        .withColumn(OP, F.lit("u"))
    )
    for _ in range(rounds):
        # Each round reads the one before several times: materialized, the plan stays flat.
        changes = _fill(changes, base, keys, columns).localCheckpoint()
    left = [F.when(_is_placeholder(changes, c), F.lit(c)) for c in columns]
    unresolved = F.array_compact(F.array(*left))
    error = F.coalesce(
        F.col(ERROR),
        F.when(
            F.size(unresolved) > 0,
            F.concat(F.lit("unresolved_toast: "), F.array_join(unresolved, ", ")),
        ),
    )
    return changes.withColumn(ERROR, error).select(
        *[named(c) for c in changes.columns if c not in (_OLD, _LOOKUP)]
    )


def _fill(
    changes: DataFrame, base: DataFrame, keys: Sequence[str], columns: Sequence[str]
) -> DataFrame:
    """One round. Every usable change (and silver's row, at its position) provides its values
    under its own key; every change with a placeholder asks under `_lh_lookup` (its own key,
    or the old key of a key update). A placeholder takes the last real value provided before
    it in `_lh_seq` order since the key's last delete; at one position, asking comes before a
    delete (a key update's create asks the old key its value at the delete)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    own = F.struct(*[named(k) for k in keys])
    usable = F.col(ERROR).isNull() & F.col(OP).isin(*UPSERT_OPS, DELETE)
    asking = carries_toast_placeholder(changes, columns)
    providers = (
        changes.where(usable)
        .select(own.alias("_lh_part"), SEQ, OP, *[named(c) for c in columns])
        .withColumn("_lh_role", F.lit(1))
        .unionByName(
            base.select(
                F.col(_LOOKUP).alias("_lh_part"), SEQ, OP, *[named(c) for c in columns]
            ).withColumn("_lh_role", F.lit(1))
        )
    )
    # A change is one bronze record: its lineage names it.
    ids = changes.withColumn("_lh_id", F.struct(TOPIC, PARTITION, OFFSET))
    askers = ids.where(asking).select(
        F.col(_LOOKUP).alias("_lh_part"),
        SEQ,
        F.lit("?").alias(OP),
        *[named(c) for c in columns],
        F.lit(0).alias("_lh_role"),
        "_lh_id",
    )
    both = askers.unionByName(providers, allowMissingColumns=True)
    is_delete = (F.col("_lh_role") == 1) & (F.col(OP) == DELETE)
    order = [F.col(SEQ).asc_nulls_last(), is_delete.cast("int").asc(), F.col("_lh_role").asc()]
    running = Window.partitionBy("_lh_part").orderBy(*order)
    segmented = both.withColumn(
        "_lh_segment",
        F.sum(is_delete.cast("int")).over(
            running.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        ),
    )
    earlier = (
        Window.partitionBy("_lh_part", "_lh_segment")
        .orderBy(*order)
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    giving = (F.col("_lh_role") == 1) & F.col(OP).isin(*UPSERT_OPS)
    filled = []
    for name in columns:
        column = named(name)
        real = giving & ~_is_placeholder(changes, name)
        known = F.last(F.when(real, F.struct(column.alias("v"))), ignorenulls=True).over(earlier)
        filled.append(F.when(_is_placeholder(changes, name), known).alias(f"_lh_fill_{name}"))
    # The windows see every row; only the askers' answers go back to their changes.
    answers = (
        segmented.select("_lh_role", "_lh_id", *filled)
        .where(F.col("_lh_role") == 0)
        .drop("_lh_role")
    )
    merged = ids.join(answers, "_lh_id", "left")
    return merged.select(
        *[
            F.when(named(f"_lh_fill_{c}").isNotNull(), named(f"_lh_fill_{c}").getField("v"))
            .otherwise(named(c))
            .alias(c)
            if c in columns
            else named(c)
            for c in changes.columns
        ]
    )
