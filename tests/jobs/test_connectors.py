"""`lakehouse connectors apply|status|delete` as a user runs them, against the real Kafka Connect
worker, Debezium and PostgreSQL: the connector a source declares in YAML is created, streams the
table into the source's topic, is applied again without a second snapshot, reports its state,
and is deleted with its replication slot."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from lakehouse.connectors.debezium import delete_connector, publication_name
from lakehouse.connectors.publication import check_publication
from lakehouse.connectors.rest import connector_url, http
from lakehouse.connectors.scales import check_decimal_scales, declared_decimals
from lakehouse.connectors.sources import connector_config
from lakehouse.connectors.units import check_time_units
from lakehouse.connectors.unsent import check_unsent
from lakehouse.core import kafka
from lakehouse.core.errors import EXIT_FAILED, EXIT_USAGE, ServiceUnreachable, UsageError
from lakehouse.core.settings import Settings, load_settings
from tests.bronze.helpers import wait_for_records
from tests.conftest import pg_connect
from tests.jobs.helpers import conf_overlay, last_line, overlay_env, run_cli


def slots(settings: Settings, slot: str) -> int:
    with pg_connect(settings) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return int(found[0]) if found else 0


def one_table(
    table: str, connector: Mapping[str, object], schema: str, **source: object
) -> dict[str, object]:
    """A conf overlay: the CDC source `cdc_<table>` (`source` adds settings) with `connector`,
    reading its topics, and the SCD1 silver table `s_<table>` of `schema` over it (`encodings`
    in `source` go to the table)."""
    prefix, tables = connector["topic_prefix"], connector["tables"]
    assert isinstance(tables, list)
    encodings = source.pop("encodings", {})
    return {
        "sources": {
            f"cdc_{table}": {
                "kind": "cdc",
                "topics": [f"{prefix}.{t}" for t in tables],
                "connector": connector,
                **source,
            }
        },
        "silver": {
            f"s_{table}": {
                "source": f"cdc_{table}",
                "mode": "scd1",
                "keys": ["id"],
                "schema": schema,
                "encodings": encodings,
            }
        },
    }


def test_a_declared_connector_is_applied_shown_applied_again_and_deleted(
    kafka_up: Settings, tmp_path: Path
) -> None:
    table = f"t_{uuid.uuid4().hex[:8]}"
    source, prefix, name = f"cdc_{table}", f"p{table[-8:]}", f"conn-{table}"
    topic, slot = f"{prefix}.public.{table}", f"dbz_conn_{table}"
    declared = {
        "kind": "cdc",
        "topics": [topic],
        "connector": {"name": name, "topic_prefix": prefix, "tables": [f"public.{table}"]},
    }
    conf = conf_overlay(tmp_path, {"sources": {source: declared}})
    env = overlay_env(kafka_up, conf)
    with pg_connect(kafka_up) as conn:
        conn.execute(f"CREATE TABLE public.{table} (id int PRIMARY KEY, name text)")
        conn.execute(f"INSERT INTO public.{table} VALUES (1, 'a'), (2, 'b')")
    kafka.ensure_topic(kafka_up.kafka, topic, partitions=1)
    try:
        done = run_cli(["connectors", "apply", source], env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.splitlines() == [f"{source}: connector {name} running -> {topic}"]
        wait_for_records(kafka_up, topic, 2)  # the snapshot of the two rows

        status, config = http("GET", f"{connector_url(kafka_up, name)}/config")
        assert status == 200
        assert {k: config[k] for k in ("slot.name", "table.include.list", "topic.prefix")} == {
            "slot.name": slot,
            "table.include.list": f"public.{table}",
            "topic.prefix": prefix,
        }
        assert (config["decimal.handling.mode"], config["time.precision.mode"]) == (
            "precise",
            "adaptive",
        )

        again = run_cli(["connectors", "apply", source], env)
        assert again.returncode == 0, again.stderr[-3000:]
        with pg_connect(kafka_up) as conn:
            conn.execute(f"UPDATE public.{table} SET name = 'b2' WHERE id = 2")
        wait_for_records(kafka_up, topic, 3)
        # Applied again, it streamed on: no second snapshot of the rows.
        assert sum(kafka.end_offsets(kafka_up.kafka, topic).values()) == 3

        shown = run_cli(["connectors", "status"], env)
        assert shown.returncode == 0, shown.stderr[-3000:]
        assert f"{source}: connector {name} RUNNING" in shown.stdout.splitlines()

        unknown = run_cli(["connectors", "status", "nope"], env)
        assert unknown.returncode == EXIT_USAGE
        assert last_line(unknown).endswith(
            f"source(s) nope declare no connector; those that do: {source}, customers"
        )

        gone = run_cli(["connectors", "delete", source, "--drop-slot"], env)
        assert gone.returncode == 0, gone.stderr[-3000:]
        assert gone.stdout.splitlines() == [
            f"{source}: connector {name} deleted (slot {slot} dropped)"
        ]
        after = run_cli(["connectors", "status", source], env)
        assert after.stdout.splitlines() == [f"{source}: connector {name} not registered"]
        assert slots(kafka_up, slot) == 0
    finally:
        delete_connector(kafka_up, name, slot_name=slot)
        with pg_connect(kafka_up) as conn:
            conn.execute(f"DROP TABLE IF EXISTS public.{table}")


def test_a_connect_worker_that_cannot_be_reached_ends_the_command_with_one_line(
    kafka_up: Settings, tmp_path: Path
) -> None:
    conf = conf_overlay(tmp_path, {})
    env = {**overlay_env(kafka_up, conf), "LAKEHOUSE__CONNECT__URL": "http://127.0.0.1:9"}

    done = run_cli(["connectors", "status", "customers"], env)

    # Exit 1, not 2: the configuration may be right and the worker down for a while (a
    # scheduler's retry may succeed).
    assert done.returncode == EXIT_FAILED, done.stderr[-3000:]
    assert done.stdout == ""
    assert last_line(done) == (
        "lakehouse connectors: Kafka Connect is not reachable at "
        "http://127.0.0.1:9/connectors/lakehouse-customers/status ([Errno 111] Connection "
        "refused); is the worker running? (dev stack: `lakehouse services start connect`)"
    )
    assert "Traceback" not in done.stderr


def test_a_silver_decimal_at_another_scale_than_its_postgres_column_is_refused_before_apply(
    kafka_up: Settings, tmp_path: Path
) -> None:
    """Precise decimals are unscaled digits: DECIMAL(12,2) over numeric(12,3) would store
    13.299 as 132.99. `connectors apply` refuses it, and creates no connector."""
    table = f"t_{uuid.uuid4().hex[:8]}"
    source, prefix, name = f"cdc_{table}", f"p{table[-8:]}", f"conn-{table}"
    tables = [f"public.{table}"]
    connector: dict[str, object] = {"name": name, "topic_prefix": prefix, "tables": tables}

    def declare(
        amount: str,
        mode: str = "precise",
        cash: str = "DECIMAL(12,2)",
        nums: str = "ARRAY<DECIMAL(12,3)>",
    ) -> dict[str, object]:
        """`amount`: what follows the column's name."""
        schema = (
            f"id INT, amount{amount}, price DECIMAL(10, 2), free DECIMAL(20,4), cash {cash}, "
            f"nums {nums}"
        )
        return one_table(table, connector, schema, decimal_handling_mode=mode)

    with pg_connect(kafka_up) as conn:
        conn.execute(
            f"CREATE TABLE public.{table} "
            "(id int PRIMARY KEY, amount numeric(12,3), price numeric(10,2), free numeric, "
            "cash money, nums numeric(12,3)[])"
        )
    try:
        refused = run_cli(
            ["connectors", "apply", source],
            overlay_env(kafka_up, conf_overlay(tmp_path / "a", declare(" DECIMAL(12,2)"))),
        )
        assert refused.returncode == EXIT_USAGE, refused.stderr[-3000:]
        assert last_line(refused).endswith(
            f"silver.s_{table}.schema: amount is DECIMAL(12,2) but public.{table}.amount has "
            "scale 3; Debezium's precise decimals carry no scale, so silver would read every "
            "value at scale 2 (off by a factor of 10^1). Declare amount DECIMAL(p,3), or set "
            "the source's decimal_handling_mode: string"
        )
        assert http("GET", connector_url(kafka_up, name))[0] == 404
        # The same scale, or text decimals (read exactly, or quarantined): nothing to refuse.
        for amount, mode in ((" DECIMAL(14,3)", "precise"), (" DECIMAL(12,2)", "string")):
            conf = conf_overlay(tmp_path / f"{mode}{amount[-2]}", declare(amount, mode))
            settings = load_settings("test", conf)
            check_decimal_scales(settings, source)

        def refusal(column: str, declared: str, sent: int, scale: int, fix: str) -> str:
            return (
                f"silver.s_{table}.schema: {column} is {declared} but public.{table}.{column} "
                f"has scale {sent}; Debezium's precise decimals carry no scale, so silver would "
                f"read every value at scale {scale} (off by a factor of 10^1). Declare {column} "
                f"{fix}, or set the source's decimal_handling_mode: string"
            )

        # A money column is sent at the connector's money.fraction.digits (2 by default); an
        # array's elements as the column would be.
        refusals = [
            ({"cash": "DECIMAL(12,3)"}, ("cash", "DECIMAL(12,3)", 2, 3, "DECIMAL(p,2)")),
            (
                {"nums": "ARRAY<DECIMAL(12,2)>"},
                ("nums", "ARRAY<DECIMAL(12,2)>", 3, 2, "ARRAY<DECIMAL(p,3)>"),
            ),
        ]
        for i, (changed, expected) in enumerate(refusals):
            conf = conf_overlay(tmp_path / f"r{i}", declare(" DECIMAL(12,3)", **changed))
            with pytest.raises(UsageError) as refused_here:
                check_decimal_scales(load_settings("test", conf), source)
            assert str(refused_here.value) == refusal(*expected)
        connector["config"] = {"money.fraction.digits": "3"}
        conf = conf_overlay(tmp_path / "m3", declare(" DECIMAL(12,3)", cash="DECIMAL(12,3)"))
        check_decimal_scales(load_settings("test", conf), source)
        del connector["config"]
        # Debezium matches the table list ignoring case; `name: type` is DDL too.
        tables[:] = [f"PUBLIC.{table.upper()}"]
        settings = load_settings("test", conf_overlay(tmp_path / "b", declare(": DECIMAL(12,2)")))
        with pytest.raises(UsageError, match=r"amount is DECIMAL\(12,2\) but public\."):
            check_decimal_scales(settings, source)
        # A connector pointed at another database: not compared (nothing this can reach).
        connector["config"] = {"database.hostname": "db.internal"}
        settings = load_settings("test", conf_overlay(tmp_path / "c", declare(" DECIMAL(12,2)")))
        check_decimal_scales(settings, source)
        # PostgreSQL down: one line naming it, a retry may succeed.
        del connector["config"]
        settings = load_settings("test", conf_overlay(tmp_path / "d", declare(" DECIMAL(12,2)")))
        down = replace(settings, postgres=replace(settings.postgres, port=9))
        with pytest.raises(ServiceUnreachable, match=r"PostgreSQL at 127.0.0.1:9 \(postgres:\)"):
            check_decimal_scales(down, source)
    finally:
        delete_connector(kafka_up, name, slot_name=f"dbz_conn_{table}")  # had it been applied
        with pg_connect(kafka_up) as conn:
            conn.execute(f"DROP TABLE IF EXISTS public.{table}")


def test_a_timestamp_or_time_read_in_another_unit_than_the_connector_sends_is_refused(
    kafka_up: Settings, tmp_path: Path
) -> None:
    """Adaptive mode sends a timestamp(3) in milliseconds: read as the default microseconds,
    every value would be a day in January 1970. `connectors apply` refuses it, naming the
    encoding to declare, and creates no connector; read in the unit sent, for each mode,
    nothing is refused (`timestamptz` is ISO text, read by any encoding)."""
    table = f"t_{uuid.uuid4().hex[:8]}"
    source, prefix, name = f"cdc_{table}", f"p{table[-8:]}", f"conn-{table}"
    connector = {"name": name, "topic_prefix": prefix, "tables": [f"public.{table}"]}

    def declare(encodings: dict[str, str], mode: str = "adaptive") -> dict[str, object]:
        schema = (
            "id INT, at3 TIMESTAMP, at6 TIMESTAMP, at0 TIMESTAMP, clock3 STRING, clock STRING, "
            "zoned TIMESTAMP, stamps3 ARRAY<TIMESTAMP>"
        )
        return one_table(table, connector, schema, time_precision_mode=mode, encodings=encodings)

    def settings_of(path: str, encodings: dict[str, str], mode: str = "adaptive") -> Settings:
        return load_settings("test", conf_overlay(tmp_path / path, declare(encodings, mode)))

    with pg_connect(kafka_up) as conn:
        conn.execute(
            f"CREATE TABLE public.{table} (id int PRIMARY KEY, at3 timestamp(3), "
            "at6 timestamp, at0 timestamp(0), clock3 time(3), clock time, zoned timestamptz, "
            "stamps3 timestamp(3)[])"
        )
    try:
        refused = run_cli(
            ["connectors", "apply", source],
            overlay_env(kafka_up, conf_overlay(tmp_path / "a", declare({}))),
        )
        assert refused.returncode == EXIT_USAGE, refused.stderr[-3000:]
        assert last_line(refused).endswith(
            f"silver.s_{table}: at3 is read as epoch_us but public.{table}.at3 is "
            "timestamp(3), which the connector sends in ms (time_precision_mode: adaptive): "
            "every value would be read in the wrong unit. Declare encodings: {at3: epoch_ms}"
        )
        assert http("GET", connector_url(kafka_up, name))[0] == 404

        def refusal(column: str, reads: str, pg: str, unit: str, mode: str, right: str) -> str:
            return (
                f"silver.s_{table}: {column} is read as {reads} but public.{table}.{column} is "
                f"{pg}, which the connector sends in {unit} (time_precision_mode: {mode}): "
                f"every value would be read in the wrong unit. Declare encodings: "
                f"{{{column}: {right}}}"
            )

        both = {"at3": "epoch_ms", "at0": "epoch_ms"}
        refusals = [
            ({"at3": "epoch_ms"}, "adaptive", ("at0", "epoch_us", "timestamp(0)", "ms")),
            ({**both, "clock3": "time_us"}, "adaptive", ("clock3", "time_us", "time(3)", "ms")),
            (
                {**both, "clock3": "time_ms"},
                "adaptive_time_microseconds",
                ("clock3", "time_ms", "time(3)", "us"),
            ),
            ({"at6": "epoch_us"}, "connect", ("at6", "epoch_us", "timestamp(6)", "ms")),
            ({**both, "at3": "epoch_s"}, "adaptive", ("at3", "epoch_s", "timestamp(3)", "ms")),
            # An array's elements are sent as the column would be.
            (
                {**both, "clock3": "time_ms"},
                "adaptive",
                ("stamps3", "epoch_us", "timestamp(3)[]", "ms"),
            ),
        ]
        for i, (encodings, mode, (column, reads, pg, unit)) in enumerate(refusals):
            right = ("epoch_" if reads.startswith("epoch") else "time_") + unit
            with pytest.raises(UsageError) as refused_here:
                check_time_units(settings_of(f"r{i}", encodings, mode), source)
            assert str(refused_here.value) == refusal(column, reads, pg, unit, mode, right)
        accepted = [
            (
                {**both, "clock3": "time_ms", "clock": "time_us", "stamps3": "epoch_ms"},
                "adaptive",
            ),
            (
                {**both, "clock3": "time_us", "zoned": "epoch_ns", "stamps3": "epoch_ms"},
                "adaptive_time_microseconds",
            ),
            ({"clock3": "time_ms", "clock": "time_ms"}, "connect"),
        ]
        for i, (encodings, mode) in enumerate(accepted):
            check_time_units(settings_of(f"ok{i}", encodings, mode), source)
    finally:
        delete_connector(kafka_up, name, slot_name=f"dbz_conn_{table}")  # had it been applied
        with pg_connect(kafka_up) as conn:
            conn.execute(f"DROP TABLE IF EXISTS public.{table}")


def test_a_silver_column_the_connector_would_never_send_is_refused(
    kafka_up: Settings, tmp_path: Path
) -> None:
    """A silver column no captured row carries would stay NULL: a typo, a column the
    connector's column lists leave out, or an array type Debezium 3.7 does not send (it leaves
    money[] and interval[] out of its records and sends bit(n)[] as null; scalars of those
    types are sent). Fields Debezium adds (`__deleted`) are not PostgreSQL's."""
    table = f"t_{uuid.uuid4().hex[:8]}"
    source, prefix = f"cdc_{table}", f"p{table[-8:]}"
    base = "id INT, cash DECIMAL(12,2), span BIGINT, flag BINARY, note STRING, __deleted STRING"

    def settings_of(path: str, more: str = "", config: dict[str, str] | None = None) -> Settings:
        connector = {"topic_prefix": prefix, "tables": [f"public.{table}"], "config": config or {}}
        overlay = one_table(table, connector, base + more)
        return load_settings("test", conf_overlay(tmp_path / path, overlay))

    domain, pair = f"amount_{table}", f"pair_{table}"
    with pg_connect(kafka_up) as conn:
        conn.execute(f"CREATE DOMAIN {domain} AS numeric(12,2)")
        conn.execute(f"CREATE TYPE {pair} AS (a int, b text)")
        conn.execute(
            f"CREATE TABLE public.{table} (id int PRIMARY KEY, cash money, span interval, "
            "flag bit(3), note text, cashes money[], spans interval[], flags bit(3)[], "
            f"total numeric(12,2) GENERATED ALWAYS AS (length(note) * 2) STORED, "
            f"amount {domain}, amounts {domain}[], pair {pair}, pairs {pair}[], "
            "grid text[][], cube int[][][])"
        )
    where = f"public.{table}"
    try:
        # Seen through the real connector: a generated column is in the snapshot's rows
        # only (logical replication does not publish it), so every change would set it
        # NULL; an array of a domain, a composite and an array of composites are in no
        # record (a column of the domain is sent); a 2-D array's elements arrive as nulls.
        with pytest.raises(UsageError) as generated:
            check_unsent(settings_of("generated", ", total DECIMAL(12,2)"), source)
        assert str(generated.value) == (
            f"silver.s_{table}.schema: total is read from {where}.total, a generated column, "
            "which PostgreSQL does not publish to the connector: it would be NULL after every "
            "change. Remove total from the schema, and compute it downstream"
        )
        with pytest.raises(UsageError) as domains:
            check_unsent(settings_of("domains", ", amounts ARRAY<DECIMAL(12,2)>"), source)
        assert str(domains.value) == (
            f"silver.s_{table}.schema: amounts is read from {where}.amounts, an array of the "
            f"domain {domain}, which Debezium leaves out of every record: it would stay NULL. "
            "Remove amounts from the schema, or keep the values in PostgreSQL as numeric[]"
        )
        check_unsent(settings_of("domain", ", amount DECIMAL(12,2)"), source)
        for column, ddl in (("pair", "STRUCT<a: INT, b: STRING>"), ("pairs", "ARRAY<STRING>")):
            with pytest.raises(UsageError) as composite:
                check_unsent(settings_of(column, f", {column} {ddl}"), source)
            assert str(composite.value) == (
                f"silver.s_{table}.schema: {column} is read from {where}.{column}, of the "
                f"composite type {pair}, which Debezium leaves out of every record: it would "
                f"stay NULL. Remove {column} from the schema, or keep the fields in PostgreSQL "
                "as columns of their own, or as jsonb"
            )
        for column, ddl in (("grid", "ARRAY<ARRAY<STRING>>"), ("cube", "ARRAY<INT>")):
            with pytest.raises(UsageError) as dimensions:
                check_unsent(settings_of(column, f", {column} {ddl}"), source)
            assert str(dimensions.value) == (
                f"silver.s_{table}.schema: {column} is read from {where}.{column}, an array of "
                "more than one dimension, whose elements Debezium sends as nulls (text ones as "
                "Java object names): it would be stored wrong. Remove "
                f"{column} from the schema, or keep the values in PostgreSQL as jsonb"
            )
        dropped, nulled = "leaves it out of every record", "sends it as null"
        cases = [
            ("cashes ARRAY<DECIMAL(12,2)>", "money[]", dropped, "numeric(p,s)[]"),
            ("spans ARRAY<BIGINT>", "interval[]", dropped, "text[]"),
            ("flags ARRAY<BINARY>", "bit[]", nulled, "text[] or varbit"),
        ]
        for i, (more, pg, what, instead) in enumerate(cases):
            column = more.split()[0]
            with pytest.raises(UsageError) as here:
                check_unsent(settings_of(f"a{i}", f", {more}"), source)
            assert str(here.value) == (
                f"silver.s_{table}.schema: {column} is read from {where}.{column}, a {pg}, "
                f"which Debezium {what}: it would stay NULL. Remove {column} from the schema, "
                f"or keep the values in PostgreSQL as {instead}"
            )
        with pytest.raises(UsageError) as typo:
            check_unsent(settings_of("typo", ", emial STRING"), source)
        assert str(typo.value) == (
            f"silver.s_{table}.schema: emial is not a column of {where}: it would stay NULL. "
            "Fix the name, or add the column in PostgreSQL before applying the connector"
        )
        # Silver reads a field by its exact name (PostgreSQL folds `Note` to note).
        with pytest.raises(UsageError) as case:
            check_unsent(settings_of("case", ", `Flags` ARRAY<BINARY>"), source)
        assert str(case.value) == (
            f"silver.s_{table}.schema: Flags is {where}.flags in PostgreSQL, and silver reads "
            "a field by its name as sent, case and all: it would stay NULL. Name the column flags"
        )
        left_out = (
            f"silver.s_{table}.schema: cash is left out by the connector's "
            f"column.include.list/column.exclude.list ({where}.cash): it would stay NULL. "
            "Remove cash from the schema, or capture the column"
        )
        for i, config in enumerate(
            [
                {"column.exclude.list": f"public\\.{table}\\.(cash|other)"},
                {"column.include.list": f"PUBLIC.{table.upper()}.(id|span|flag|note)"},
            ]
        ):
            with pytest.raises(UsageError) as excluded:
                check_unsent(settings_of(f"x{i}", "", config), source)
            assert str(excluded.value) == left_out
        check_unsent(settings_of("ok"), source)
        check_unsent(settings_of("kept", "", {"column.exclude.list": "public.other.cash"}), source)
    finally:
        with pg_connect(kafka_up) as conn:
            conn.execute(f"DROP TABLE IF EXISTS public.{table}")
            conn.execute(f"DROP DOMAIN IF EXISTS {domain}")
            conn.execute(f"DROP TYPE IF EXISTS {pair}")


def test_a_table_whose_changes_the_publication_would_not_send_as_its_own_is_refused(
    kafka_up: Settings, tmp_path: Path
) -> None:
    """The connectors publish a partitioned table's changes via its root (else the connector
    drops them: tests/silver/test_cdc_partitioned.py). A config that turns that off, or a
    publication the user manages that does not do it, is refused before anything streams, as
    is a table such a publication does not publish as itself and a partition a publication of
    all tables publishes as its root; a partition captured by its own name is not affected."""
    table = f"t_{uuid.uuid4().hex[:8]}"
    source, prefix = f"cdc_{table}", f"p{table[-8:]}"
    publication = publication_name(f"{table}_slot")

    def check(path: str, config: dict[str, str], tables: list[str]) -> None:
        """check_publication with the config `apply` would give the connector."""
        connector = {"topic_prefix": prefix, "tables": tables, "config": config}
        overlay = one_table(table, connector, "id INT, day DATE")
        settings = load_settings("test", conf_overlay(tmp_path / path, overlay))
        _, applied = connector_config(settings, source, settings.sources[source])
        check_publication(settings, source, applied)

    managed = {
        "publication.autocreate.mode": "disabled",
        "publication.name": publication,
        "slot.name": f"{table}_slot",
    }
    with pg_connect(kafka_up) as conn:
        conn.execute(
            f"CREATE TABLE public.{table} (id int, day date, PRIMARY KEY (id, day)) "
            "PARTITION BY RANGE (day)"
        )
        conn.execute(
            f"CREATE TABLE public.{table}_p PARTITION OF public.{table} "
            "FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')"
        )
        conn.execute(f"CREATE PUBLICATION {publication} FOR TABLE public.{table}")
    parent, partition = [f"public.{table}"], [f"public.{table}_p"]
    upper = [f"PUBLIC.{table.upper()}"]
    lost = (
        f"public.{table} is partitioned: PostgreSQL would publish its changes as its "
        "partitions, which the connector drops (only the snapshot would arrive)"
    )
    try:
        with pytest.raises(UsageError) as off:
            # Named as Debezium matches it, ignoring case.
            check("off", {"publish.via.partition.root": "false"}, upper)
        assert str(off.value) == (
            f"sources.{source}.connector.config.publish.via.partition.root: {lost}. "
            "Remove the setting"
        )
        with pytest.raises(UsageError) as user_managed:
            check("managed", managed, parent)
        assert str(user_managed.value) == (
            f"sources.{source}.connector: publication {publication}: {lost}. Run ALTER "
            f"PUBLICATION {publication} SET (publish_via_partition_root = true) in PostgreSQL"
        )
        # Accepted: the default, a managed publication that publishes via the root, and a
        # partition captured by its own name.
        check("default", {}, parent)
        with pg_connect(kafka_up) as conn:
            conn.execute(f"ALTER PUBLICATION {publication} SET (publish_via_partition_root = true)")
        check("via_root", managed, parent)
        check("leaf", {"publish.via.partition.root": "false"}, partition)

        # A managed publication must publish each captured table as itself: the partition
        # it publishes as its root, and a table it lacks, would receive no change.
        with pytest.raises(UsageError) as as_root:
            check("as_root", managed, partition)
        assert str(as_root.value) == (
            f"sources.{source}.connector: publication {publication} does not publish "
            f"public.{table}_p as itself: the connector would receive none of its changes "
            f"(only the snapshot would arrive). Run ALTER PUBLICATION {publication} ADD TABLE "
            f"public.{table}_p in PostgreSQL, or capture the partitioned table it belongs to"
        )
        # Debezium's `no_tables` mode leaves what the publication holds to the user too.
        with pytest.raises(UsageError) as no_tables:
            check("no_tables", {**managed, "publication.autocreate.mode": "no_tables"}, partition)
        assert str(no_tables.value) == str(as_root.value)
        with pg_connect(kafka_up) as conn:
            conn.execute(f"CREATE TABLE public.{table}_other (id int PRIMARY KEY)")
        with pytest.raises(UsageError) as absent:
            check("absent", managed, [*parent, f"public.{table}_other"])
        assert str(absent.value) == (
            f"sources.{source}.connector: publication {publication} does not publish "
            f"public.{table}_other as itself: the connector would receive none of its changes "
            f"(only the snapshot would arrive). Run ALTER PUBLICATION {publication} ADD TABLE "
            f"public.{table}_other in PostgreSQL"
        )
        # A publication of all tables via the root sends a partition's changes as its root.
        with pytest.raises(UsageError) as all_tables:
            check("all_tables", {"publication.autocreate.mode": "all_tables"}, partition)
        assert str(all_tables.value) == (
            f"sources.{source}.connector: public.{table}_p is a partition: a publication of "
            "all tables publishing via the root sends its changes as its partitioned table, "
            "which the connector drops (only the snapshot would arrive). Capture the "
            "partitioned table, or set publication.autocreate.mode: filtered"
        )
        # Accepted: a partition the lakehouse's own (filtered) publication names.
        check("filtered_leaf", {}, partition)
    finally:
        with pg_connect(kafka_up) as conn:
            conn.execute(f"DROP PUBLICATION IF EXISTS {publication}")
            conn.execute(f"DROP TABLE IF EXISTS public.{table}")
            conn.execute(f"DROP TABLE IF EXISTS public.{table}_other")


@pytest.mark.pure
def test_only_top_level_decimal_columns_of_the_ddl_are_compared() -> None:
    ddl = (
        "id INT, `amount` DECIMAL(12, 2), line STRUCT<price: DECIMAL(9,1), qty INT>, "
        "`a, b` numeric(5,0), tags MAP<STRING, DECIMAL(3,1)>, note STRING, dec DEC(4,4), "
        "whole DECIMAL(7), plain decimal, kept DECIMAL(6,2) NOT NULL, decimals STRING, "
        "said STRING COMMENT 'a (b, <c', c1: DECIMAL(3,2), c2:decimal(4,1), `x:y` DEC(2,1), "
        "nums ARRAY<DECIMAL(5,1)>, more array < decimal(6, 2) > NOT NULL, deep ARRAY<ARRAY<DEC>>"
    )
    assert declared_decimals(ddl) == {
        "amount": (12, 2),
        "a, b": (5, 0),
        "dec": (4, 4),
        "whole": (7, 0),
        "plain": (10, 0),
        "kept": (6, 2),
        "c1": (3, 2),
        "c2": (4, 1),
        "x:y": (2, 1),
    }
    assert declared_decimals(ddl, arrays=True) == {"nums": (5, 1), "more": (6, 2)}
