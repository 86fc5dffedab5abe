"""Reset protection: a protected table (bronze, whose data Kafka may no longer hold) refuses
every destructive operation loudly (Spark Declarative Pipelines would silently skip it), and
lifting protection is an explicit operator action recorded in `_system/protection_log`.

Each layer owns what a reset of its tables means (bronze: `lakehouse.bronze.ingest.reset`,
silver: `lakehouse.silver.refine.full_refresh`); they all check `require_resettable` first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakehouse.core import system, tables
from lakehouse.core.errors import Refused, UsageError
from lakehouse.core.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESET_ALLOWED = "pipelines.reset.allowed"
# How far back ingest looks for a RESTORE at start (the table's latest commits since the last
# protection event): Delta reads one commit file per version.
RESTORE_HISTORY = 1000
PROTECTED = {"delta.appendOnly": "true", RESET_ALLOWED: "false"}
UNPROTECTED = {"delta.appendOnly": "false", RESET_ALLOWED: "true"}


class ProtectedTableError(Refused):
    """A destructive operation on a protected table was refused."""


def is_protected(properties: dict[str, str]) -> bool:
    """Fully protected: Delta refuses deletes and rewrites, and our commands refuse resets."""
    return all(properties.get(k, "").lower() == v for k, v in PROTECTED.items())


def _reset_refused(properties: dict[str, str]) -> bool:
    """Any protection left refuses a reset: only `lakehouse unprotect` lifts both."""
    return any(properties.get(k, "").lower() == v for k, v in PROTECTED.items())


def require_resettable(spark: SparkSession, path: str, operation: str) -> None:
    """Our own check before any destructive command."""
    if tables.exists(spark, path) and _reset_refused(tables.properties(spark, path)):
        raise ProtectedTableError(
            f"{operation} refused: {path} is protected ({RESET_ALLOWED}=false, "
            "delta.appendOnly=true) because its data may no longer exist in Kafka. "
            "If you really mean it, lift protection first (recorded): "
            "lakehouse unprotect TABLE --reason '...'"
        )


def unprotect(spark: SparkSession, settings: Settings, name: str, reason: str) -> int:
    """Lift reset protection: an explicit, recorded operator action. Returns the table version."""
    if not reason.strip():
        raise UsageError("unprotect needs --reason: say why, it goes to _system/protection_log")
    return _set(spark, settings, name, UNPROTECTED, {"event": "unprotect", "reason": reason})


def protect(spark: SparkSession, settings: Settings, name: str) -> int:
    return _set(spark, settings, name, PROTECTED, {"event": "protect"})


def _set(
    spark: SparkSession,
    settings: Settings,
    name: str,
    properties: dict[str, str],
    record: dict[str, str],
) -> int:
    version = tables.set_properties(spark, existing(spark, settings, name), properties)
    system.append_log(
        spark,
        settings,
        system.PROTECTION_LOG,
        {**record, "subject": name, "version": version},
    )
    return version


def require_intact(spark: SparkSession, settings: Settings, name: str, path: str) -> None:
    """Before writing into the protected table `name`: its protection is in place, or was
    lifted by `lakehouse unprotect` (recorded). Anything else means a client changed its
    properties directly, and deletes or a RESTORE may have followed unseen."""
    events = system.read_log(spark, settings, system.PROTECTION_LOG, name)
    if events and events[-1]["event"] == "unprotect":
        return
    properties = tables.properties(spark, path)
    if is_protected(properties):
        _require_no_restore(spark, name, path, events)
        return
    shown = ", ".join(f"{k}={properties.get(k, '(unset)')}" for k in PROTECTED)
    raise ProtectedTableError(
        f"{name} is not protected ({shown}) and no `lakehouse unprotect` recorded why: its "
        "properties were changed directly. Ingest will not write into it until you restore "
        f"protection (lakehouse protect {name}) or record the change "
        f"(lakehouse unprotect {name} --reason '...')"
    )


def _require_no_restore(
    spark: SparkSession, name: str, path: str, events: list[dict[str, Any]]
) -> None:
    """Delta's RESTORE bypasses appendOnly (it removes the files added since): one committed
    after the last protection event (a reset starts a new table) is refused."""
    since = int(events[-1].get("version", -1)) if events else -1
    newer = tables.latest_version(spark, path) - since
    found = tables.restores(spark, path, since, min(newer, RESTORE_HISTORY)) if newer > 0 else []
    if not found:
        return
    version, restored, before = found[0]
    raise ProtectedTableError(
        f"{name} was restored to version {restored} at version {version}, outside "
        "`lakehouse unprotect`: rows it held are gone from it, and Kafka may no longer hold "
        f"them. Undo it (RESTORE TABLE delta.`{path}` TO VERSION AS OF {before}), or accept "
        f"it; then record that with `lakehouse protect {name}` and ingest goes on"
    )


def record_reset(spark: SparkSession, settings: Settings, name: str) -> None:
    system.append_log(spark, settings, system.PROTECTION_LOG, {"event": "reset", "subject": name})


def existing(spark: SparkSession, settings: Settings, name: str) -> str:
    """The path of the existing table `name` (LAYER.TABLE), else a usage error."""
    path = tables.table_path(settings, name)
    if not tables.exists(spark, path):
        raise UsageError(f"{name}: no Delta table at {path}")
    return path
