"""What a reader of a keyed table sees: its current rows. Defined once, used by silver, gold,
the offline layer, validation, status, the demo and the tests.

Keyed silver tables keep bookkeeping columns, all named `__*`:
- upsert / SCD1: one row per key with its position `__seq`; a delete leaves a tombstone
  (`__deleted`, since `__deleted_at`) so a late, older change cannot resurrect the key;
  `__snapshot`: the row is a snapshot read that no change of its key has followed yet;
- SCD2: one row per version of a key, `[__start_seq, __end_seq)` and `[__start_at, __end_at)`;
  the current version has `__end_seq IS NULL`; `__seq` is the last change folded into it,
  `__snapshot`: it is current and that change is a snapshot read.
Append tables have none: every row is current.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

BOOKKEEPING = "__"  # the prefix of every bookkeeping column
TARGET_SEQ, DELETED, DELETED_AT = "__seq", "__deleted", "__deleted_at"
# A change arriving after a snapshot read of its key replaces it whatever its position:
# `lakehouse.silver.changes.snapshot_position`.
SNAPSHOT = "__snapshot"
START_SEQ, END_SEQ, START_AT, END_AT = "__start_seq", "__end_seq", "__start_at", "__end_at"


def live_column(mode: str) -> str | None:
    """The bookkeeping column a silver table of `mode` keeps to tell current rows (append: none)."""
    return {"upsert": DELETED, "scd1": DELETED, "scd2": END_SEQ}.get(mode)


def live_condition(columns: list[str]) -> str | None:
    """The SQL condition selecting current rows of a table with these columns (None: every
    row is current)."""
    if DELETED in columns:
        return f"NOT {DELETED}"
    if END_SEQ in columns:
        return f"{END_SEQ} IS NULL"
    return None


def live_rows(table: DataFrame) -> DataFrame:
    """The table's current rows, bookkeeping columns kept."""
    condition = live_condition(table.columns)
    return table if condition is None else table.where(condition)


def current_rows(table: DataFrame) -> DataFrame:
    """The table's current rows as a reader sees them: no tombstones, no closed versions,
    no bookkeeping columns."""
    live = live_rows(table)
    return live.drop(*[c for c in live.columns if c.startswith(BOOKKEEPING)])


def is_bookkeeping(column: str) -> bool:
    return column.startswith(BOOKKEEPING)
