"""The settings every part of the lakehouse reads: one frozen, validated tree per run.

`load_settings(env)` merges `conf/base/*.yml`, the `conf/<env>/` overlay, `.env` and the
environment (see `lakehouse.core.config`) and builds it into these dataclasses; an unknown key,
a wrong type or a malformed secret reference is an error naming the file and the key. The
pipeline's declarations (sources, silver tables, ...) are in `lakehouse.core.specs`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lakehouse.core import versions
from lakehouse.core.config import Secret, SettingsError, build, load_tree, project_root, where
from lakehouse.core.specs import (
    GoldTableSettings,
    OfflineTableSettings,
    SilverTableSettings,
    SourceSettings,
)

__all__ = ["Secret", "Settings", "SettingsError", "load_settings", "project_root"]


@dataclass(frozen=True)
class StorageSettings:
    # A local directory or any Hadoop URI (s3a://bucket/lake). Holds bronze/, silver/, gold/,
    # offline/, _checkpoints/ and _system/.
    root: str = "data/lakehouse"
    # Every how many commits a bronze, silver or gold table is compacted: OPTIMIZE rewrites its
    # small files and the files whose rows are mostly deleted (each micro-batch and MERGE adds
    # files, a MERGE deletion vectors). Rows and change feed stay as they are. 0: never.
    compact_every: int = 50

    def __post_init__(self) -> None:
        if self.compact_every < 0:
            raise ValueError(
                "'compact_every' must be a number of commits, or 0 for never; "
                f"got {self.compact_every}"
            )

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


# The two sections below serve the local dev stack and the operator commands (`lakehouse
# services`, the demo, the tests): no job reads them, so a job runs without them.


@dataclass(frozen=True)
class PostgresSettings:
    # A `${NAME}` reference (never a literal); unset when the deployment has no PostgreSQL.
    password: Secret | None = None
    host: str = "127.0.0.1"
    port: int = 15432
    database: str = "lakehouse"
    user: str = "lakehouse"

    def require_password(self) -> str:
        if self.password is None:
            raise SettingsError(
                "'postgres.password' is not set: add `password: ${POSTGRES_PASSWORD}` under "
                "`postgres:` in conf/base/lakehouse.yml and the value to .env"
            )
        return self.password.get()


@dataclass(frozen=True)
class ConnectSettings:
    url: str = "http://127.0.0.1:18083"


@dataclass(frozen=True)
class Settings:
    env: str = "local"
    storage: StorageSettings = field(default_factory=StorageSettings)
    spark: SparkSettings = field(default_factory=SparkSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    postgres: PostgresSettings = field(default_factory=PostgresSettings)
    connect: ConnectSettings = field(default_factory=ConnectSettings)
    sources: dict[str, SourceSettings] = field(default_factory=dict)
    silver: dict[str, SilverTableSettings] = field(default_factory=dict)
    offline: dict[str, OfflineTableSettings] = field(default_factory=dict)
    gold: dict[str, GoldTableSettings] = field(default_factory=dict)

    def silver_table(self, name: str) -> SilverTableSettings:
        table = _declared(self.silver, name, "--table", "silver table", "tables.yml")
        if table.source not in self.sources:
            raise SettingsError(
                f"silver.{name}.source {table.source!r}: no such source in conf/*/sources.yml"
            )
        return table

    def offline_table(self, name: str) -> OfflineTableSettings:
        return _declared(self.offline, name, "--table", "offline table", "offline.yml")

    def gold_table(self, name: str) -> GoldTableSettings:
        return _declared(self.gold, name, "--table", "gold table", "gold.yml")

    def hybrid_views(self) -> dict[str, str]:
        """Hybrid view name -> its offline table."""
        return {spec.view: name for name, spec in self.offline.items()}

    def source(self, name: str) -> SourceSettings:
        return _declared(self.sources, name, "--source", "source", "sources.yml")

    def bronze_table(self, source: str) -> str:
        """The bronze table `source` lands in: `bronze.<bronze_table or the source's name>`."""
        return f"bronze.{self.source(source).bronze_table or source}"


T = TypeVar("T")


def _declared(declared: Mapping[str, T], name: str, flag: str, kind: str, file: str) -> T:
    """`declared[name]`, else an error listing what is declared."""
    try:
        return declared[name]
    except KeyError:
        known = ", ".join(sorted(declared)) or "none"
        raise SettingsError(
            f"{flag} {name!r}: no such {kind} in conf/*/{file} (known: {known})"
        ) from None


def load_settings(
    env: str = "local",
    conf_dir: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Load and validate settings for `env`. `overrides` (dotted keys) win over everything."""
    merged, origin = load_tree(env, conf_dir, overrides)
    settings = build(Settings, merged, origin, "")
    _check_references(settings, origin)
    _check_connectors(settings, origin)
    return settings


def _check_connectors(settings: Settings, origin: Mapping[str, str]) -> None:
    """Connectors of different sources must not share what Kafka Connect and PostgreSQL key
    them by: one name would make `lakehouse connectors apply` of one reconfigure the other,
    one replication slot cannot feed two, and Debezium names a connector's metrics (JMX) by
    its topic prefix, so a second with the same prefix fails to start in the same worker."""
    seen: dict[tuple[str, str], str] = {}
    for source, spec in sorted(settings.sources.items()):
        if spec.connector is None:
            continue
        connector = spec.connector
        keys = {
            "name": connector.connect_name(source),
            "slot": connector.slot_name(source),
            "topic_prefix": connector.topic_prefix,
        }
        for key, value in keys.items():
            other = seen.setdefault((key, value), source)
            if other != source:
                dotted = f"sources.{source}.connector.{key}"
                raise SettingsError(
                    f"{where(origin, dotted)}: '{dotted}' {value!r} is also the {key} of "
                    f"the connector of sources.{other} (an unset name or slot defaults to one made "
                    f"from the source's name); give each connector its own {key}"
                )


def _check_references(settings: Settings, origin: Mapping[str, str]) -> None:
    """Declarations that name each other must name something declared (checked once, at load,
    so a job never starts on a dangling reference)."""

    def refuse(dotted: str, value: str, kind: str, known: Sequence[str]) -> SettingsError:
        listed = ", ".join(sorted(known)) or "none"
        return SettingsError(
            f"{where(origin, dotted)}: '{dotted}' {value!r}: no such {kind} (known: {listed})"
        )

    for name, table in settings.silver.items():
        if table.source not in settings.sources:
            raise refuse(f"silver.{name}.source", table.source, "source", list(settings.sources))
    views: dict[str, str] = {}
    for name, off in settings.offline.items():
        if off.realtime not in settings.silver:
            raise refuse(
                f"offline.{name}.realtime", off.realtime, "silver table", list(settings.silver)
            )
        if off.view in views or off.view in settings.silver:
            raise SettingsError(
                f"{where(origin, f'offline.{name}')}: hybrid view {off.view!r} of offline.{name} "
                f"is already the name of {views.get(off.view, f'silver.{off.view}')}; set "
                f"offline.{name}.hybrid_view to another name"
            )
        views[off.view] = f"the hybrid view of offline.{name}"
    for name, gold in settings.gold.items():
        if gold.source not in settings.silver and gold.source not in views:
            raise refuse(
                f"gold.{name}.source",
                gold.source,
                "silver table or hybrid view",
                [*settings.silver, *views],
            )
