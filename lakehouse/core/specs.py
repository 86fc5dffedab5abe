"""The pipeline's declarations in `conf/*/*.yml`: sources, silver tables and their
expectations, offline tables, gold tables. Each is a frozen dataclass whose `__post_init__`
checks what one field cannot check alone; `lakehouse.core.config.build` reports a failure with
the file and the key; `lakehouse.core.settings` checks the references between them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from lakehouse.core.config import Secret, resolved
from lakehouse.core.connector_specs import ConnectorSettings, check_connector

SOURCE_KINDS = ("events", "cdc")
# What a record's value is: one JSON event; Feldera's insert_delete changes
# (`{"insert": row}` / `{"delete": row}`, or an array of them); a Debezium change (CDC).
FORMATS = {"events": ("json", "insert_delete"), "cdc": ("debezium",)}
# Debezium's modes and the encodings a silver column may declare (`lakehouse.silver.decode`).
DECIMAL_HANDLING_MODES = ("precise", "string", "double")
TIME_PRECISION_MODES = ("adaptive", "adaptive_time_microseconds", "connect")
# What a silver table does with a PostgreSQL infinite date or timestamp.
INFINITE_TIMES = ("quarantine", "clamp")
ENCODINGS = (
    *("iso", "epoch_s", "epoch_ms", "epoch_us", "epoch_ns", "epoch_days", "text", "base64"),
    *("time_ms", "time_us", "time_ns"),
)


@dataclass(frozen=True)
class SourceSettings:
    """One Kafka source feeding one bronze table (`conf/base/sources.yml`)."""

    kind: str
    # Exactly one of `topics` (a list) or `topic_pattern` (a Java regex).
    topics: tuple[str, ...] = ()
    topic_pattern: str = ""
    # The bronze table's name; the source's own name when empty.
    bronze_table: str = ""
    # Upper bound of records per micro-batch (Spark's maxOffsetsPerTrigger); 0 = unbounded.
    max_offsets_per_trigger: int = 0
    # Micro-batch interval for `--trigger continuous`.
    trigger_interval: str = "10 seconds"
    # Values larger than this are kept in bronze but not parsed (flagged `oversize`).
    max_value_bytes: int = 1_048_576
    # Passed through to Spark's Kafka source with the `kafka.` prefix. A value may hold
    # ${SECRET} references, resolved by `client_options` when this source is read, so one
    # source's missing secret never stops another source's job.
    kafka_options: dict[str, str | Secret] = field(default_factory=dict, repr=False)
    # CDC: the Debezium connector's `decimal.handling.mode` and `time.precision.mode` (its
    # defaults here too): how numeric, timestamp and date values are encoded on the topic.
    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive"
    # The records' format (FORMATS; empty: json for events, debezium for cdc).
    format: str = ""
    # CDC: the Debezium connector writing the topics (`lakehouse connectors`); none when it is
    # managed elsewhere.
    connector: ConnectorSettings | None = None

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"'kind' must be one of {', '.join(SOURCE_KINDS)}, got {self.kind!r}")
        if self.format and self.format not in FORMATS[self.kind]:
            raise ValueError(
                f"'format' must be one of {', '.join(FORMATS[self.kind])} for a {self.kind} "
                f"source, got {self.format!r}"
            )
        for key, value, allowed in (
            ("decimal_handling_mode", self.decimal_handling_mode, DECIMAL_HANDLING_MODES),
            ("time_precision_mode", self.time_precision_mode, TIME_PRECISION_MODES),
        ):
            if value not in allowed:
                raise ValueError(
                    f"{key!r} must be one of {', '.join(allowed)} (the Debezium connector's "
                    f"setting), got {value!r}"
                )
        if bool(self.topics) == bool(self.topic_pattern):
            raise ValueError("set exactly one of 'topics' (a list) or 'topic_pattern' (a regex)")
        if self.format == "insert_delete" and len(self.topics) != 1:
            raise ValueError(
                "format insert_delete orders changes by their Kafka offsets: read exactly one "
                "topic (of one partition), not several or a 'topic_pattern'"
            )
        if self.max_offsets_per_trigger < 0:
            raise ValueError("'max_offsets_per_trigger' must be >= 0 (0 means unbounded)")
        if self.bronze_table and not re.fullmatch(r"[a-z][a-z0-9_]*", self.bronze_table):
            raise ValueError("'bronze_table' must be lower_snake_case")
        if self.connector is not None:
            check_connector(self, self.connector)

    def client_options(self) -> dict[str, str]:
        """`kafka_options` with their references resolved (`SettingsError` names a missing
        variable with the file and key that asked for it)."""
        return resolved(self.kafka_options)

    @property
    def records(self) -> str:
        """How silver reads the records: `events`, `cdc` (Debezium changes) or `changes`
        (insert_delete changes, ordered by their Kafka position)."""
        return "changes" if self.format == "insert_delete" else self.kind


SNAKE = re.compile(r"[a-z][a-z0-9_]*")
EXPECTATION_ACTIONS = ("warn", "drop", "quarantine", "fail")


@dataclass(frozen=True)
class ExpectationSettings:
    """One data-quality rule (`conf/base/tables.yml`): a SQL boolean expression, or a Great
    Expectations expectation type with its kwargs, and what to do with a row that fails it."""

    name: str
    action: str = "warn"
    sql: str = ""
    expect: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not SNAKE.fullmatch(self.name):
            raise ValueError(f"expectation name {self.name!r}: use lower_snake_case")
        if self.action not in EXPECTATION_ACTIONS:
            raise ValueError(
                f"expectation {self.name!r}: 'action' must be one of "
                f"{', '.join(EXPECTATION_ACTIONS)}, got {self.action!r}"
            )
        if bool(self.sql.strip()) == bool(self.expect.strip()):
            raise ValueError(
                f"expectation {self.name!r}: set exactly one of 'sql' (a boolean SQL "
                "expression) or 'expect' (a Great Expectations type such as "
                "expect_column_values_to_not_be_null, with 'kwargs')"
            )


SILVER_MODES = ("append", "upsert", "scd1", "scd2")
DRIFT_POLICIES = ("evolve", "rescue", "fail")


@dataclass(frozen=True)
class SilverTableSettings:
    """One silver table fed by one bronze source (`conf/base/tables.yml`, section `silver`)."""

    # The bronze source (a key of `sources`) whose Change Data Feed feeds this table.
    source: str
    # append: every parsed row; upsert: latest row per key by `sequence_by` (events);
    # scd1 / scd2: Debezium change apply, ordered by the connector's position (CDC sources).
    mode: str = "upsert"
    # Spark DDL of one record: the JSON event, or the row image of a CDC change.
    schema: str = ""
    keys: tuple[str, ...] = ()
    # Events: the column that orders versions of a key (a greater value wins; on a tie the
    # version already in silver stays, and two tied versions in one batch are not ordered).
    sequence_by: str = ""
    # Upsert: a Spark SQL condition on a record that makes it a delete of its key at its
    # `sequence_by` position (DLT's apply_as_deletes), e.g. `op = 'DELETE'`. The key keeps a
    # tombstone for `tombstone_retention_hours`; empty: every record is an upsert.
    apply_as_deletes: str = ""
    # Array columns exploded into one row each (after flattening nested structs with `_`).
    explode: tuple[str, ...] = ()
    # A field not in `schema`: evolve (add the column), rescue (keep it in `_rescued_data`),
    # fail (stop with a message naming the field).
    schema_drift: str = "rescue"
    # SCD2: the columns whose change opens a new version (empty: every non-key column).
    track_columns: tuple[str, ...] = ()
    # How long delete tombstones are kept, so a late older change cannot resurrect a row.
    tombstone_retention_hours: int = 168
    # Bronze files per micro-batch (Delta's maxFilesPerTrigger); 0 = Delta's default (1000).
    max_files_per_trigger: int = 0
    # Column -> how its values are encoded: TIMESTAMP iso|epoch_s|epoch_ms|epoch_us|epoch_ns,
    # DATE iso|epoch_days, DECIMAL text|base64 (defaults: `lakehouse.silver.decode`).
    encodings: dict[str, str] = field(default_factory=dict)
    # A PostgreSQL `infinity` / `-infinity` date or timestamp (as Debezium sends it): quarantine
    # (no Spark value is infinite), or clamp (stored as 9999-12-31 23:59:59.999999 / 0001-01-01,
    # Spark's own JDBC reader's choice) for tables that use it as an open end.
    infinite_times: str = "quarantine"
    expectations: tuple[ExpectationSettings, ...] = ()
    # Table-level Great Expectations checks run only by `lakehouse validate` (row count,
    # key uniqueness, ...), on top of `expectations`.
    table_expectations: tuple[ExpectationSettings, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in SILVER_MODES:
            raise ValueError(f"'mode' must be one of {', '.join(SILVER_MODES)}, got {self.mode!r}")
        if self.schema_drift not in DRIFT_POLICIES:
            raise ValueError(
                f"'schema_drift' must be one of {', '.join(DRIFT_POLICIES)}, "
                f"got {self.schema_drift!r}"
            )
        if not self.schema.strip():
            raise ValueError("'schema' is required: the Spark DDL of one record")
        if self.mode != "append" and not self.keys:
            raise ValueError(f"mode {self.mode!r} needs 'keys' (the primary key columns)")
        if self.mode == "upsert" and not self.sequence_by:
            raise ValueError("mode 'upsert' needs 'sequence_by' (the column ordering versions)")
        if self.apply_as_deletes.strip() and self.mode != "upsert":
            takes = "keeps every record" if self.mode == "append" else "takes deletes from the op"
            raise ValueError(
                f"'apply_as_deletes' is for mode upsert (events); mode {self.mode!r} {takes}"
            )
        if self.tombstone_retention_hours < 0:
            raise ValueError("'tombstone_retention_hours' must be >= 0")
        if self.infinite_times not in INFINITE_TIMES:
            raise ValueError(
                f"'infinite_times' must be one of {', '.join(INFINITE_TIMES)}, "
                f"got {self.infinite_times!r}"
            )
        for column, encoding in self.encodings.items():
            if encoding not in ENCODINGS:
                raise ValueError(
                    f"encodings.{column}: {encoding!r} is not an encoding; use one of "
                    f"{', '.join(ENCODINGS)}"
                )
        names = [e.name for e in (*self.expectations, *self.table_expectations)]
        if len(names) != len(set(names)):
            raise ValueError("expectation names must be unique within a table")


DAY = 86_400
_DURATION = re.compile(r"\s*(-?\d+)\s*(s|m|h|d)\s*")
_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": DAY}
# How a time column holds its instants.
TIME_FORMATS = ("epoch_ms", "epoch_s", "iso8601", "timestamp")


def parse_duration(text: str) -> int:
    """`2h`, `90m`, `1d`, `30s` -> seconds (may be negative; callers check the sign)."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration; use a number and s, m, h or d, e.g. 2h")
    return int(match[1]) * _UNITS[match[2]]


@dataclass(frozen=True)
class OfflineTableSettings:
    """One offline table (`conf/base/offline.yml`): the closed time buckets of a realtime
    (silver) table, moved by `realtime_to_offline` and corrected by `backfill`, served with the
    realtime table's fresh rows by the hybrid view."""

    # The silver table (a key of `silver`) whose live rows move offline.
    realtime: str
    # The column holding each row's instant, and how it holds it.
    time_column: str
    time_format: str = "epoch_ms"
    # The bucket period (a whole divisor of a day: 15m, 1h, 2h, 1d, ...); buckets are
    # half-open [start, end) and aligned to UTC midnight.
    bucket: str = "1d"
    # How long after a bucket's end it is still expected to change (late data): it moves once
    # its end plus the buffer has passed.
    buffer: str = "0s"
    # The hybrid view's name (offline before the boundary, realtime from it on); default
    # `<realtime>_hybrid`.
    hybrid_view: str = ""

    def __post_init__(self) -> None:
        if self.time_format not in TIME_FORMATS:
            raise ValueError(
                f"'time_format' must be one of {', '.join(TIME_FORMATS)}, got {self.time_format!r}"
            )
        seconds = parse_duration(self.bucket)
        if seconds <= 0 or DAY % seconds:
            raise ValueError(
                f"'bucket' {self.bucket!r} does not divide a day into whole buckets; use e.g. "
                "15m, 1h, 2h, 6h or 1d"
            )
        if parse_duration(self.buffer) < 0:
            raise ValueError(f"'buffer' {self.buffer!r} is negative; use 0s or more")
        if self.hybrid_view and not SNAKE.fullmatch(self.hybrid_view):
            raise ValueError("'hybrid_view' must be lower_snake_case")

    @property
    def bucket_seconds(self) -> int:
        return parse_duration(self.bucket)

    @property
    def buffer_seconds(self) -> int:
        return parse_duration(self.buffer)

    @property
    def view(self) -> str:
        return self.hybrid_view or f"{self.realtime}_hybrid"


@dataclass(frozen=True)
class GoldTableSettings:
    """One gold table (`conf/base/gold.yml`): groups of a source's current rows and their
    aggregates, kept exact incrementally by `build_gold`."""

    # A silver table (a key of `silver`) or a hybrid view (an offline table's `hybrid_view`).
    source: str
    # Output column -> Spark SQL expression over the source's rows, e.g. day: to_date(...).
    group_by: dict[str, str] = field(default_factory=dict)
    # Output column -> Spark SQL aggregate, e.g. revenue: sum(amount). Any aggregate works:
    # groups are recomputed, not patched.
    aggregates: dict[str, str] = field(default_factory=dict)
    expectations: tuple[ExpectationSettings, ...] = ()
    table_expectations: tuple[ExpectationSettings, ...] = ()
    # Micro-run interval for `--trigger continuous`.
    trigger_interval: str = "1m"

    def __post_init__(self) -> None:
        if not self.group_by:
            raise ValueError("'group_by' is required: output column -> SQL expression")
        if not self.aggregates:
            raise ValueError("'aggregates' is required: output column -> SQL aggregate")
        names = [*self.group_by, *self.aggregates]
        bad = [n for n in names if not SNAKE.fullmatch(n)]
        if bad:
            raise ValueError(f"column names {bad} must be lower_snake_case")
        if len(names) != len(set(names)):
            raise ValueError("a column is named in both 'group_by' and 'aggregates'")
        empty = [n for n in names if not str({**self.group_by, **self.aggregates}[n]).strip()]
        if empty:
            raise ValueError(f"columns {empty} have no SQL expression")
        parse_duration(self.trigger_interval)
        rules = [e.name for e in (*self.expectations, *self.table_expectations)]
        if len(rules) != len(set(rules)):
            raise ValueError("expectation names must be unique within a table")
