"""A backfill's input, read and checked before anything is written: corrected records in a
Delta table, Parquet, JSON lines or CSV, conformed to the realtime table's row schema.

Every check counts and samples what fails: a value that does not fit its column's type, a
column the table does not have or lacks, a record whose time is outside the window or cannot
be read, a key given twice, a `quarantine` or `fail` expectation of the realtime table. Any of
them refuses the whole backfill (`BackfillRefused`, with the report); `drop` expectations drop
their rows and `warn` ones are counted, as in silver.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakehouse.core import fs
from lakehouse.core.columns import named, type_ddl
from lakehouse.core.config import SettingsError
from lakehouse.core.errors import ContractViolation, UsageError
from lakehouse.core.specs import OfflineTableSettings, SilverTableSettings
from lakehouse.offline import buckets
from lakehouse.offline.store import BUCKET, with_bucket
from lakehouse.quality import expectations as rules
from lakehouse.silver import decode, nested, precise
from lakehouse.silver.transform import RESCUED

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

FORMATS = ("delta", "parquet", "json", "csv")
_SAMPLE = 3


@dataclass
class Check:
    """One failed check: what, how many rows, a sample."""

    name: str
    rows: int
    sample: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        return f"{self.name}: {self.rows} row(s), e.g. {self.sample}"


class BackfillRefused(ContractViolation):
    """The input broke the table's contract; nothing was written."""

    def __init__(self, table: str, checks: Sequence[Check]) -> None:
        self.checks = list(checks)
        detail = "; ".join(c.line() for c in checks)
        super().__init__(f"backfill of offline.{table} refused, nothing written: {detail}")


def guess_format(spark: SparkSession, path: str) -> str:
    """delta (a directory with a `_delta_log`), else by the file or directory's extension."""
    if fs.exists(spark, f"{path.rstrip('/')}/_delta_log"):
        return "delta"
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix, kind in (
        (".parquet", "parquet"),
        (".csv", "csv"),
        (".json", "json"),
        (".jsonl", "json"),
        (".ndjson", "json"),
    ):
        if name.endswith(suffix):
            return kind
    names = [n.lower() for n in fs.list_names(spark, path)]
    for kind, suffixes in (
        ("parquet", (".parquet",)),
        ("csv", (".csv",)),
        ("json", (".json", ".jsonl", ".ndjson")),
    ):
        if any(n.endswith(suffixes) for n in names):
            return kind
    raise UsageError(
        f"--input {path}: cannot tell its format (no _delta_log, no .parquet/.csv/.json "
        f"files); pass --format one of {', '.join(FORMATS)}"
    )


def read(
    spark: SparkSession, path: str, kind: str, schema: StructType, declared: Mapping[str, str]
) -> tuple[DataFrame, Check | None]:
    """The input conformed to `schema` (the realtime row's columns), and the check of the
    columns it has (missing or unknown ones). Text formats are read as strings and decoded
    as silver decodes an events feed (the realtime table's `encodings`, `declared`, over ISO
    times and decimal text), so a number sent as a string is read, and a value that fits
    nowhere, or only rounded, is caught."""
    if not fs.exists(spark, path):
        raise UsageError(f"--input {path}: no such file or directory")
    if kind == "csv":
        # By the header's names, every value a string: a schema given to the CSV reader would
        # be applied by position whatever the header says (a file with two columns swapped
        # would load each into the other).
        raw = spark.read.option("header", "true").csv(path)
        present = raw.columns
    elif kind == "json":
        from pyspark.sql.types import StringType, StructField, StructType

        text = StructType([StructField(f.name, StringType()) for f in schema.fields])
        raw = spark.read.schema(text).json(path)  # by name; a number's text as written
        present = spark.read.json(path).columns
    else:
        raw = spark.read.format(kind).load(path)
        present = raw.columns
    wanted = [f.name for f in schema.fields]
    missing = [c for c in wanted if c not in present and c != RESCUED]
    unknown = [c for c in present if c not in wanted]
    problem = None
    if missing or unknown:
        problem = Check(
            f"columns: missing {missing or 'none'}, not in the table {unknown or 'none'}", 0
        )
    from pyspark.sql import functions as F

    columns = [
        (named(f.name) if f.name in present else F.lit(None)).alias(f"_lh_raw_{f.name}")
        for f in schema.fields
    ]
    given = raw.select(*columns)
    encodings = _text_encodings(schema, declared)
    conformed = given.select(
        "*",
        *[
            _convert(
                f"_lh_raw_{f.name}",
                given.schema[f"_lh_raw_{f.name}"].dataType,
                f.dataType,
                encodings.get(f.name, ""),
            ).alias(f.name)
            for f in schema.fields
        ],
    )
    return conformed, problem


def _text_encodings(schema: StructType, declared: Mapping[str, str]) -> dict[str, str]:
    """How the input's values are read: the realtime table's `encodings` over ISO times and
    decimal text; a `base64` decimal (Debezium's bytes) is read as text, which is what a file of
    corrected records holds (`1000` is valid base64 too: read as bytes it would be -26672.12)."""
    try:
        encodings = decode.resolve_encodings(schema, declared, "events")
    except ValueError as exc:
        raise SettingsError(f"encodings of the realtime table: {exc}") from None
    return {c: "text" if e == "base64" else e for c, e in encodings.items()}


def _convert(raw: str, given: DataType, kind: DataType, encoding: str) -> Column:
    """The raw input column as `kind`, exactly or null (`check_values` reports the nulls):
    nothing is rounded or truncated to fit. Text goes through silver's decoders (a nested
    value is its JSON text, decoded leaf by leaf; binary is padded base64: as silver reads
    them); a number for a date or a timestamp too (by the column's encoding: a cast would
    read epoch milliseconds as seconds).
    Another typed value is kept when it casts back to itself (a DOUBLE 13.299, or a
    DECIMAL(12,3) one, does not fit DECIMAL(12,2); a DOUBLE 1.5 no BIGINT). A nested value
    must come with the column's own type: a cast would pair struct fields by position and
    round inside, and its JSON text may hold no field its struct does not declare (where
    silver decodes the type leaf by leaf: `nested.supported`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DateType,
        MapType,
        NumericType,
        StringType,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    column = named(raw)
    timely = isinstance(kind, DateType | TimestampType | TimestampNTZType)
    if isinstance(given, NumericType) and timely:
        column, given = column.cast("string"), StringType()
    if isinstance(given, StringType):
        if nested.supported(kind):
            leaves = decode.leaf_encodings(decode.kind_encodings("events"), encoding)
            pair = nested.pair(F.try_parse_json(column), kind, leaves)
            # A field the struct does not declare would be dropped: the value does not fit.
            return F.when(~nested.has_extra(pair), nested.value_of(pair))
        if isinstance(kind, StructType | ArrayType | MapType):
            return F.from_json(column, type_ddl(kind))
        if isinstance(kind, BinaryType):
            return precise.base64_bytes(column)  # padded only, as silver reads a bytea
        decoded = decode.decode(column, kind, encoding)
        return column.try_cast(kind) if decoded is None else decoded
    if given.simpleString() == kind.simpleString():  # the same type (nullability aside)
        return column.cast(kind)
    if not (_is_atomic(given) and _is_atomic(kind)):
        return F.lit(None).cast(kind)  # NullType: an absent column; nested: refused
    cast = column.try_cast(kind)
    return F.when(cast.cast(given).eqNullSafe(column), cast)


def _is_atomic(kind: DataType) -> bool:
    """A type whose cast can be checked by casting back (not NULL: an absent column)."""
    from pyspark.sql.types import ArrayType, MapType, NullType, StructType

    return not isinstance(kind, NullType | StructType | ArrayType | MapType)


def check_values(conformed: DataFrame, schema: StructType) -> Check | None:
    """Values that did not fit their column's type (present in the input, null after)."""
    from pyspark.sql import functions as F

    failed = [
        F.when(named(f"_lh_raw_{f.name}").isNotNull() & named(f.name).isNull(), F.lit(f.name))
        for f in schema.fields
    ]
    bad = conformed.withColumn(
        "_lh_bad", F.filter(F.array(*failed), lambda c: c.isNotNull())
    ).where(F.size("_lh_bad") > 0)
    return _check("values that do not fit their column's type", bad, ["_lh_bad", *_raw(schema)])


def check_window(
    rows: DataFrame, spec: OfflineTableSettings, start: datetime, end: datetime
) -> Check | None:
    """Records whose time is outside `[start, end)` or cannot be read."""
    from pyspark.sql import functions as F

    outside = rows.where(
        F.col(BUCKET).isNull() | (F.col(BUCKET) < F.lit(start)) | (F.col(BUCKET) >= F.lit(end))
    )
    return _check(
        f"records outside the window [{start.isoformat()}, {end.isoformat()}) or with a "
        f"{spec.time_column} that cannot be read as {spec.time_format}",
        outside,
        [spec.time_column],
    )


def check_keys(rows: DataFrame, keys: Sequence[str]) -> Check | None:
    """A key given twice would be served twice by the hybrid view."""
    if not keys:
        return None
    from pyspark.sql import functions as F

    twice = rows.groupBy(*[f"`{k}`" for k in keys]).count().where(F.col("count") > 1)
    return _check(f"keys given more than once ({', '.join(keys)})", twice, [*keys, "count"])


def check_rules(
    rows: DataFrame, silver: SilverTableSettings
) -> tuple[DataFrame, list[Check], dict[str, int]]:
    """The realtime table's expectations over the input: (rows without those a drop rule
    removes, the refusing failures of quarantine rules and of fail rules whose verdict fails,
    failures per rule)."""
    declared = rules.from_settings(silver.expectations)
    if not declared:
        return rows, [], {}
    evaluated = rules.evaluate(rows, declared).persist()
    per_rule = rules.metrics(evaluated, declared)
    counts = {name: failed for name, (_passed, failed) in per_rule.items()}
    refusing = []
    for rule in declared:
        passed, failed = per_rule[rule.name]
        if (
            rule.action in ("quarantine", "fail")
            and failed
            and not rules.tolerated(evaluated, rule, passed, failed)
        ):
            failing = evaluated.where(rules.fails(declared, rule.name))
            sample = [
                r.asDict()
                for r in failing.drop(*rules.mask_columns(len(declared))).limit(_SAMPLE).collect()
            ]
            refusing.append(
                Check(f"expectation {rule.name!r} ({rule.action})", counts[rule.name], sample)
            )
    dropped = evaluated.where(~rules.fails_any(declared, ("drop",))).drop(
        *rules.mask_columns(len(declared))
    )
    return dropped, refusing, counts


def content_hash(rows: DataFrame, columns: Sequence[str]) -> str:
    """A hash of the records whatever their order or file layout: the same rows hash alike."""
    from pyspark.sql import functions as F

    cols = [named(c) for c in columns]
    row = rows.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.xxhash64(*cols).cast("decimal(38,0)")).alias("a"),
        F.bit_xor(F.xxhash64(F.lit("salt"), *cols)).alias("b"),
    ).collect()[0]
    return hashlib.sha256(f"{row['n']}:{row['a']}:{row['b']}".encode()).hexdigest()


def with_buckets(rows: DataFrame, spec: OfflineTableSettings) -> DataFrame:
    return with_bucket(rows, spec)


def _check(name: str, bad: DataFrame, show: Sequence[str]) -> Check | None:
    sample = bad.select(*[f"`{c}`" for c in show]).limit(_SAMPLE).collect()
    if not sample:
        return None
    return Check(name, bad.count(), [r.asDict() for r in sample])


def _raw(schema: StructType) -> list[str]:
    return [f"_lh_raw_{f.name}" for f in schema.fields]


def window_closes(end: datetime, spec: OfflineTableSettings) -> datetime:
    return buckets.closes_at(end, spec.buffer_seconds)
