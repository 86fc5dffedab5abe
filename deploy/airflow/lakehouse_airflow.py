"""What the lakehouse DAGs share: where the lakehouse is, and the `LakehouseJob` operator that
spark-submits one of its jobs with the options `lakehouse spark-submit-args` prints.

Airflow runs in its own environment; the lakehouse keeps its own (its `.venv`): the DAGs reach
it only through its `lakehouse` command and `spark-submit`, as an operator would by hand.

Environment of the scheduler and workers (all optional):
    LAKEHOUSE_HOME            the lakehouse checkout or deployment (default: two folders up)
    LAKEHOUSE_ENV             its configuration overlay, `--env` of every job (default: local)
    LAKEHOUSE_SPARK_CONN_ID   the Airflow Spark connection: the master (default: spark_lakehouse)
    LAKEHOUSE_TASK_RETRIES    retries of a failed job (default: 2)
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

HOME = Path(os.environ.get("LAKEHOUSE_HOME") or Path(__file__).resolve().parents[2])
ENV = os.environ.get("LAKEHOUSE_ENV", "local")
CONN_ID = os.environ.get("LAKEHOUSE_SPARK_CONN_ID", "spark_lakehouse")
VENV = HOME / ".venv"
RETRIES = int(os.environ.get("LAKEHOUSE_TASK_RETRIES", "2"))


def job_environment() -> dict[str, str]:
    """What spark-submit and the driver need on top of the worker's environment: the
    lakehouse's venv first on PATH (its spark-submit, and the python3 the driver runs) and
    where the lakehouse is (its conf/ and .env)."""
    path = os.environ.get("PATH", "")
    return {
        "PATH": f"{VENV / 'bin'}:{path}",
        "VIRTUAL_ENV": str(VENV),
        "LAKEHOUSE_HOME": str(HOME),
    }


def lakehouse(*args: str) -> str:
    """`lakehouse --env ENV ARGS`'s output; a failure raises with its last line."""
    done = subprocess.run(
        [str(VENV / "bin" / "lakehouse"), "--env", ENV, *args],
        cwd=HOME,
        env={**os.environ, **job_environment()},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"lakehouse {' '.join(args)} exited {done.returncode}: {last}")
    return done.stdout


def pipeline_steps() -> list[dict[str, Any]]:
    """The jobs of one pipeline run, stage by stage, from the lakehouse's configuration."""
    steps: list[dict[str, Any]] = json.loads(lakehouse("pipeline", "--json"))
    return steps


def submit_options() -> dict[str, Any]:
    """`lakehouse spark-submit-args` as SparkSubmitOperator arguments."""
    words = shlex.split(lakehouse("spark-submit-args"))
    options: dict[str, Any] = {"conf": {}}
    names = {"--jars": "jars", "--packages": "packages", "--py-files": "py_files"}
    for flag, value in zip(words[::2], words[1::2], strict=True):
        if flag == "--conf":
            key, _, setting = value.partition("=")
            options["conf"][key] = setting
        elif flag in names:
            options[names[flag]] = value
        else:
            raise RuntimeError(f"lakehouse spark-submit-args printed {flag!r}, unknown here")
    return options


class LakehouseJob(SparkSubmitOperator):
    """`spark-submit jobs/JOB.py --env ENV ARGS` on the connection's master. The options come
    from `lakehouse spark-submit-args` when the task runs (not when the DAG is parsed), so
    they follow the lakehouse's configuration and version."""

    def __init__(self, *, job: str, args: list[str], **kwargs: Any) -> None:
        super().__init__(
            application=str(HOME / "jobs" / f"{job}.py"),
            application_args=["--env", ENV, *args],
            conn_id=CONN_ID,
            name=f"lakehouse-{job}",
            env_vars=job_environment(),
            **kwargs,
        )

    def execute(self, context: Any) -> None:
        options = submit_options()
        self.conf = {**options["conf"], **(self.conf or {})}
        self.jars = options.get("jars")
        self.packages = options.get("packages")
        self.py_files = options.get("py_files")
        super().execute(context)
