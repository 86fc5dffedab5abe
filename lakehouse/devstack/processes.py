"""What every local service shares: the state directory and its locks, logged commands, pid
files, spawning and stopping processes, ports and waiting (stdlib only).

Our JVMs carry `-Dlakehouse.service=<name>` and `-Dlakehouse.state=<state dir>` on their command
line (`markers`), so a stale or missing pid file never makes us lose one or mistake another
process for it: `running_pid` checks the markers and adopts an orphan it finds by them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lakehouse.core.settings import project_root
from lakehouse.devstack import ServiceError

STATE_DIR_NAME = ".lakehouse"
STOP_TIMEOUT = 30.0


# --------------------------------------------------------------------------------------------
# Layout of the state directory


@dataclass(frozen=True)
class StatePaths:
    """Where everything of the dev stack lives: `<root>/.lakehouse/...` (see the package doc)."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR_NAME

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def run(self) -> Path:
        return self.state / "run"

    @property
    def conf(self) -> Path:
        return self.state / "conf"

    @property
    def kafka_jars(self) -> Path:
        return self.state / "jars" / "kafka"

    @property
    def connect_jars(self) -> Path:
        return self.state / "jars" / "connect"

    @property
    def hdfs_jars(self) -> Path:
        return self.state / "jars" / "hdfs"

    @property
    def plugins(self) -> Path:
        return self.state / "connect-plugins"

    @property
    def debezium_plugin(self) -> Path:
        return self.plugins / "debezium-postgres"

    @property
    def kafka_dir(self) -> Path:
        return self.state / "kafka"

    @property
    def connect_dir(self) -> Path:
        return self.state / "connect"

    def log(self, service: str) -> Path:
        return self.logs / f"{service}.log"

    def pidfile(self, service: str) -> Path:
        return self.run / f"{service}.pid"

    def show(self, path: Path) -> str:
        """A path as the user should read it: relative to the project root when inside it."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


def state_paths() -> StatePaths:
    """The state directory of this checkout (`project_root()`), its common folders created."""
    paths = StatePaths(project_root().resolve())
    for directory in (paths.state, paths.logs, paths.run, paths.conf):
        directory.mkdir(parents=True, exist_ok=True)
    return paths


@contextlib.contextmanager
def lock(paths: StatePaths, name: str) -> Iterator[None]:
    """Serialise start/stop/install of one thing across processes (pytest-xdist, two shells)."""
    with (paths.run / f"{name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------
# Commands and one-line errors


def is_root() -> bool:
    return os.geteuid() == 0


def _last_error_line(log: Path) -> str:
    """The last ERROR/FATAL/exception line of a log, shortened, for one-line error messages."""
    try:
        with log.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64_000))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    pattern = re.compile(r"\b(ERROR|FATAL|PANIC|Exception|Error:)")
    for line in reversed(lines):
        if pattern.search(line):
            return f" (last error: {line.strip()[:300]})"
    return ""


def failure(what: str, paths: StatePaths, log: Path) -> ServiceError:
    """`<what>; see <log> (last error: ...)`."""
    return ServiceError(f"{what}; see {paths.show(log)}{_last_error_line(log)}")


def run_logged(
    cmd: Sequence[str],
    log: Path,
    *,
    append: bool = False,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> int:
    """Run `cmd` with its output written to `log` after a `$ cmd` line; its exit status."""
    with log.open("a" if append else "w") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        return subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        ).returncode


# --------------------------------------------------------------------------------------------
# Ports and waiting


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# A process killed a moment ago can still hold its listening socket: the kernel reports the
# thread-group leader dead (a zombie) while the other threads of a large JVM are still being
# torn down, and their sockets close only when the last thread is gone.
RELEASE_GRACE_S = 10.0


def require_free(
    label: str, host: str, port: int, setting: str, grace: float = RELEASE_GRACE_S
) -> None:
    """Refuse to start `label` on a port that another process (not ours) still holds after
    `grace` seconds."""
    deadline = time.monotonic() + grace
    while port_open(host, port) and time.monotonic() < deadline:
        time.sleep(0.2)
    if port_open(host, port):
        raise ServiceError(
            f"cannot start {label}: {host}:{port} is taken by another process (not ours); "
            f"stop it or change {setting}"
        )


def wait_until(
    ready: Callable[[], bool],
    *,
    timeout: float,
    alive: Callable[[], bool],
    what: str,
    paths: StatePaths,
    log: Path,
) -> None:
    """Poll `ready` until true; fail when the process dies first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        if ready():
            return
        if not alive():
            raise failure(f"{what} exited during start-up", paths, log)
        if time.monotonic() > deadline:
            raise failure(f"{what} did not become ready within {timeout:.0f}s", paths, log)
        time.sleep(0.5)


# --------------------------------------------------------------------------------------------
# Processes in /proc


def _proc_stat_fields(pid: int | str) -> list[str] | None:
    """The fields of `/proc/<pid>/stat` after the command name (state first, then ppid)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()


def _proc_pids() -> Iterator[int]:
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if entry.name.isdigit():
                yield int(entry.name)


def pid_alive(pid: int) -> bool:
    if Path("/proc").is_dir():
        fields = _proc_stat_fields(pid)
        if not fields:
            return False
        if fields[0] in ("Z", "X"):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            return False
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def children(pid: int) -> list[int]:
    """Direct children of `pid` (PostgreSQL backends run in sessions of their own)."""
    found: list[int] = []
    for child in _proc_pids():
        fields = _proc_stat_fields(child)
        with contextlib.suppress(IndexError, ValueError):
            if fields is not None and int(fields[1]) == pid:
                found.append(child)
    return found


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def markers(service: str, paths: StatePaths) -> tuple[str, str]:
    """The JVM options that make our process of `service` recognisable in /proc."""
    return f"-Dlakehouse.service={service}", f"-Dlakehouse.state={paths.state}"


def _is_ours(pid: int, service: str, paths: StatePaths) -> bool:
    if not Path("/proc").is_dir():
        return True
    args = _cmdline(pid)
    return all(marker in args for marker in markers(service, paths))


def find_ours(service: str, paths: StatePaths) -> list[int]:
    """Our live processes of `service` for this state directory, found by their markers."""
    return sorted(
        pid
        for pid in _proc_pids()
        if pid != os.getpid() and _is_ours(pid, service, paths) and pid_alive(pid)
    )


def read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def pidfile_pid(service: str, paths: StatePaths) -> int | None:
    """The pid in `service`'s pid file when that process lives and is ours."""
    pid = read_pid(paths.pidfile(service))
    if pid is not None and pid_alive(pid) and _is_ours(pid, service, paths):
        return pid
    return None


def running_pid(service: str, paths: StatePaths) -> int | None:
    """The pid of our running `service`; cleans a stale pid file, adopts an orphan."""
    pid = pidfile_pid(service, paths)
    if pid is not None:
        return pid
    paths.pidfile(service).unlink(missing_ok=True)
    orphans = find_ours(service, paths)
    if orphans:
        paths.pidfile(service).write_text(f"{orphans[0]}\n")
        return orphans[0]
    return None


# --------------------------------------------------------------------------------------------
# Starting and stopping


def spawn(cmd: Sequence[str], log: Path, env: Mapping[str, str], cwd: Path) -> int:
    """Start `cmd` detached in its own session, output appended to `log`; return its pid.

    A throw-away `sh` backgrounds the command and exits, so the service is not our child: no
    zombie, no ResourceWarning, and it outlives this Python process (as a server should). The
    previous log is kept as `<log>.1`.
    """
    if log.exists() and log.stat().st_size > 0:
        log.replace(log.with_name(log.name + ".1"))
    script = 'exec 0</dev/null; "$@" >>"$LAKEHOUSE_LOG" 2>&1 & echo $!'
    result = subprocess.run(
        ["sh", "-c", script, "sh", *cmd],
        env={**env, "LAKEHOUSE_LOG": str(log)},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=30,
        check=False,
    )
    try:
        return int(result.stdout.strip())
    except ValueError:
        raise ServiceError(f"could not start {cmd[0]}: {result.stderr.strip()[:300]}") from None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        pgid = os.getpgid(pid)
        if pgid not in (os.getpgrp(), 0, 1):
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def wait_gone(pids: Sequence[int], timeout: float) -> list[int]:
    """Wait up to `timeout` for `pids` to exit; those still alive."""
    deadline = time.monotonic() + timeout
    alive = [pid for pid in pids if pid_alive(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in alive if pid_alive(pid)]
    return alive


def terminate(pids: Sequence[int], what: str, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM the process groups, wait, then SIGKILL whatever is left."""
    if not pids:
        return
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    alive = wait_gone(pids, timeout)
    for pid in alive:
        _signal_group(pid, signal.SIGKILL)
    alive = wait_gone(alive, 10.0)
    if alive:
        raise ServiceError(f"{what} (pid {', '.join(map(str, alive))}) survived SIGKILL")
