"""What the services are made of: Debian packages (apt, only when missing) and the jars of
Kafka, Kafka Connect, Debezium and HDFS from Maven Central.

Jars are resolved once with `mvn -q dependency:copy-dependencies` (Maven's own cache is the
usual `~/.m2`); a marker file holding the POM's hash makes every later run skip Maven, so a warm
machine starts offline.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from lakehouse.devstack import ServiceError
from lakehouse.devstack.processes import StatePaths, failure, is_root, lock, run_logged

_MARKER = ".lakehouse-resolved"
_POSTGRES_LIB = Path("/usr/lib/postgresql")


# --------------------------------------------------------------------------------------------
# Debian packages


def apt_install(packages: Sequence[str], paths: StatePaths) -> None:
    """`apt-get install` as root or through `sudo -n`; output in `logs/apt.log`."""
    log = paths.log("apt")
    prefix: list[str] = []
    if not is_root():
        if shutil.which("sudo") is None:
            raise ServiceError(
                f"need Debian packages {' '.join(packages)} but not root and no sudo: "
                f"run `apt-get install -y {' '.join(packages)}` as root"
            )
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        [*prefix, "apt-get", "update", "-q"],
        [*prefix, "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
    ):
        if run_logged(cmd, log, append=True, env=env) != 0:
            raise failure(f"`{' '.join(cmd)}` failed", paths, log)


def _require_command(name: str, apt_package: str, paths: StatePaths) -> str:
    found = shutil.which(name)
    if found is None:
        apt_install([apt_package], paths)
        found = shutil.which(name)
    if found is None:
        raise ServiceError(f"`{name}` not found even after installing {apt_package}")
    return found


def postgres_bindir() -> Path | None:
    """The newest installed PostgreSQL server's `bin/` (`/usr/lib/postgresql/<v>/bin`)."""
    found: list[tuple[int, Path]] = []
    for pg_ctl in _POSTGRES_LIB.glob("*/bin/pg_ctl"):
        version = pg_ctl.parent.parent.name
        if version.isdigit():
            found.append((int(version), pg_ctl.parent))
    return max(found)[1] if found else None


def ensure_postgres_package(paths: StatePaths) -> Path:
    """The PostgreSQL server binaries, installed from Debian (`postgresql`) when missing."""
    bindir = postgres_bindir()
    if bindir is None:
        apt_install(["postgresql"], paths)
        bindir = postgres_bindir()
    if bindir is None:
        raise ServiceError(f"PostgreSQL server binaries not found under {_POSTGRES_LIB}/*/bin")
    return bindir


# --------------------------------------------------------------------------------------------
# Jars from Maven Central


def _pom_dir(paths: StatePaths, name: str) -> Path:
    for base in (paths.root, Path(__file__).resolve().parent.parent.parent):
        candidate = base / "services" / "maven" / name
        if (candidate / "pom.xml").is_file():
            return candidate
    raise ServiceError(f"services/maven/{name}/pom.xml is missing from {paths.root}")


def _resolved(marker: Path, digest: str) -> bool:
    return marker.is_file() and marker.read_text().strip() == digest


def _resolve_jars(paths: StatePaths, name: str, dest: Path) -> None:
    """Copy the POM's runtime dependencies into `dest` once; later calls never run Maven."""
    pom = _pom_dir(paths, name) / "pom.xml"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    marker = dest / _MARKER
    if _resolved(marker, digest):
        return
    with lock(paths, f"install-{name}"):
        if _resolved(marker, digest):
            return
        mvn = _require_command("mvn", "maven", paths)
        log = paths.log(f"maven-{name}")
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={partial}",
        ]
        if run_logged(cmd, log, cwd=pom.parent) != 0 or not any(partial.glob("*.jar")):
            raise failure(f"resolving {paths.show(pom)} with Maven failed", paths, log)
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial.rename(dest)
        marker.write_text(digest + "\n")


def install_kafka_jars(paths: StatePaths) -> None:
    """The broker and Kafka's own tools, into `jars/kafka/`."""
    _resolve_jars(paths, "kafka", paths.kafka_jars)


def install_hdfs_jars(paths: StatePaths) -> None:
    """The HDFS NameNode and DataNode, into `jars/hdfs/`."""
    _resolve_jars(paths, "hdfs", paths.hdfs_jars)


def install_connect_jars(paths: StatePaths) -> None:
    """The Connect worker into `jars/connect/`, Debezium into `connect-plugins/`."""
    _resolve_jars(paths, "connect", paths.connect_jars)
    _resolve_jars(paths, "debezium-postgres", paths.debezium_plugin)
