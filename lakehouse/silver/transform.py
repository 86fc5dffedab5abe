"""Silver transformations: bronze rows -> parsed, flattened, checked records (CDC changes are
cut from Debezium's records in `lakehouse.silver.cdc`, then parsed here).

Pure DataFrame -> DataFrame functions; `lakehouse.silver.refine` does the reads, writes and MERGEs.

A bronze micro-batch becomes one row per record with the declared columns plus transient
`_lh_*` columns (bronze lineage, raw bytes, parse error, unknown fields) that quarantine and the
drift check read and that never reach silver. A record that cannot be parsed is never an
exception: it carries `_lh_error` and the built-in `parsable` rule sends it to quarantine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakehouse.core import tables
from lakehouse.core.columns import WORKING, named
from lakehouse.core.current import BOOKKEEPING
from lakehouse.core.errors import ContractViolation
from lakehouse.quality.expectations import (
    ACTIONS,
    FAILED,
    MASK,
    REMOVING,
    Expectation,
    evaluate,
    fails_any,
    mask_columns,
)
from lakehouse.quality.quarantine import QUARANTINED_AT
from lakehouse.silver import decode, exact_digits, malformed, nested
from lakehouse.silver.changes import DELETE, OP, SEQ, TS
from lakehouse.silver.shape import explode_arrays, flatten

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from lakehouse.core.specs import SilverTableSettings

# JSON of fields that did not fit the schema: unknown, mistyped, or nested values holding a
# field their struct does not declare (kept in their column too).
RESCUED = "_rescued_data"
# Transient columns of a batch being refined (never written to silver).
TOPIC, PARTITION, OFFSET = "_lh_topic", "_lh_partition", "_lh_offset"
RAW_KEY, RAW_VALUE, VALUE_ERROR = "_lh_key", "_lh_value", "_lh_value_error"
ERROR = "_lh_error"  # why the record could not be parsed (null when it parsed)
UNKNOWN = "_lh_unknown"  # names of top-level fields the schema does not declare
MISTYPED = "_lh_mistyped"  # names of declared top-level fields whose value did not decode
UNDECODABLE = "undecodable: "  # a CDC change's error: the columns that did not decode follow
# Names of nested columns whose value holds a field its struct does not declare (kept whole).
UNDECLARED = "_lh_undeclared"
CHECKED = "_lh_checked"  # whether user expectations apply (not for deletes/unparsable rows)
# CDC: a tombstone (a key with no value), a delete without a position until
# `lakehouse.silver.tombstones` gives it one.
TOMBSTONE_ROW = "_lh_tombstone"
TRANSIENT = (
    TOPIC,
    PARTITION,
    OFFSET,
    RAW_KEY,
    RAW_VALUE,
    VALUE_ERROR,
    ERROR,
    UNKNOWN,
    MISTYPED,
    UNDECLARED,
    CHECKED,
    TOMBSTONE_ROW,
)


def silvers_own(name: str) -> bool:
    """Whether `name` is, or may one day be, one of silver's own columns: `_rescued_data`, a
    working column (`_lh_*`: a batch's transients, a change's `_lh_op`/`_lh_seq`, ...), a keyed
    table's bookkeeping `__*`, or one a read of Delta's Change Data Feed adds (which Delta
    refuses in a table with the feed on), in any case (`columns.case_collisions`). No record
    field becomes a column of such a name."""
    low = name.lower()
    return low in (RESCUED, *tables.CDF_COLUMNS) or low.startswith((WORKING, BOOKKEEPING))


# The built-in rule every table has: a record that did not parse goes to quarantine.
PARSABLE = Expectation("parsable", f"{ERROR} IS NULL", "quarantine")


class SchemaDriftError(ContractViolation):
    """Records carry fields the declared schema lacks and the table's policy is `fail`."""


@dataclass(frozen=True)
class ParsedSchema:
    """The record schema a batch is parsed with: the declared DDL plus evolved fields, and
    each top-level column's encoding (`lakehouse.silver.decode`)."""

    struct: StructType
    encodings: Mapping[str, str] = field(default_factory=dict)
    # By kind: the encoding a nested leaf takes (encodings are declared per top-level column).
    nested_encodings: Mapping[str, str] = field(
        default_factory=lambda: decode.kind_encodings("events")
    )
    # A date or timestamp's PostgreSQL infinity clamped (`infinite_times: clamp`).
    clamp_infinite: bool = False

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.struct.fields]

    def evolved(self, declared_ddl: str, evolved_ddl: str) -> ParsedSchema:
        """This schema with the evolved fields of `evolved_ddl`, decoded as before."""
        return parse_schema(
            declared_ddl, evolved_ddl, self.encodings, self.nested_encodings, self.clamp_infinite
        )


def parse_schema(
    declared_ddl: str,
    evolved_ddl: str = "",
    encodings: Mapping[str, str] | None = None,
    nested_encodings: Mapping[str, str] | None = None,
    clamp_infinite: bool = False,
) -> ParsedSchema:
    """`encodings`: column -> encoding for every column that has one (see
    `decode.default_encodings`); empty: the events defaults. `nested_encodings`: kind ->
    encoding of a nested leaf (`decode.kind_encodings`); None: the events defaults."""
    from pyspark.sql.types import StructType, _parse_datatype_string

    declared = _parse_datatype_string(declared_ddl)
    if not isinstance(declared, StructType):  # pragma: no cover - DDL lists are structs
        raise ValueError(f"schema {declared_ddl!r} is not a list of columns")
    fields = list(declared.fields)
    if evolved_ddl:
        extra = _parse_datatype_string(evolved_ddl)
        assert isinstance(extra, StructType)
        known = {f.name for f in fields}
        fields += [f for f in extra.fields if f.name not in known]
    struct = StructType(fields)
    return ParsedSchema(
        struct,
        {**decode.default_encodings(struct, "events"), **(encodings or {})},
        dict(nested_encodings or decode.kind_encodings("events")),
        clamp_infinite,
    )


def lineage() -> list[Column]:
    """A bronze row's lineage and raw key/value as the transient `_lh_*` columns."""
    from pyspark.sql import functions as F

    return [
        F.col("topic").alias(TOPIC),
        F.col("partition").alias(PARTITION),
        F.col("offset").alias(OFFSET),
        F.col("key").alias(RAW_KEY),
        F.col("value").alias(RAW_VALUE),
        F.col("value_error").alias(VALUE_ERROR),
    ]


def parse_records(
    df: DataFrame,
    text: Column,
    schema: ParsedSchema,
    error: Column,
    metadata_prefix: str = "",
    strict: bool = False,
    cut: exact_digits.Cut | None = None,
) -> DataFrame:
    """Parse `text` (a JSON object) with `schema`, each top-level value decoded by its type
    and encoding (`lakehouse.silver.decode`). Adds the record's columns, `_rescued_data`
    (fields that are unknown to the schema or did not decode, and nested values holding a
    field their struct does not declare, as JSON text), `_lh_unknown` (the unknown field
    names), `_lh_mistyped` (the declared fields that did not decode), `_lh_undeclared` (the
    nested columns holding an undeclared field) and `_lh_error` (`error`, else
    `invalid_json` when the text does not parse as an object at all, else, when `strict`,
    `undecodable: <columns>`: a CDC row image must be stored whole or not at all). Fields
    starting with `metadata_prefix` (Debezium's `__op`, `__lsn`, ... in flattened records)
    are connector metadata, not unknown data. A `cut` record's numbers are read as written in
    the text it was cut from."""
    from pyspark.sql import functions as F

    parsed = F.from_json(text, schema.struct)
    # The same text as a map keeps every field (nested values as their JSON text), so fields
    # the schema drops or fails to cast are still there to rescue: one more parse, no UDF.
    raw = F.from_json(text, "map<string,string>")
    exact = exact_digits.columns(schema.struct, schema.encodings)
    declared = F.array(*[F.lit(n) for n in schema.names])
    staged = df.select(
        "*", parsed.alias("_lh_parsed"), raw.alias("_lh_raw"), error.alias("_lh_error0")
    )
    parsed_col, raw_col = F.col("_lh_parsed"), F.col("_lh_raw")
    # Each exact column's text is projected once: its decoder reads it several times.
    text_names = {n: f"{exact_digits.TEXT}{i}" for i, n in enumerate(exact)}
    written = cut.whole if cut else text  # where each number's digits are read as written
    nested_names = nested.columns(schema.struct)
    for projected in exact_digits.variant(text, raw_col, exact, cut, nested_names):
        staged = staged.select("*", projected)
    if exact:
        staged = staged.select(
            "*",
            *[
                exact_digits.text(n, how, raw_col[n], written, cut is not None).alias(text_names[n])
                for n, how in exact.items()
            ],
        )
    texts = {n: F.col(c) for n, c in text_names.items()}
    # Each nested column decoded once, with whether every leaf did (read twice below).
    types = {f.name: f.dataType for f in schema.struct.fields}
    pair_names = {n: f"{nested.PAIR}{i}" for i, n in enumerate(nested_names)}

    def leaves(name: str) -> dict[str, str]:
        declared = schema.encodings.get(name, "")
        return decode.leaf_encodings(schema.nested_encodings, declared, schema.clamp_infinite)

    staged = staged.select(
        "*",
        *[
            nested.pair(nested.field(F.col(exact_digits.VARIANT), n), types[n], leaves(n)).alias(
                pair_names[n]
            )
            for n in nested_names
        ],
    )
    nested_values = {n: nested.value_of(F.col(c)) for n, c in pair_names.items()}
    values = decode.decoded_columns(
        raw_col,
        parsed_col,
        schema.struct,
        schema.encodings,
        texts,
        nested_values,
        schema.clamp_infinite,
    )
    unknown = F.array_except(F.map_keys(raw_col), declared)
    if metadata_prefix:
        unknown = F.filter(unknown, lambda k: ~k.startswith(metadata_prefix))
    decoded = staged.select("*", *values, unknown.alias(UNKNOWN)).select(
        "*", decode.mistyped_names(raw_col, schema.struct).alias(MISTYPED)
    )
    # A nested column holding an undeclared field keeps its value and is rescued whole too
    # (one that did not decode is rescued, and counted, as mistyped).
    extra = [F.when(nested.kept_with_extra(F.col(c)), F.lit(n)) for n, c in pair_names.items()]
    undeclared = F.array_compact(F.array(*extra)) if extra else F.array().cast("array<string>")
    decoded = decoded.select("*", undeclared.alias(UNDECLARED))
    bad_names = F.array_union(F.array_union(F.col(UNKNOWN), F.col(MISTYPED)), F.col(UNDECLARED))
    # Projected once: the rescue's lambda reads it for every field of the record.
    decoded = decoded.select("*", bad_names.alias("_lh_bad"))
    bad_names = F.col("_lh_bad")
    # Every bad name is a key of the map (unknown: from its keys; mistyped and extra: present
    # in it), so
    # the filtered map is not empty exactly when `bad_names` is not: the lambdas (interpreted)
    # run only for the rows that have something to rescue, and keep every number's digits.
    to_rescue = F.map_filter(raw_col, lambda k, _v: F.array_contains(bad_names, k))
    numbers = [n for n, how in exact.items() if how != exact_digits.WRITTEN]
    in_map = exact_digits.in_map(to_rescue, texts, written, numbers)
    rescued = F.when(F.size(bad_names) > 0, F.to_json(in_map))
    undecodable = F.when(
        F.lit(strict) & (F.size(MISTYPED) > 0),
        F.concat(F.lit(UNDECODABLE), F.array_join(MISTYPED, ", ")),
    )
    return decoded.select(
        *[c for c in df.columns],
        *[named(n) for n in schema.names],
        rescued.alias(RESCUED),
        UNKNOWN,
        MISTYPED,
        UNDECLARED,
        F.coalesce(
            F.col("_lh_error0"),
            F.when(raw_col.isNull(), F.lit("invalid_json")),
            malformed.duplicate_keys(raw_col),
            malformed.lone_surrogate(text),
            undecodable,
        ).alias(ERROR),
    )


def event_records(bronze: DataFrame, table: SilverTableSettings, schema: ParsedSchema) -> DataFrame:
    """Bronze event rows -> one row per record (exploded, flattened), with `_lh_*` columns."""
    from pyspark.sql import functions as F

    staged = bronze.select(*lineage())
    error = F.col(VALUE_ERROR)  # bronze's verdict on the raw value, null when usable
    records = parse_records(staged, F.col(RAW_VALUE).cast("string"), schema, error)
    records = records.withColumn(CHECKED, F.col(ERROR).isNull())
    return flatten(explode_arrays(records, table.explode), keep=TRANSIENT)


def evaluated_for_cache(
    records: DataFrame, expectations: Sequence[Expectation], required: Sequence[RequiredColumn]
) -> DataFrame:
    """The table's rules (`parsable` first) evaluated into the failed-rule bitmask, settled for
    rows user rules do not apply to: an unparsable record fails only `parsable`; a delete or
    truncate fails nothing. `required`: (column, reason) pairs a row cannot go on without (an
    upsert's `sequence_by`, `required_columns`): a row with one of them NULL that no
    rule of the table drops or quarantines fails `parsable` with `<reason>: <column>` as its
    error. The result is what a batch caches for its several reads, so it keeps the raw bytes
    only where they can be needed (`_raw_where_needed`)."""
    from pyspark.sql import functions as F

    assert expectations[0] == PARSABLE, "the parsable rule comes first"
    evaluated = evaluate(records, expectations)
    if required:
        missing = F.coalesce(
            *[F.when(named(c).isNull(), F.lit(f"{why}: {c}")) for c, why in required]
        )
        # A row a rule of the table already removes goes where that rule sends it.
        unusable = F.when(F.col(ERROR).isNull() & ~fails_any(expectations, REMOVING), missing)
        evaluated = evaluated.withColumn(ERROR, F.coalesce(F.col(ERROR), unusable))
    settled = {}
    for group, column in enumerate(mask_columns(len(expectations))):
        settled[column] = (
            F.when(F.col(ERROR).isNotNull(), F.lit(1 if group == 0 else 0).cast("long"))
            .when(~F.col(CHECKED), F.lit(0).cast("long"))
            .otherwise(F.col(column))
        )
    return _raw_where_needed(evaluated.withColumns(settled), expectations)


RequiredColumn = tuple[str, str]  # a column, and the error naming it when it is NULL


def required_columns(mode: str, sequence_by: str) -> list[RequiredColumn]:
    """What an upsert cannot apply without: a NULL `sequence_by` would pin its key (no later
    version is newer than NULL). A NULL key is a value like any other (keys match null-safe:
    an exploded empty array's position is one)."""
    return [(sequence_by, "null_sequence_by")] if mode == "upsert" else []


def _raw_where_needed(evaluated: DataFrame, expectations: Sequence[Expectation]) -> DataFrame:
    """An evaluated batch with its raw key and value bytes only on the rows that can need
    them: failing a rule (the quarantine row, a `fail` rule's sample) or carrying unknown
    fields (schema evolution infers their types from the record). The batch is cached for its
    several reads; the bytes of every other row would be most of what the cache holds."""
    from pyspark.sql import functions as F

    needed = fails_any(expectations, ACTIONS) | (F.size(UNKNOWN) > 0)
    return evaluated.withColumns(
        {RAW_KEY: F.when(needed, F.col(RAW_KEY)), RAW_VALUE: F.when(needed, F.col(RAW_VALUE))}
    )


def event_upserts(records: DataFrame, sequence_by: str, deletes: str = "") -> DataFrame:
    """Event records as changes for the keyed apply, ordered by their `sequence_by` value
    (timestamps by their microseconds): a delete of its key where the `deletes` condition
    (`apply_as_deletes`) holds, else an upsert."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, TimestampType

    kind = records.schema[sequence_by].dataType
    seq = named(sequence_by)
    if isinstance(kind, TimestampType):
        seq = F.unix_micros(seq)
    elif isinstance(kind, DateType):
        seq = F.unix_date(seq)
    op = F.lit("u")
    if deletes.strip():
        # A NULL verdict (a column the condition reads is missing) is not a delete.
        op = F.when(F.coalesce(F.expr(deletes), F.lit(False)), F.lit(DELETE)).otherwise(op)
    return records.withColumn(OP, op).withColumn(SEQ, seq.cast("long"))


def silver_columns(batch: DataFrame) -> list[str]:
    """The columns a batch contributes to silver: everything but the transient ones, with
    `_rescued_data` last (after exploded and evolved columns)."""
    columns = [
        c
        for c in batch.columns
        if c not in (*TRANSIENT, FAILED, RESCUED) and not c.startswith(MASK)
    ]
    return [*columns, RESCUED] if RESCUED in batch.columns else columns


def quarantine_rows(rejected: DataFrame, table: str, run_id: str, batch_id: int) -> DataFrame:
    """Rejected records in the quarantine table's shape: failed rule names, the parsed record
    (JSON, what a repair edits), the raw key/value and the bronze lineage."""
    from pyspark.sql import functions as F

    record = [c for c in silver_columns(rejected) if c not in (OP, SEQ, TS)]
    return rejected.select(
        F.expr("uuid()").alias("id"),
        F.lit(table).alias("table"),
        F.lit(run_id).alias("run_id"),
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.current_timestamp().alias(QUARANTINED_AT),
        F.col(FAILED).alias("failed_rules"),
        F.col(ERROR).alias("parse_error"),
        F.to_json(F.struct(*[named(c) for c in record])).alias("record"),
        (F.col(OP) if OP in rejected.columns else F.lit(None)).cast("string").alias("op"),
        (F.col(SEQ) if SEQ in rejected.columns else F.lit(None)).cast("long").alias("seq"),
        F.col(RAW_KEY).alias("raw_key"),
        F.col(RAW_VALUE).alias("raw_value"),
        F.col(TOPIC).alias("topic"),
        F.col(PARTITION).alias("partition"),
        F.col(OFFSET).alias("offset"),
        F.lit("quarantined").alias("status"),
        F.lit(None).cast("timestamp").alias("replayed_at"),
    )
