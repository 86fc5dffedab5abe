"""A hand-written bronze -> silver append job that keeps refine's promises on the bench's
orders (`silver_expectations.SCHEMA`), for `silver_refine.py --same-promises`: the baseline
bench/README.md's 2026-12-04 proposal asked for, beside the plain `from_json` job.

Per micro-batch (`foreachBatch`, available-now), written plainly, without the library:
- the value parsed once into a `map<string,string>`; a value that is not a JSON object goes to
  a quarantine table with its reason, not to silver;
- each declared column decoded from its text by its type, never rounded: a BIGINT from an
  integral number or numeric string (`42`, `"42"`, `42.0`), a DECIMAL(12,2) only where the
  text's value fits the scale exactly (`13.299` does not decode), a STRING as sent;
- a value that does not decode is NULL, its column named in `_lh_mistyped` and its text kept
  in `_rescued_data`, with every field the schema does not declare;
- the Kafka lineage columns;
- one aggregation over the cached batch for its counts (rows, unparsable, mistyped per column,
  records carrying undeclared fields), appended as one metrics row;
- the silver append under the batch's Delta transaction id (`txnAppId`/`txnVersion`).

What refine does and this job does not, so the figure is a floor for those promises: the
exact digits of a STRING column given a number (`exact_digits`), the other encodings
(epoch timestamps, base64 decimals), nested schemas, duplicate keys and lone surrogates,
schema drift, expectations, the decimal exactness past 18 fraction digits."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from lakehouse.core.settings import Settings

# silver_expectations.SCHEMA, column by column.
INTEGRAL = ("order_id", "customer_id", "ts")
DECIMAL = ("amount",)
TEXT = ("order_status",)
LINEAGE = ("topic", "partition", "offset", "kafka_timestamp")


def decoded(text: Column, name: str) -> Column:
    """The column's value from its text, NULL where it does not decode exactly. A plain
    integer text takes the cheap cast; only other texts are read as decimals."""
    from pyspark.sql import functions as F

    if name in TEXT:
        return text
    if name in INTEGRAL:
        wide = text.try_cast("decimal(38,18)")
        exact = (wide == F.floor(wide)) & wide.between(-(2**63), 2**63 - 1)
        return F.coalesce(text.try_cast("bigint"), F.when(exact, wide.cast("bigint")))
    wide = text.try_cast("decimal(38,18)")
    narrow = wide.try_cast("decimal(12,2)")
    return F.when(narrow == wide, narrow)


def rows_of(batch: DataFrame) -> DataFrame:
    """The batch's records parsed and decoded, with `_lh_mistyped`, `_rescued_data`,
    `_lh_parsed` (False: not a JSON object) and the lineage. No higher-order function runs on
    a plain row (Spark interprets their lambdas): the undeclared fields are counted with
    `map_contains_key`, and the rescued map is built only for rows that need it."""
    from pyspark.sql import functions as F

    declared = (*INTEGRAL, *DECIMAL, *TEXT)
    m = F.col("m")
    parsed = batch.select(
        F.from_json(F.col("value").cast("string"), "map<string,string>").alias("m"),
        F.col("value").cast("string").alias("raw"),
        *LINEAGE,
    )
    columns = {n: decoded(m[n], n) for n in declared}
    failed = [F.when(m[n].isNotNull() & c.isNull(), F.lit(n)) for n, c in columns.items()]
    mistyped = F.array_compact(F.array(*failed))
    present = sum((F.map_contains_key(m, n).cast("int") for n in declared), F.lit(0))
    undeclared = F.size(m) - present
    rescued = F.map_filter(
        m, lambda k, _v: ~k.isin(*declared) | F.array_contains(F.col("_lh_mistyped"), k)
    )
    return (
        parsed.select(
            *[c.alias(n) for n, c in columns.items()],
            mistyped.alias("_lh_mistyped"),
            m.isNotNull().alias("_lh_parsed"),
            undeclared.alias("_undeclared"),
            "m",
            "raw",
            *LINEAGE,
        )
        .withColumn(
            "_rescued_data",
            F.when((F.col("_undeclared") > 0) | (F.size("_lh_mistyped") > 0), F.to_json(rescued)),
        )
        .drop("m")
    )


def promises_append(spark: SparkSession, _settings: Settings, bronze: str, work: str) -> int:
    """The job: bronze's change feed from version 0 into a fresh silver table, its quarantine
    and its metrics (`silver_refine.Job`)."""
    from pyspark.sql import functions as F
    from silver_refine import drain, feed

    target = f"{work}/promises_{uuid.uuid4().hex[:10]}"
    app_id = uuid.uuid4().hex

    def batch_commit(batch: DataFrame, batch_id: int) -> None:
        rows = rows_of(batch).persist()
        try:
            counts = rows.agg(
                F.count(F.lit(1)).alias("rows"),
                F.count_if(~F.col("_lh_parsed")).alias("unparsable"),
                F.count_if(F.col("_undeclared") > 0).alias("undeclared"),
                *[
                    F.count_if(F.array_contains("_lh_mistyped", n)).alias(f"mistyped_{n}")
                    for n in (*INTEGRAL, *DECIMAL)
                ],
            ).first()
            assert counts is not None
            good = rows.where("_lh_parsed").drop("_lh_parsed", "_undeclared", "raw")
            (
                good.write.format("delta")
                .mode("append")
                .option("txnAppId", app_id)
                .option("txnVersion", batch_id)
                .save(target)
            )
            if counts["unparsable"]:
                bad = rows.where("NOT _lh_parsed").select(
                    F.lit(batch_id).alias("batch_id"),
                    F.lit("not a JSON object").alias("reason"),
                    "raw",
                    *LINEAGE,
                )
                bad.write.format("delta").mode("append").save(f"{target}_quarantine")
            metrics = spark.createDataFrame([counts]).withColumn("batch_id", F.lit(batch_id))
            metrics.write.format("delta").mode("append").save(f"{target}_metrics")
        finally:
            rows.unpersist()

    return drain(feed(spark, bronze), batch_commit, f"{target}_checkpoint")
