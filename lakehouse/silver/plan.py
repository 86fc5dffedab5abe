"""What a refine run resolves once before its first batch: the silver table (created with its
contract on first run), the schema records are parsed with (declared plus evolved fields), the
rules, and where quarantine and metrics go. Shared by the stream (`refine`) and `replay`."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from lakehouse.bronze import transform as bronze
from lakehouse.core import system, tables
from lakehouse.core.columns import case_colliding_fields, case_collisions, unnameable_fields
from lakehouse.core.current import is_bookkeeping
from lakehouse.core.errors import UsageError
from lakehouse.core.replayed import Replayed
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.core.spark import analysis_error
from lakehouse.core.specs import SilverTableSettings
from lakehouse.quality.expectations import Expectation, from_settings
from lakehouse.quality.metrics import metrics_schema
from lakehouse.quality.quarantine import quarantine_schema
from lakehouse.silver import cdc, decode, scd1, scd2, shape
from lakehouse.silver import transform as silver
from lakehouse.silver.changes import OP, SEQ, TS
from lakehouse.silver.insert_delete import insert_delete_changes
from lakehouse.silver.once import FirstBatch
from lakehouse.silver.transform import ParsedSchema

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

JOB = "refine_silver"
RUN_ID = "lakehouse.run_id"  # table property: a new id per (re)build, part of the txn app id
EVOLVED = "lakehouse.evolved_schema"  # table property: DDL of fields added by `evolve`
# Table property: what the stored rows were built by (mode, keys, ordering, versioning,
# explode). A table built under one contract and merged under another is silently wrong.
CONTRACT = "lakehouse.contract"
# Deletion vectors: a MERGE marks the changed rows of a file instead of rewriting the file, so
# far less of its cost grows with the table (bench/silver_merge.py: a 10,000-change MERGE into
# 4M rows 16.0 s -> 10.7 s; 4M over 250k rows 2.9x -> 2.3x).
SILVER_PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}


@dataclass
class Plan:
    """Everything a micro-batch needs, resolved once at start (the schema may evolve)."""

    name: str
    table: SilverTableSettings
    kind: str
    path: str
    run_id: str
    schema: ParsedSchema
    expectations: list[Expectation]
    metrics_path: str
    quarantine_path: str

    # The streaming query's id, from its checkpoint: a new checkpoint starts its batch ids at
    # 0 again, so the transaction id must name the checkpoint too, or Delta would skip every
    # batch of the new stream as already committed (empty for replays, which have none).
    stream_id: str = ""
    # The query's first batch (`once`): the only one that may be a replay of a batch tried
    # before; None where no query's offset log says (every batch keeps Delta's look-up).
    first_batch: FirstBatch | None = None
    bronze_path: str = ""  # the source's bronze table
    compact_every: int = 0  # `storage.compact_every`
    # `records`' transform, with the schema it parses with (which evolves).
    _parse: tuple[ParsedSchema, Replayed] | None = field(default=None, repr=False)

    @property
    def app_id(self) -> str:
        return f"{JOB}:{self.name}:{self.run_id}" + (f":{self.stream_id}" if self.stream_id else "")

    def evaluated(self, records: DataFrame) -> DataFrame:
        """`records` with the table's rules evaluated (`transform.evaluated_for_cache`),
        including the column an upsert cannot apply without."""
        required = silver.required_columns(self.table.mode, self.table.sequence_by)
        return silver.evaluated_for_cache(records, self.expectations, required)

    def records(self, batch: DataFrame) -> DataFrame:
        """A micro-batch of bronze's feed as records (`transform`): its Columns are built
        once per schema and replayed on every later batch (`lakehouse.core.replayed`)."""
        if self._parse is None or self._parse[0] is not self.schema:
            schema = self.schema
            self._parse = (
                schema,
                Replayed(lambda rows: transform(rows, self.table, self.kind, schema)),
            )
        return self._parse[1](batch)


def silver_path(settings: Settings, name: str) -> str:
    return tables.table_path(settings, f"silver.{name}")


def check_mode(name: str, table: SilverTableSettings, kind: str) -> None:
    """`kind`: how the source's records read (`SourceSettings.records`)."""
    if kind == "cdc" and table.mode not in ("scd1", "scd2"):
        raise SettingsError(
            f"silver.{name}.mode {table.mode!r}: source {table.source!r} is a CDC source; "
            "use mode scd1 or scd2"
        )
    if kind == "changes" and table.mode not in ("scd1", "scd2"):
        raise SettingsError(
            f"silver.{name}.mode {table.mode!r}: source {table.source!r} sends insert_delete "
            "changes; use mode scd1 or scd2"
        )
    if kind == "events" and table.mode in ("scd1", "scd2"):
        raise SettingsError(
            f"silver.{name}.mode {table.mode!r} needs a CDC source; {table.source!r} is an "
            "events source (use upsert or append)"
        )


def prepare(
    spark: SparkSession,
    settings: Settings,
    name: str,
    table: SilverTableSettings,
    kind: str,
    path: str,
) -> Plan:
    try:
        declared = silver.parse_schema(table.schema)
    except Exception as exc:
        raise SettingsError(f"silver.{name}.schema: not valid Spark DDL: {exc}") from None
    _check_names(name, table, declared.struct)
    expectations = [silver.PARSABLE, *from_settings(table.expectations)]
    records = transform(
        spark.createDataFrame([], bronze.bronze_schema(bronze_kind(kind))), table, kind, declared
    )
    _check_columns(name, table, records)
    _check_rules(name, expectations, records)
    _check_deletes(name, table, records)
    if not tables.exists(spark, path):
        properties = {
            **SILVER_PROPERTIES,
            RUN_ID: uuid.uuid4().hex[:12],
            CONTRACT: contract(table),
        }
        tables.create_table(spark, path, _silver_schema(records, table), properties)
    else:
        # Bookkeeping a later version added (`__snapshot`): refused with the ALTER that adds it.
        from pyspark.sql.types import StructType

        bookkeeping = [f for f in _silver_schema(records, table).fields if is_bookkeeping(f.name)]
        tables.require_columns(spark, path, StructType(bookkeeping))
    props = tables.properties(spark, path)
    _check_contract(spark, name, table, path, props.get(CONTRACT))
    source = settings.sources[table.source]
    schema = silver.parse_schema(
        table.schema,
        props.get(EVOLVED, ""),
        _encodings(settings, name, table, declared),
        decode.kind_encodings(
            source.kind, source.decimal_handling_mode, source.time_precision_mode
        ),
        clamp_infinite=table.infinite_times == "clamp",
    )
    metrics_path = system.path(settings, system.METRICS)
    quarantine_path = system.path(settings, system.QUARANTINE)
    tables.create_table(spark, metrics_path, metrics_schema(), {"delta.appendOnly": "true"})
    tables.create_table(spark, quarantine_path, quarantine_schema(), {})
    return Plan(
        name,
        table,
        kind,
        path,
        props.get(RUN_ID, "0"),
        schema,
        expectations,
        metrics_path,
        quarantine_path,
        bronze_path=tables.table_path(settings, settings.bronze_table(table.source)),
        compact_every=settings.storage.compact_every,
    )


def contract(table: SilverTableSettings) -> str:
    return json.dumps(
        {
            "mode": table.mode,
            "keys": list(table.keys),
            "sequence_by": table.sequence_by,
            "track_columns": list(table.track_columns),
            "explode": list(table.explode),
        },
        sort_keys=True,
    )


def _check_contract(
    spark: SparkSession, name: str, table: SilverTableSettings, path: str, stored: str | None
) -> None:
    """Refuse to merge into a table built under another contract; a table from before
    contracts were recorded adopts the current one."""
    now = contract(table)
    if stored is None:
        tables.set_properties(spark, path, {CONTRACT: now})
        return
    if stored == now:
        return
    before, after = json.loads(stored), json.loads(now)
    changed = "; ".join(
        f"{key} {before.get(key)!r} -> {after[key]!r}"
        for key in sorted(after)
        if before.get(key) != after[key]
    )
    raise UsageError(
        f"silver.{name} was built with other settings than conf declares ({changed}): its rows "
        f"would be merged by the new ones and be silently wrong. Rebuild it from bronze: "
        f"refine_silver --table {name} --full-refresh (or put the settings back)"
    )


def _encodings(
    settings: Settings, name: str, table: SilverTableSettings, declared: ParsedSchema
) -> dict[str, str]:
    source = settings.sources[table.source]
    try:
        return decode.resolve_encodings(
            declared.struct,
            table.encodings,
            source.kind,
            source.decimal_handling_mode,
            source.time_precision_mode,
        )
    except ValueError as exc:
        raise SettingsError(f"silver.{name}.encodings: {exc}") from None


def bronze_kind(kind: str) -> str:
    """The bronze table a source of records `kind` lands in (insert_delete: events)."""
    return "cdc" if kind == "cdc" else "events"


def transform(
    bronze_rows: DataFrame, table: SilverTableSettings, kind: str, schema: ParsedSchema
) -> DataFrame:
    """`kind`: how the source's records read (`SourceSettings.records`)."""
    if kind == "cdc":
        return cdc.cdc_changes(bronze_rows, table, schema)
    if kind == "changes":
        return insert_delete_changes(bronze_rows, table, schema)
    return silver.event_records(bronze_rows, table, schema)


def _check_names(name: str, table: SilverTableSettings, struct: StructType) -> None:
    """Before a batch's columns are built from them: Spark would find such a name ambiguous
    mid-batch, or silver's own column would be overwritten."""
    columns = _flat_columns(struct, table.explode)
    own = [n for n in [*struct.names, *columns] if silver.silvers_own(n)]
    # Siblings equal but for case meet once flattened too: named once, by their paths.
    clash = [*(case_colliding_fields(struct) or case_collisions(columns)), *own]
    if clash:
        raise SettingsError(
            f"silver.{name}.schema: {', '.join(map(repr, dict.fromkeys(clash)))} cannot name a "
            "column: Spark and Delta tell names apart without case, a struct's fields become "
            "columns <struct>_<field> and an exploded array adds <array>_pos, and names "
            f"starting with __ or _lh_, {silver.RESCUED} and the Change Data Feed's "
            f"{', '.join(tables.CDF_COLUMNS)} are silver's own. Declare other names (a "
            "record's fields that no column declares stay in _rescued_data)"
        )


def _flat_columns(struct: StructType, explode: Sequence[str]) -> list[str]:
    """The columns a record of `struct` becomes: arrays exploded, then structs flattened."""
    from pyspark.sql.types import ArrayType, StructField

    columns: list[str] = []
    for f in struct.fields:
        if f.name in explode and isinstance(f.dataType, ArrayType):
            columns.append(shape.position_column(f.name))
            f = StructField(f.name, f.dataType.elementType)
        columns += shape.flat_names(f)
    return columns


def _check_columns(name: str, table: SilverTableSettings, records: DataFrame) -> None:
    from pyspark.sql.types import StructType

    columns = set(records.columns)
    row = StructType([records.schema[c] for c in row_columns(records)])
    bad = unnameable_fields(row)
    if bad:
        raise SettingsError(
            f"silver.{name}.schema: {', '.join(map(repr, bad))} cannot name a column: Delta "
            "refuses a space and any of ,;{}()= or a tab or newline in a name (silver does not "
            "map column names yet), and silver cannot hold a backtick yet. Declare "
            "only fields without them (the record's others stay in _rescued_data)"
        )
    for key in (*table.keys, *([table.sequence_by] if table.sequence_by else [])):
        if key not in columns:
            raise SettingsError(
                f"silver.{name}: column {key!r} (keys/sequence_by) is not in the flattened "
                f"schema; columns are: {', '.join(silver.silver_columns(records))}"
            )


def _check_rules(name: str, expectations: list[Expectation], records: DataFrame) -> None:
    """Each rule must resolve against the table's columns before a batch runs: else a
    misspelt column fails mid-batch with Spark's error, after the table was created."""
    for e in expectations:
        reason = analysis_error(partial(records.selectExpr, e.sql))  # parsed in the check too
        if reason is not None:
            raise SettingsError(
                f"silver.{name}.expectations.{e.name}: {e.sql!r} does not resolve against the "
                f"table ({reason}); its columns are: {', '.join(row_columns(records))}"
            )


def _check_deletes(name: str, table: SilverTableSettings, records: DataFrame) -> None:
    """`apply_as_deletes` must be a condition on the record's columns: a typo would otherwise
    fail mid-batch, and a non-boolean one would delete nothing without a word."""
    from pyspark.sql.types import BooleanType

    condition = table.apply_as_deletes
    if not condition.strip():
        return
    row = records.select(*[f"`{c}`" for c in row_columns(records)])
    reason = analysis_error(partial(row.selectExpr, condition))
    if reason is None:
        kind = row.selectExpr(condition).schema[0].dataType
        if not isinstance(kind, BooleanType):
            reason = f"it is {kind.simpleString()}, not boolean"
    if reason is not None:
        raise SettingsError(
            f"silver.{name}.apply_as_deletes: {condition!r} is not a condition on the table's "
            f"columns ({reason}); its columns are: {', '.join(row_columns(records))}"
        )


def row_columns(records: DataFrame) -> list[str]:
    return [c for c in silver.silver_columns(records) if c not in (OP, SEQ, TS)]


def _silver_schema(records: DataFrame, table: SilverTableSettings) -> StructType:
    from pyspark.sql.types import StructType

    row = StructType([records.schema[c] for c in row_columns(records)])
    if table.mode in ("upsert", "scd1"):
        return scd1.scd1_schema(row)
    if table.mode == "scd2":
        return scd2.scd2_schema(row)
    return row
