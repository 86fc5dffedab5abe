"""Settings load, layer and fail loudly, naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.core.settings import Secret, Settings, SettingsError, load_settings

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`


def write_conf(tmp_path: Path, base: str, overlay: str | None = None, env: str = "dev") -> Path:
    conf = tmp_path / "conf"
    (conf / "base").mkdir(parents=True)
    (conf / "base" / "lakehouse.yml").write_text(base)
    if overlay is not None:
        (conf / env).mkdir()
        (conf / env / "lakehouse.yml").write_text(overlay)
    return conf


BASE = """
storage:
  root: /tmp/lake
kafka:
  bootstrap_servers: 127.0.0.1:19092
postgres:
  port: 15432
  password: ${TEST_PG_PASSWORD}
"""


@pytest.fixture(autouse=True)
def _isolate_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))  # no .env of the checkout leaks in
    monkeypatch.setenv("TEST_PG_PASSWORD", "s3cret-value")
    monkeypatch.delenv("LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS", raising=False)


def test_layers_base_overlay_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = write_conf(tmp_path, BASE, "spark:\n  shuffle_partitions: 8\n")
    monkeypatch.setenv("LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:29092")
    settings = load_settings("dev", conf_dir=conf)
    assert isinstance(settings, Settings)
    assert (settings.env, settings.storage.root, settings.spark.shuffle_partitions) == (
        "dev",
        "/tmp/lake",
        8,
    )
    assert settings.kafka.bootstrap_servers == "127.0.0.1:29092"
    assert settings.postgres.require_password() == "s3cret-value"


def test_frozen(tmp_path: Path) -> None:
    settings = load_settings("dev", conf_dir=write_conf(tmp_path, BASE))
    with pytest.raises(AttributeError):
        settings.storage.root = "elsewhere"  # type: ignore[misc]


def test_secret_never_printed(tmp_path: Path) -> None:
    settings = load_settings("dev", conf_dir=write_conf(tmp_path, BASE))
    assert "s3cret-value" not in repr(settings)
    assert "s3cret-value" not in str(settings.postgres)
    assert repr(Secret("x")) == "Secret('********')"


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, BASE, "kafka:\n  bootstrap_server: typo:9092\n")
    with pytest.raises(SettingsError) as err:
        load_settings("dev", conf_dir=conf)
    assert str(err.value).startswith("conf/dev/lakehouse.yml: unknown key 'kafka.bootstrap_server'")
    assert "bootstrap_servers" in str(err.value)  # the fix: the allowed names


def test_a_negative_compaction_interval_names_the_key_and_the_values_allowed(
    tmp_path: Path,
) -> None:
    conf = write_conf(tmp_path, BASE, "storage:\n  compact_every: -1\n")
    with pytest.raises(SettingsError) as err:
        load_settings("dev", conf_dir=conf)
    assert str(err.value) == (
        "conf/dev/lakehouse.yml: 'storage': 'compact_every' must be a number of commits, "
        "or 0 for never; got -1"
    )


def test_unknown_section(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, BASE + "kafak:\n  x: 1\n")
    with pytest.raises(SettingsError, match=r"conf/base/lakehouse.yml: unknown key 'kafak'"):
        load_settings("dev", conf_dir=conf)


def test_wrong_type_names_file_and_key(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, BASE, "postgres:\n  port: fifteen\n")
    with pytest.raises(
        SettingsError,
        match=r"^conf/dev/lakehouse.yml: 'postgres.port' must be a number, got 'fifteen'$",
    ):
        load_settings("dev", conf_dir=conf)


def test_wrong_type_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEHOUSE__SPARK__UI_ENABLED", "maybe")
    with pytest.raises(
        SettingsError,
        match=r"environment variable LAKEHOUSE__SPARK__UI_ENABLED: 'spark.ui_enabled'",
    ):
        load_settings("dev", conf_dir=write_conf(tmp_path, BASE))


def test_an_option_split_at_its_dots_is_refused_not_passed_on_as_a_printed_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment variable splits an option's name at its dots (`spark.sql.x` under
    `spark.conf` arrived as the option `spark` = "{'sql': ...}", and Spark never saw it); a
    YAML mapping under an option does the same. Both are refused, naming the key."""
    monkeypatch.setenv("LAKEHOUSE__SPARK__CONF__SPARK__SQL__ADAPTIVE__ENABLED", "false")
    with pytest.raises(SettingsError) as from_env:
        load_settings("dev", conf_dir=write_conf(tmp_path / "env", BASE))
    assert str(from_env.value) == (
        "environment variable LAKEHOUSE__SPARK__CONF__SPARK__SQL__ADAPTIVE__ENABLED: "
        "'spark.conf.spark' must be a "
        "value (a string, number or boolean), got a mapping: write the option's whole dotted "
        "name as one key in a YAML file (an environment variable splits it at its dots)"
    )
    monkeypatch.delenv("LAKEHOUSE__SPARK__CONF__SPARK__SQL__ADAPTIVE__ENABLED")
    nested = "kafka:\n  options:\n    security:\n      protocol: SSL\n"
    with pytest.raises(SettingsError) as from_yaml:
        load_settings("dev", conf_dir=write_conf(tmp_path / "yaml", BASE, nested))
    assert str(from_yaml.value) == (
        "conf/dev/lakehouse.yml: 'kafka.options.security' must be a value (a string, number "
        "or boolean), got a mapping: write the option's whole dotted name as one key in a YAML "
        "file (an environment variable splits it at its dots)"
    )
    listed = "spark:\n  conf:\n    spark.jars:\n      - a.jar\n      - b.jar\n"
    with pytest.raises(SettingsError) as a_list:
        load_settings("dev", conf_dir=write_conf(tmp_path / "list", BASE, listed))
    assert str(a_list.value) == (
        "conf/dev/lakehouse.yml: 'spark.conf.spark.jars' must be a value (a string, number or "
        "boolean), got a list: write it as one string, comma-separated, as the option reads lists"
    )
    # A whole name loads, a YAML boolean as the text Spark and Kafka parse.
    whole = "spark:\n  conf:\n    spark.sql.adaptive.enabled: false\n    spark.x: 2\n"
    loaded = load_settings("dev", conf_dir=write_conf(tmp_path / "whole", BASE, whole))
    assert loaded.spark.conf == {"spark.sql.adaptive.enabled": "false", "spark.x": "2"}


def test_missing_secret_names_variable_and_fix_when_it_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret is resolved where it is used: the settings load without it (a job that does
    not use PostgreSQL never needs its password), and using it names the file, key and fix."""
    monkeypatch.delenv("TEST_PG_PASSWORD")
    settings = load_settings("dev", conf_dir=write_conf(tmp_path, BASE))
    with pytest.raises(SettingsError) as err:
        settings.postgres.require_password()
    assert str(err.value) == (
        "conf/base/lakehouse.yml: 'postgres.password' needs environment variable "
        "TEST_PG_PASSWORD, which is not set; add it to .env (copy .env.example) or export it"
    )


def test_secret_literal_in_yaml_is_refused(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, BASE.replace("${TEST_PG_PASSWORD}", "hunter2"))
    with pytest.raises(SettingsError, match=r"'postgres\.password' is a secret") as err:
        load_settings("dev", conf_dir=conf)
    assert "hunter2" not in str(err.value)


def test_dotenv_file_for_env_wins_over_plain_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_PG_PASSWORD")
    (tmp_path / ".env").write_text("TEST_PG_PASSWORD=from-dotenv\n")
    (tmp_path / ".env.dev").write_text("TEST_PG_PASSWORD=from-dotenv-dev\n")
    try:
        settings = load_settings("dev", conf_dir=write_conf(tmp_path, BASE))
        assert settings.postgres.require_password() == "from-dotenv-dev"
    finally:
        monkeypatch.delenv("TEST_PG_PASSWORD", raising=False)  # dotenv set it for real


def test_bad_env_name(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"--env '\.\./etc'"):
        load_settings("../etc", conf_dir=write_conf(tmp_path, BASE))


def test_committed_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """conf/base as shipped is valid (only the secret has to come from outside)."""
    monkeypatch.delenv("LAKEHOUSE_HOME")
    monkeypatch.setenv("POSTGRES_PASSWORD", "from-the-environment")
    settings = load_settings("test")
    assert settings.spark.packages == (
        "io.delta:delta-spark_2.13:4.0.0",
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0",
    )
    assert settings.spark.shuffle_partitions == 2


TABLES = """
sources:
  orders: {kind: events, topics: [orders]}
silver:
  orders:
    source: orders
    schema: "order_id BIGINT, amount DOUBLE"
    keys: [order_id]
    sequence_by: order_id
    expectations:
      - {name: positive, sql: "amount > 0", action: drop}
      - name: present
        expect: expect_column_values_to_be_in_set
        kwargs: {column: order_id, value_set: [1, 2]}
"""


def test_silver_tables_with_expectations(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, BASE)
    (conf / "base" / "tables.yml").write_text(TABLES)
    table = load_settings("dev", conf_dir=conf).silver_table("orders")
    assert (table.mode, table.keys, table.schema_drift) == ("upsert", ("order_id",), "rescue")
    assert [(e.name, e.action, e.sql, e.expect) for e in table.expectations] == [
        ("positive", "drop", "amount > 0", ""),
        ("present", "warn", "", "expect_column_values_to_be_in_set"),
    ]
    assert table.expectations[1].kwargs == {"column": "order_id", "value_set": [1, 2]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("      - {name: bad, sql: x > 1, action: explode}\n", "silver.orders.expectations[2]"),
        ("      - {name: both, sql: x > 1, expect: e}\n", "set exactly one of 'sql'"),
        ("      - {name: positive, sql: x > 1}\n", "expectation names must be unique"),
        ("    mode: scd3\n", "'mode' must be one of"),
        (
            "    mode: append\n    apply_as_deletes: amount < 0\n",
            "'silver.orders': 'apply_as_deletes' is for mode upsert",
        ),
    ],
)
def test_silver_table_errors_name_the_key(tmp_path: Path, change: str, message: str) -> None:
    conf = write_conf(tmp_path, BASE)
    (conf / "base" / "tables.yml").write_text(TABLES + change)
    with pytest.raises(SettingsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_settings("dev", conf_dir=conf)


def test_unknown_silver_table_lists_known(tmp_path: Path) -> None:
    conf = write_conf(tmp_path, BASE)
    (conf / "base" / "tables.yml").write_text(TABLES)
    with pytest.raises(SettingsError, match=r"--table 'nope'.*known: orders"):
        load_settings("dev", conf_dir=conf).silver_table("nope")


def test_kafka_options_take_secret_references_resolved_only_when_that_source_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: a source's `kafka_options` values may be `${SECRET}` references. They are
    resolved when the source is read, so another source's job never needs them."""
    source = (
        "sources:\n  feed:\n    kind: events\n    topics: [feed]\n    kafka_options:\n"
        "      security.protocol: SASL_SSL\n"
        '      sasl.jaas.config: password="${TEST_KAFKA_JAAS}";\n'
        "  other:\n    kind: events\n    topics: [other]\n"
    )
    conf = write_conf(tmp_path, BASE)
    (conf / "base" / "sources.yml").write_text(source)
    monkeypatch.setenv("TEST_KAFKA_JAAS", "jaas-s3cret")
    settings = load_settings("dev", conf_dir=conf)
    assert settings.sources["feed"].client_options() == {
        "security.protocol": "SASL_SSL",
        "sasl.jaas.config": 'password="jaas-s3cret";',
    }
    assert "jaas-s3cret" not in repr(settings)
    assert "jaas-s3cret" not in repr(settings.sources["feed"].kafka_options)
    monkeypatch.delenv("TEST_KAFKA_JAAS")
    settings = load_settings("dev", conf_dir=conf)  # loads: nothing has used the secret yet
    assert settings.sources["other"].client_options() == {}
    with pytest.raises(SettingsError) as err:
        settings.sources["feed"].client_options()
    assert str(err.value).startswith(
        "conf/base/sources.yml: 'sources.feed.kafka_options.sasl.jaas.config' needs environment "
        "variable TEST_KAFKA_JAAS, which is not set"
    )


CDC_SOURCE = """
sources:
  customers:
    kind: cdc
    topics: [shop.public.customers]
    decimal_handling_mode: string
    connector:
      topic_prefix: shop
      tables: [public.customers]
"""


def test_a_cdc_source_declares_its_connector_and_the_connector_gets_its_modes(
    tmp_path: Path,
) -> None:
    from lakehouse.connectors.sources import connector_config

    conf = write_conf(tmp_path, BASE)
    (conf / "base" / "sources.yml").write_text(CDC_SOURCE)
    settings = load_settings("dev", conf_dir=conf)
    name, config = connector_config(settings, "customers", settings.sources["customers"])
    assert name == "customers"
    expected = {
        "topic.prefix": "shop",
        "table.include.list": "public.customers",
        "slot.name": "dbz_customers",
        "publication.name": "dbz_customers_pub",
        "decimal.handling.mode": "string",
        "time.precision.mode": "adaptive",
        "database.port": "15432",
        "database.password": "${env:POSTGRES_PASSWORD}",
    }
    assert {k: config[k] for k in expected} == expected
    assert "s3cret-value" not in str(config)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("topics: [shop.public.customers]", "topics: [other]"),
            r"connector topics \['shop.public.customers'\] are not read by this source",
        ),
        (
            ("kind: cdc", "kind: events"),
            "'connector' belongs to a cdc source",
        ),
        (
            ("tables: [public.customers]", "tables: [customers]"),
            r"'tables' must list schema.table names, got \['customers'\]",
        ),
        (
            (
                "tables: [public.customers]",
                "tables: [public.customers]\n      config: {database.password: hunter2}",
            ),
            r"'config.database.password' is a secret: write a \$\{env:NAME\} reference",
        ),
        (
            (
                "tables: [public.customers]",
                "tables: [public.customers]\n      config: {decimal.handling.mode: precise}",
            ),
            "'connector.config.decimal.handling.mode' 'precise' differs from the source's "
            "'decimal_handling_mode' 'string'",
        ),
        (
            (
                "tables: [public.customers]",
                "tables: [public.customers]\n      config: {unavailable.value.placeholder: N/A}",
            ),
            r"'connector.config.unavailable.value.placeholder' 'N/A': silver resolves only "
            "Debezium's default",
        ),
        (
            (
                "tables: [public.customers]",
                "tables: [public.customers]\n      config: {binary.handling.mode: hex}",
            ),
            r"'connector.config.binary.handling.mode' 'hex': silver reads a bytea as base64",
        ),
        (
            (
                "tables: [public.customers]",
                "tables: [public.customers]\n      config: {money.fraction.digits: two}",
            ),
            r"'connector.config.money.fraction.digits' 'two': Debezium's scale for a money "
            r"column, a whole number \(2 by default\)",
        ),
        (
            (
                "tables: [public.customers]",
                "tables: [public.customers]\n      config: {column.exclude.list: 'public.c(x'}",
            ),
            r"'connector.config.column.exclude.list' pattern 'public.c\(x' is not a regular "
            r"expression \(missing \), unterminated subpattern at position 8\): fix it",
        ),
        (
            (
                "tables: [public.customers]",
                "tables: [public.customers]\n      config: {column.include.list: public.c.id, "
                "column.exclude.list: public.c.name}",
            ),
            r"'connector.config.column.include.list' and 'column.exclude.list' are both set: "
            r"Debezium takes one of them, keep one",
        ),
    ],
)
def test_a_connector_that_would_not_feed_its_source_is_refused_at_load(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    conf = write_conf(tmp_path, BASE)
    (conf / "base" / "sources.yml").write_text(CDC_SOURCE.replace(*change))
    with pytest.raises(SettingsError, match=message) as err:
        load_settings("dev", conf_dir=conf)
    assert str(err.value).startswith("conf/base/sources.yml: 'sources.customers")


@pytest.mark.parametrize(
    ("second", "key", "value"),
    [
        ("topic_prefix: shop\n      tables: [public.orders]", "topic_prefix", "shop"),
        (
            "topic_prefix: shop2\n      tables: [public.orders]\n      name: customers",
            "name",
            "customers",
        ),
        (
            "topic_prefix: shop2\n      tables: [public.orders]\n      slot: dbz_customers",
            "slot",
            "dbz_customers",
        ),
    ],
)
def test_two_connectors_sharing_a_name_slot_or_topic_prefix_are_refused_at_load(
    tmp_path: Path, second: str, key: str, value: str
) -> None:
    conf = write_conf(tmp_path, BASE)
    orders = f"""
  orders_cdc:
    kind: cdc
    topics: [{"shop" if key == "topic_prefix" else "shop2"}.public.orders]
    connector:
      {second}
"""
    (conf / "base" / "sources.yml").write_text(CDC_SOURCE + orders)
    with pytest.raises(SettingsError) as err:
        load_settings("dev", conf_dir=conf)
    assert str(err.value) == (
        f"conf/base/sources.yml: 'sources.orders_cdc.connector.{key}' {value!r} is also the "
        f"{key} of the connector of sources.customers (an unset name or slot defaults to one made "
        f"from the source's name); give each connector its own {key}"
    )
