"""`lakehouse setup`, `services` and `demo`: the local dev stack (the only commands that use
it; the jobs and the other commands run without it)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from lakehouse.cli.common import Command, with_session
from lakehouse.core.settings import Settings, project_root

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
from lakehouse.devstack import stack

SERVICE_NAMES = (*stack.SERVICES, *stack.ON_DEMAND, "all")


def setup(settings: Settings, _args: argparse.Namespace) -> None:
    stack.install(settings)

    # Creating a session once makes Ivy resolve the Delta and Kafka packages into the cache;
    # the jars it resolved are recorded, so later sessions start from them without Ivy.
    def resolve(spark: SparkSession) -> None:
        from lakehouse.core.driver import record_resolution
        from lakehouse.core.spark import ivy_dir

        spark.range(1).count()
        jars = spark.sparkContext.getConf().get("spark.jars", "") or ""
        record_resolution(settings, ivy_dir(settings), jars)

    with_session(settings, "lakehouse-setup", resolve)
    print(f"JVM packages ready in {settings.spark.ivy_dir}: {', '.join(settings.spark.packages)}")


def _services_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("start", "stop", "status"))
    parser.add_argument("name", nargs="?", default="all", choices=SERVICE_NAMES)


def services(settings: Settings, args: argparse.Namespace) -> None:
    if args.action == "start":
        stack.start(settings, args.name)
    elif args.action == "stop":
        stack.stop(settings, args.name)
    print_status(settings)


def print_status(settings: Settings) -> None:
    for name, state in services_status(settings).items():
        print(f"{name:10s} {state}")


def services_status(settings: Settings) -> dict[str, str]:
    """Each local service's state: `running (pid N, <where>)` or `stopped`."""
    return stack.status(settings)


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--events", type=int, default=10, help="how many sample events (default 10)"
    )


def demo(settings: Settings, args: argparse.Namespace) -> None:
    from lakehouse.devstack import demo

    stack.start_all(settings)
    with_session(
        settings, "lakehouse-demo", lambda spark: demo.run(spark, settings, events=args.events)
    )


def _notebook_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8888, help="port on 127.0.0.1 (default 8888)")


def notebook(settings: Settings, args: argparse.Namespace) -> None:
    """JupyterLab on 127.0.0.1 over `notebooks/`, its kernel this venv's Python; the notebooks'
    `open_lakehouse()` then loads the same settings (`--env`) and builds the jobs' session."""
    root = project_root()
    argv = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={args.port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root / 'notebooks'}",
    ]
    if os.geteuid() == 0:  # a container's or a CI machine's only user
        argv.append("--allow-root")
    env = {**os.environ, "LAKEHOUSE_HOME": str(root), "LAKEHOUSE_ENV": settings.env}
    print(f"JupyterLab on http://127.0.0.1:{args.port}/ (the URL with its token follows)")
    sys.stdout.flush()
    os.execve(sys.executable, argv, env)  # noqa: S606 - our venv's Python, fixed arguments


COMMANDS = {
    "setup": Command("resolve JVM packages and service jars into .lakehouse/", setup),
    "services": Command("start, stop or inspect the local services", services, _services_arguments),
    "demo": Command("start the services and run the demo pipeline", demo, _demo_arguments),
    "notebook": Command(
        "JupyterLab on 127.0.0.1 over notebooks/ with the project's session",
        notebook,
        _notebook_arguments,
    ),
}
