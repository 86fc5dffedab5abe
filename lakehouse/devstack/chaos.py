"""The sample pipeline's jobs run together, continuously, as a scheduler runs them, and killed
at random: the harness of the fault test (`tests/pipeline/`) and of the freshness benchmark
(`bench/`). Each job runs in its own process group (the Python driver and Spark's JVM), so a
SIGKILL takes both down at once, as a lost machine would; a job that exits by itself is
restarted too, and its exit is recorded, because a job may only die of our kills (or, for the
jobs reading Kafka, of a broker outage we caused)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lakehouse.core.settings import project_root


@dataclass(frozen=True)
class Exit:
    """A job that ended without being killed: when (seconds into the run), how, its last line."""

    at_s: float
    code: int
    last_line: str


@dataclass
class Job:
    """One continuous job: `jobs/<script>.py ARGS`, its log, and what happened to it."""

    name: str  # e.g. "refine_silver.orders"
    script: str  # e.g. "refine_silver"
    args: tuple[str, ...]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    exits: list[Exit] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Supervisor:
    """Starts, kills and restarts `jobs` (each `python jobs/<script>.py --env ENV --trigger
    continuous ARGS` under `env`, at scheduling priority `nice`).

    A test that also works in its own process while the jobs run (a backfill, the workloads'
    producers) starts them at a lower priority: on two cores, seven job JVMs and their
    restarts left it a slice so thin that a backfill of 412 rows took 422 s. The jobs only
    wait longer for the CPU; what they do is the same. (Linux puts each session in its own
    scheduling autogroup, and a job is a session of its own: a nice value counts only
    against its own group, so the group's is lowered too.)"""

    def __init__(
        self, jobs: Sequence[Job], env: Mapping[str, str], conf_env: str, nice: int = 0
    ) -> None:
        self.jobs = list(jobs)
        self.env = dict(env)
        self.conf_env = conf_env
        self.nice = nice
        self.started_at = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    def start(self, job: Job) -> None:
        script = project_root() / "jobs" / f"{job.script}.py"
        argv = [sys.executable, str(script), "--env", self.conf_env, "--trigger", "continuous"]
        if self.nice:
            argv = ["nice", "-n", str(self.nice), *argv]  # nice execs: the pid is the job's
        job.log.parent.mkdir(parents=True, exist_ok=True)
        with job.log.open("ab") as log:
            log.write(f"\n=== start {job.starts + 1} at {self.elapsed():.1f} s ===\n".encode())
            log.flush()
            job.process = subprocess.Popen(
                [*argv, *job.args],
                env=self.env,
                cwd=project_root(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if self.nice:
            _lower_group_priority(job.process.pid, self.nice)
        job.starts += 1

    def start_stages(
        self, stages: Sequence[tuple[Sequence[Job], Callable[[], bool]]], timeout_s: float = 300.0
    ) -> None:
        """Start each stage's jobs, then wait until its `ready()` (its tables exist), as a
        scheduler starts a pipeline: a job whose input does not exist yet fails fast."""
        for jobs, ready in stages:
            for job in jobs:
                self.start(job)
            deadline = time.monotonic() + timeout_s
            while not ready():
                self.restart_exited()
                if time.monotonic() > deadline:
                    names = ", ".join(job.name for job in jobs)
                    raise TimeoutError(f"{names}: not ready after {timeout_s:.0f} s")
                time.sleep(1.0)

    def kill(self, job: Job) -> None:
        """SIGKILL the job's process group (driver and JVM) and reap it."""
        if job.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.process.pid, signal.SIGKILL)
        job.process.wait(timeout=30)
        _reap_group(job.process.pid)
        job.kills += 1
        job.process = None

    def restart_exited(self) -> list[Job]:
        """Record and restart every job that ended without being killed."""
        restarted = []
        for job in self.jobs:
            if job.process is not None and job.process.poll() is not None:
                code = job.process.returncode
                _reap_group(job.process.pid)
                job.exits.append(Exit(self.elapsed(), code, _last_line(job.log)))
                self.start(job)
                restarted.append(job)
        return restarted

    def kill_all(self) -> None:
        for job in self.jobs:
            if job.alive:
                self.kill(job)


@dataclass(frozen=True)
class Action:
    """Something done once, `at_s` seconds into the chaos (a broker restart, a backfill), in
    its own thread: the kills go on meanwhile."""

    at_s: float
    name: str
    run: Callable[[], None]


@dataclass
class ChaosReport:
    kills: int = 0  # during the chaos; the final `Supervisor.kill_all` is not counted
    restarts: int = 0
    actions: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # actions that raised


class _Running(threading.Thread):
    def __init__(self, action: Action, report: ChaosReport, begin: float) -> None:
        super().__init__(name=action.name, daemon=True)
        self.action, self.report, self.begin = action, report, begin

    def run(self) -> None:
        started = time.monotonic() - self.begin
        try:
            self.action.run()
        except Exception as exc:  # reported, and the test fails on it
            self.report.failures.append(f"{self.action.name}: {exc!r}")
        took = time.monotonic() - self.begin - started
        self.report.actions.append(f"{self.action.name} at {started:.0f} s ({took:.0f} s)")


def chaos(
    supervisor: Supervisor,
    duration_s: float,
    rng: random.Random,
    actions: Sequence[Action] = (),
    kill_every_s: tuple[float, float] = (4.0, 12.0),
    restart_after_s: tuple[float, float] = (1.0, 8.0),
    max_kills: int = 1_000_000,
) -> ChaosReport:
    """For `duration_s`: SIGKILL a random running job every `kill_every_s` (uniform), at most
    `max_kills` in all, start it again after `restart_after_s`, run each action at its time,
    and restart any job that ended by itself. Returns when the time is up and every action has
    finished, every job running."""
    report = ChaosReport()
    threads: list[_Running] = []
    pending = sorted(actions, key=lambda a: a.at_s)
    begin = time.monotonic()
    next_kill = begin + rng.uniform(*kill_every_s)
    restarts: list[tuple[float, Job]] = []
    while (now := time.monotonic()) < begin + duration_s or any(t.is_alive() for t in threads):
        report.restarts += len(supervisor.restart_exited())
        if pending and now - begin >= pending[0].at_s:
            threads.append(_Running(pending.pop(0), report, begin))
            threads[-1].start()
        due = [entry for entry in restarts if entry[0] <= now]
        for entry in due:
            restarts.remove(entry)
            supervisor.start(entry[1])
        if now >= next_kill and report.kills < max_kills:
            running = [job for job in supervisor.jobs if job.alive]
            if running:
                victim = rng.choice(running)
                supervisor.kill(victim)
                report.kills += 1
                restarts.append((now + rng.uniform(*restart_after_s), victim))
            next_kill = now + rng.uniform(*kill_every_s)
        time.sleep(0.2)
    for _, job in restarts:
        supervisor.start(job)
    return report


def _lower_group_priority(pid: int, nice: int) -> None:
    """Give the autogroup of `pid`'s session the scheduling priority `nice` (where the kernel
    has autogroups; `Popen` returns after the child's `setsid`, so the group is its own)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


def _reap_group(pgid: int) -> None:
    """Make sure nothing of a job's group outlives it (a JVM its driver left behind)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""
