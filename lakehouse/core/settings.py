"""Settings: `conf/base/*.yml` + `conf/<env>/*.yml` + `.env` + environment, validated once.

Layering, lowest first:
1. `conf/base/*.yml` (committed, shared),
2. `conf/<env>/*.yml` (the `--env` overlay; `local` by default and gitignored),
3. `LAKEHOUSE__SECTION__KEY=value` environment variables (after `.env` / `.env.<env>` are loaded
   with python-dotenv; variables already in the environment win over the files).

Values may reference environment variables as `${NAME}`; that is how secrets get in, and a
secret field *must* be such a reference, so a password can never be committed with a default.
Every problem raises `SettingsError` naming the file and the dotted key, plus the fix.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from dotenv import load_dotenv

from lakehouse.core import versions

ENV_PREFIX = "LAKEHOUSE__"
_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SettingsError(ValueError):
    """A configuration problem; the message names the file, the key and the fix."""


class Secret:
    """A string that never shows itself in repr, str, logs or tracebacks."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class StorageSettings:
    # A local directory or any Hadoop URI (s3a://bucket/lake). Holds bronze/, silver/, gold/,
    # offline/, _checkpoints/ and _system/.
    root: str = "data/lakehouse"

    def path(self, *parts: str) -> str:
        """A location under the root. A relative local root is taken from the checkout
        (`LAKEHOUSE_HOME`), so every job resolves the same tables whatever its working dir."""
        base = self.root
        if "://" not in base and not base.startswith(("/", "file:")):
            base = str(project_root() / base)
        return "/".join([base.rstrip("/"), *parts])


@dataclass(frozen=True)
class SparkSettings:
    app_name: str = "lakehouse"
    master: str = "local[2]"
    # Local sessions bind to loopback only; on a cluster the resource manager decides.
    driver_host: str = "127.0.0.1"
    shuffle_partitions: int = 4
    ui_enabled: bool = False
    # Ivy cache for the JVM packages; set-up fills it once, later runs resolve from it offline.
    ivy_dir: str = ".lakehouse/ivy"
    packages: tuple[str, ...] = versions.JVM_PACKAGES
    conf: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str = "127.0.0.1:19092"
    # Passed through unchanged to both the Spark Kafka source (prefixed `kafka.`) and the
    # Python client, e.g. security.protocol, sasl.mechanism.
    options: dict[str, str] = field(default_factory=dict, repr=False)


SOURCE_KINDS = ("events", "cdc")


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
    # Passed through to Spark's Kafka source with the `kafka.` prefix (may hold ${SECRET}s).
    kafka_options: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"'kind' must be one of {', '.join(SOURCE_KINDS)}, got {self.kind!r}")
        if bool(self.topics) == bool(self.topic_pattern):
            raise ValueError("set exactly one of 'topics' (a list) or 'topic_pattern' (a regex)")
        if self.max_offsets_per_trigger < 0:
            raise ValueError("'max_offsets_per_trigger' must be >= 0 (0 means unbounded)")
        if self.bronze_table and not re.fullmatch(r"[a-z][a-z0-9_]*", self.bronze_table):
            raise ValueError("'bronze_table' must be lower_snake_case")


_SNAKE = re.compile(r"[a-z][a-z0-9_]*")
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
        if not _SNAKE.fullmatch(self.name):
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
        if self.tombstone_retention_hours < 0:
            raise ValueError("'tombstone_retention_hours' must be >= 0")
        names = [e.name for e in (*self.expectations, *self.table_expectations)]
        if len(names) != len(set(names)):
            raise ValueError("expectation names must be unique within a table")


@dataclass(frozen=True)
class PostgresSettings:
    password: Secret
    host: str = "127.0.0.1"
    port: int = 15432
    database: str = "lakehouse"
    user: str = "lakehouse"


@dataclass(frozen=True)
class ConnectSettings:
    url: str = "http://127.0.0.1:18083"


@dataclass(frozen=True)
class Settings:
    postgres: PostgresSettings
    env: str = "local"
    storage: StorageSettings = field(default_factory=StorageSettings)
    spark: SparkSettings = field(default_factory=SparkSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    connect: ConnectSettings = field(default_factory=ConnectSettings)
    sources: dict[str, SourceSettings] = field(default_factory=dict)
    silver: dict[str, SilverTableSettings] = field(default_factory=dict)

    def silver_table(self, name: str) -> SilverTableSettings:
        try:
            table = self.silver[name]
        except KeyError:
            known = ", ".join(sorted(self.silver)) or "none"
            raise SettingsError(
                f"--table {name!r}: no such silver table in conf/*/tables.yml (known: {known})"
            ) from None
        if table.source not in self.sources:
            raise SettingsError(
                f"silver.{name}.source {table.source!r}: no such source in conf/*/sources.yml"
            )
        return table

    def source(self, name: str) -> SourceSettings:
        try:
            return self.sources[name]
        except KeyError:
            known = ", ".join(sorted(self.sources)) or "none"
            raise SettingsError(
                f"--source {name!r}: no such source in conf/*/sources.yml (known: {known})"
            ) from None


T = TypeVar("T")


def project_root() -> Path:
    """The checkout this package runs from (where `conf/` lives), or `LAKEHOUSE_HOME`."""
    home = os.environ.get("LAKEHOUSE_HOME")
    if home:
        return Path(home).resolve()
    return Path(__file__).resolve().parent.parent.parent


def load_settings(
    env: str = "local",
    conf_dir: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Load and validate settings for `env`. `overrides` (dotted keys) win over everything."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", env):
        raise SettingsError(f"--env {env!r}: use letters, digits, '-' or '_' (e.g. --env local)")
    root = project_root()
    env_conf = os.environ.get("LAKEHOUSE_CONF_DIR")
    conf = (conf_dir or (Path(env_conf) if env_conf else root / "conf")).resolve()
    if not (conf / "base").is_dir():
        raise SettingsError(
            f"{conf / 'base'}: no such directory; set LAKEHOUSE_HOME to the checkout"
        )
    _load_dotenv(root, env)

    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    files = sorted((conf / "base").glob("*.yml"))
    if env != "base":
        files += sorted((conf / env).glob("*.yml"))
    for path in files:
        _merge(merged, origin, _read_yaml(path), str(path.relative_to(conf.parent)), "")
    _merge(merged, origin, _env_overrides(), "", "")
    if overrides:
        _merge(merged, origin, _unflatten(overrides), "overrides", "")
    merged["env"] = env
    origin["env"] = "--env"
    return _build(Settings, merged, origin, "")


def _load_dotenv(root: Path, env: str) -> None:
    # Most specific file first: with override=False the first value set wins, and variables
    # already in the environment win over both files.
    for name in (f".env.{env}", ".env"):
        candidate = root / name
        if candidate.is_file():
            load_dotenv(candidate, override=False)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: the top level must be a mapping of sections")
    return data


def _env_overrides() -> dict[str, Any]:
    flat = {
        key[len(ENV_PREFIX) :].lower().replace("__", "."): value
        for key, value in os.environ.items()
        if key.startswith(ENV_PREFIX)
    }
    return _unflatten(flat)


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = nested
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def _merge(
    into: dict[str, Any], origin: dict[str, str], new: Mapping[str, Any], source: str, prefix: str
) -> None:
    for key, value in new.items():
        dotted = f"{prefix}{key}"
        where = source or f"environment variable {ENV_PREFIX}{dotted.upper().replace('.', '__')}"
        if isinstance(value, dict) and isinstance(into.setdefault(key, {}), dict):
            origin.setdefault(dotted, where)
            _merge(into[key], origin, value, source, f"{dotted}.")
        else:
            into[key] = value
            origin[dotted] = where


def _where(origin: Mapping[str, str], dotted: str) -> str:
    # The nearest key that some file set tells the user which file to open.
    probe = dotted
    while probe:
        if probe in origin:
            return origin[probe]
        probe = probe.rpartition(".")[0]
    return "conf/base"


def _build(cls: type[T], data: Any, origin: Mapping[str, str], prefix: str) -> T:
    if not isinstance(data, Mapping):
        raise SettingsError(
            f"{_where(origin, prefix.rstrip('.'))}: '{prefix.rstrip('.')}' must be a mapping"
        )
    assert dataclasses.is_dataclass(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in fields:
            dotted = f"{prefix}{key}"
            raise SettingsError(
                f"{_where(origin, dotted)}: unknown key '{dotted}'; "
                f"allowed under '{prefix.rstrip('.') or '<top>'}': {', '.join(sorted(fields))}"
            )
    kwargs: dict[str, Any] = {}
    for name, fld in fields.items():
        dotted = f"{prefix}{name}"
        if name in data:
            kwargs[name] = _coerce(hints[name], data[name], origin, dotted)
        elif fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
            if isinstance(hints[name], type) and dataclasses.is_dataclass(hints[name]):
                kwargs[name] = _build(hints[name], {}, origin, f"{dotted}.")
            else:
                raise SettingsError(f"{_where(origin, dotted)}: missing required key '{dotted}'")
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a dataclass's own cross-field check (__post_init__)
        name = prefix.rstrip(".")
        raise SettingsError(f"{_where(origin, name)}: '{name}': {exc}") from None


def _coerce(hint: Any, value: Any, origin: Mapping[str, str], dotted: str) -> Any:
    where = _where(origin, dotted)
    if hint is Secret:
        return _secret(value, where, dotted)
    if isinstance(value, str):
        value = _interpolate(value, where, dotted)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, origin, f"{dotted}.")
    kind = typing.get_origin(hint)
    if hint is bool:
        return _as_bool(value, where, dotted)
    if hint in (int, float):
        return _as_number(hint, value, where, dotted)
    if hint is str:
        if isinstance(value, bool | int | float) or not isinstance(value, str):
            raise SettingsError(f"{where}: '{dotted}' must be a string, got {value!r}")
        return value
    if kind is dict:
        if not isinstance(value, Mapping):
            raise SettingsError(f"{where}: '{dotted}' must be a mapping, got {value!r}")
        item = typing.get_args(hint)[1]
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            return {str(k): _build(item, v, origin, f"{dotted}.{k}.") for k, v in value.items()}
        if item is Any:  # free-form arguments (e.g. an expectation's kwargs): YAML types kept
            return {str(k): v for k, v in value.items()}
        return {str(k): _interpolate(str(v), where, f"{dotted}.{k}") for k, v in value.items()}
    if kind is tuple and _is_dataclass(typing.get_args(hint)[0]):
        if not isinstance(value, list):
            raise SettingsError(f"{where}: '{dotted}' must be a list of mappings, got {value!r}")
        item = typing.get_args(hint)[0]
        return tuple(_build(item, v, origin, f"{dotted}[{i}].") for i, v in enumerate(value))
    if kind is tuple:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise SettingsError(f"{where}: '{dotted}' must be a list, got {value!r}")
        return tuple(str(item).strip() for item in items if str(item).strip())
    raise SettingsError(f"{dotted}: unsupported settings type {hint}")  # pragma: no cover


def _is_dataclass(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _secret(value: Any, where: str, dotted: str) -> Secret:
    if not isinstance(value, str) or not _REF.fullmatch(value.strip()):
        raise SettingsError(
            f"{where}: '{dotted}' is a secret and must be a reference such as "
            "'${POSTGRES_PASSWORD}'; put the value in .env (see .env.example), never in YAML"
        )
    return Secret(_interpolate(value.strip(), where, dotted))


def _interpolate(value: str, where: str, dotted: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        found = os.environ.get(name)
        if found is None or found == "":
            raise SettingsError(
                f"{where}: '{dotted}' needs environment variable {name}, which is not set; "
                "add it to .env (copy .env.example) or export it"
            )
        return found

    return _REF.sub(replace, value)


def _as_bool(value: Any, where: str, dotted: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise SettingsError(f"{where}: '{dotted}' must be true or false, got {value!r}")


def _as_number(kind: type, value: Any, where: str, dotted: str) -> int | float:
    if isinstance(value, bool):
        raise SettingsError(f"{where}: '{dotted}' must be a number, got {value!r}")
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise SettingsError(f"{where}: '{dotted}' must be a number, got {value!r}") from None
    if kind is int and isinstance(value, float) and value != number:
        raise SettingsError(f"{where}: '{dotted}' must be a whole number, got {value!r}")
    return typing.cast(int | float, number)
