"""A Spark standalone cluster on loopback: one master and one worker, from the Spark that
PySpark ships (`lakehouse services start spark`), to run the jobs the way a cluster runs them:

    spark-submit --master spark://127.0.0.1:17077 $(lakehouse spark-submit-args) jobs/...

Not part of `services start all`: the jobs, the demo and the tests run on `local[2]`. The
worker starts with the venv taken out of its environment, so executors run the system's
`python3` and import the library from the archive spark-submit ships (`--py-files`), as on a
real cluster. Logs: `.lakehouse/logs/spark-master.log`, `spark-worker.log`; executors' output
under `.lakehouse/spark/work/`.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from lakehouse.core.settings import Settings
from lakehouse.core.versions import SCALA_BINARY
from lakehouse.devstack.jvm import JvmServer, describe, start_jvm, stop_jvm
from lakehouse.devstack.processes import StatePaths, state_paths

HOST = "127.0.0.1"
MASTER_PORT = 17077
MASTER_UI_PORT = 18080
WORKER_UI_PORT = 18081
MASTER_URL = f"spark://{HOST}:{MASTER_PORT}"
# What the one worker offers: both cores, and memory for two 1g executors.
WORKER_CORES = 2
WORKER_MEMORY = "3g"
_START_TIMEOUT = 90.0
_SETTING = "the constants of lakehouse/devstack/cluster.py"


def spark_home() -> Path:
    """The Spark distribution inside the installed PySpark (jars/, bin/, python/lib/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def master_state() -> dict[str, object] | None:
    """The master's JSON status (workers, running and completed applications), or None."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{MASTER_UI_PORT}/json/", timeout=5) as reply:
            state: dict[str, object] = json.load(reply)
            return state
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _worker_alive() -> bool:
    state = master_state()
    return bool(state and int(str(state.get("aliveworkers", 0))) >= 1)


def _servers(paths: StatePaths) -> tuple[JvmServer, JvmServer]:
    jars, work = spark_home() / "jars", paths.state / "spark"
    master = JvmServer(
        "spark-master",
        "Spark master",
        jars,
        "org.apache.spark.deploy.master.Master",
        work,
        ports=((HOST, MASTER_PORT, _SETTING), (HOST, MASTER_UI_PORT, _SETTING)),
        ready=lambda: master_state() is not None,
    )
    worker = JvmServer(
        "spark-worker",
        "Spark worker",
        jars,
        "org.apache.spark.deploy.worker.Worker",
        work,
        ports=((HOST, WORKER_UI_PORT, _SETTING),),
        ready=_worker_alive,
    )
    return master, worker


def _clean_env() -> dict[str, str]:
    """The environment of the daemons (and so of the executors): no trace of the venv this
    command runs from, so an executor that needed it would fail here as on a real cluster."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
    }
    env.update(
        {
            "PATH": path,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            # The worker's launcher asks it (spark-class sets it; PySpark's Spark has no build
            # directories to find it from).
            "SPARK_SCALA_VERSION": SCALA_BINARY,
        }
    )
    return env


def start_cluster(settings: Settings, *, timeout: float = _START_TIMEOUT) -> None:
    """Start the master, then the worker; each is a no-op when already running."""
    paths = state_paths()
    master, worker = _servers(paths)
    work = paths.state / "spark" / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = _clean_env()

    def master_args() -> list[str]:
        return ["--host", HOST, "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)]

    def worker_args() -> list[str]:
        return [
            *("--host", HOST, "--webui-port", str(WORKER_UI_PORT)),
            *("--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY),
            *("--work-dir", str(work), MASTER_URL),
        ]

    start_jvm(master, paths, master_args, env=env, timeout=timeout)
    start_jvm(worker, paths, worker_args, env=env, timeout=timeout)


def stop_cluster(settings: Settings) -> None:
    """Stop the worker (and its executors), then the master; fine when not running."""
    paths = state_paths()
    stop_jvm("spark-worker", "Spark worker", paths)
    stop_jvm("spark-master", "Spark master", paths)


def cluster_status(settings: Settings) -> str:
    """`running (pid N, spark://...)`, `, no worker` when the worker has not registered."""
    return describe(
        "spark-master",
        state_paths(),
        _worker_alive,
        installed=True,
        where=MASTER_URL,
        unready="no worker registered",
    )
