"""Our JVM servers (the Kafka broker, the Connect worker) and Kafka's JVM tools: `java`, the
log4j2 configuration, command lines, `.properties` files, and one way to start and stop them.

A server runs detached with its output in `logs/<service>.log` (the previous one kept as
`.log.1`) and its pid in `run/<service>.pid`; it carries the `processes.markers`, so it is found
again even without the pid file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lakehouse.devstack import ServiceError
from lakehouse.devstack.processes import (
    StatePaths,
    find_ours,
    lock,
    markers,
    pid_alive,
    pidfile_pid,
    require_free,
    running_pid,
    spawn,
    terminate,
    wait_until,
)

TOOL_HEAP = "-Xmx256m"


def java() -> str:
    """`$JAVA_HOME/bin/java`, else `java` on the PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise ServiceError("`java` (17+) not found: apt-get install -y default-jre-headless")
    return found


def write_log4j(paths: StatePaths, level: str = "INFO") -> Path:
    """`conf/log4j2-<level>.properties`: INFO to stdout for servers, WARN to stderr for tools."""
    path = paths.conf / f"log4j2-{level.lower()}.properties"
    text = "\n".join(
        [
            "status = warn",
            "name = lakehouse",
            "appender.out.type = Console",
            "appender.out.name = OUT",
            f"appender.out.target = {'SYSTEM_OUT' if level == 'INFO' else 'SYSTEM_ERR'}",
            "appender.out.layout.type = PatternLayout",
            "appender.out.layout.pattern = [%d] %p %m (%c)%n",
            f"rootLogger.level = {level}",
            "rootLogger.appenderRef.out.ref = OUT",
            "logger.reflections.name = org.reflections",
            "logger.reflections.level = ERROR",
            "logger.request.name = kafka.request.logger",
            "logger.request.level = WARN",
            "",
        ]
    )
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def write_properties(path: Path, props: Mapping[str, str]) -> Path:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n")

    path.write_text("".join(f"{key}={escape(value)}\n" for key, value in props.items()))
    return path


def _argv(
    jars: Path, main: str, args: Sequence[str], *options: str, before: Sequence[Path] = ()
) -> list[str]:
    """`java` running `main` from `jars`; `before`: directories ahead of the jars on the
    class path (Hadoop's servers read their `*-site.xml` from there)."""
    classpath = os.pathsep.join([*map(str, before), f"{jars}/*"])
    return [java(), *options, "-cp", classpath, main, *args]


def tool_argv(paths: StatePaths, jars: Path, main: str, *args: str) -> list[str]:
    """argv of a short-lived JVM tool (small heap, WARN logging to stderr)."""
    log4j = write_log4j(paths, "WARN")
    return _argv(jars, main, args, TOOL_HEAP, f"-Dlog4j2.configurationFile={log4j}")


def _server_argv(server: JvmServer, paths: StatePaths, *args: str) -> list[str]:
    service = server.service
    return _argv(
        server.jars,
        server.main,
        args,
        f"-Xmx{server.heap}",
        "-Xms64m",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        # Whatever the host's zone: Debezium reads a timestamp[]'s elements in its JVM's zone,
        # and one a zone skips (a spring-forward gap), or from before 1900, arrives shifted.
        "-Duser.timezone=UTC",
        f"-Dlog4j2.configurationFile={write_log4j(paths)}",
        *markers(service, paths),
        before=server.classpath,
    )


@dataclass(frozen=True)
class JvmServer:
    """One of our JVM servers: what it runs, where it listens and how to tell it is ready."""

    service: str  # the name of its pid file, log, lock and marker: "kafka", "connect"
    label: str  # for messages: "Kafka", "Kafka Connect"
    jars: Path
    main: str
    cwd: Path
    # (host, port, the setting that moves it): each must be free before it starts.
    ports: Sequence[tuple[str, int, str]]
    ready: Callable[[], bool]
    # Upstream's start scripts' maximum heap (kafka-server-start 1G, connect-standalone 2G): a
    # worker that runs out exits at once (ExitOnOutOfMemoryError) and drops every connector.
    heap: str = "1g"
    classpath: Sequence[Path] = ()  # directories ahead of the jars


def _await_ready(server: JvmServer, paths: StatePaths, pid: int, what: str, timeout: float) -> None:
    wait_until(
        server.ready,
        timeout=timeout,
        alive=lambda: pid_alive(pid),
        what=what,
        paths=paths,
        log=paths.log(server.service),
    )


def start_jvm(
    server: JvmServer,
    paths: StatePaths,
    prepare: Callable[[], Sequence[str]],
    *,
    env: Mapping[str, str],
    timeout: float,
) -> None:
    """Start `server` unless it already runs, then wait until it is ready.

    `prepare` runs only for a real start (after its ports were found free): it writes the
    configuration and returns the main class's arguments. A server that does not become ready
    is killed again.
    """
    with lock(paths, server.service):
        pid = running_pid(server.service, paths)
        if pid is not None:
            _await_ready(server, paths, pid, f"{server.label} (pid {pid})", timeout)
            return
        for host, port, setting in server.ports:
            require_free(server.label, host, port, setting)
        cmd = _server_argv(server, paths, *prepare())
        pid = spawn(cmd, paths.log(server.service), env, server.cwd)
        paths.pidfile(server.service).write_text(f"{pid}\n")
        try:
            _await_ready(server, paths, pid, server.label, timeout)
        except ServiceError:
            terminate([pid], server.label)
            paths.pidfile(server.service).unlink(missing_ok=True)
            raise


def stop_jvm(service: str, label: str, paths: StatePaths) -> None:
    """SIGTERM (then SIGKILL) every process of ours for `service`; fine when none runs."""
    with lock(paths, service):
        pids = set(find_ours(service, paths))
        pid = pidfile_pid(service, paths)
        if pid is not None:
            pids.add(pid)
        terminate(sorted(pids), label)
        paths.pidfile(service).unlink(missing_ok=True)


def describe(
    service: str,
    paths: StatePaths,
    ready: Callable[[], bool],
    *,
    installed: bool,
    where: str,
    unready: str,
) -> str:
    """`running (pid N, <where>)`, with `, <unready>` when it does not answer, or `stopped`."""
    pid = running_pid(service, paths)
    if pid is None:
        return "stopped" if installed else "stopped (not installed)"
    answers = "" if ready() else f", {unready}"
    return f"running (pid {pid}, {where}{answers})"
