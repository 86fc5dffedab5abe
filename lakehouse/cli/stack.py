"""`lakehouse setup`, `services` and `demo`: the local dev stack (the only commands that use
it; the jobs and the other commands run without it)."""

from __future__ import annotations

import argparse

from lakehouse.cli.common import Command, with_session
from lakehouse.core.settings import Settings
from lakehouse.devstack import stack

SERVICE_NAMES = (*stack.SERVICES, *stack.ON_DEMAND, "all")


def setup(settings: Settings, _args: argparse.Namespace) -> None:
    stack.install(settings)
    # Creating a session once makes Ivy resolve the Delta and Kafka packages into the cache.
    with_session(settings, "lakehouse-setup", lambda spark: spark.range(1).count())
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
    for name, state in stack.status(settings).items():
        print(f"{name:10s} {state}")


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


COMMANDS = {
    "setup": Command("resolve JVM packages and service jars into .lakehouse/", setup),
    "services": Command("start, stop or inspect the local services", services, _services_arguments),
    "demo": Command("start the services and run the demo pipeline", demo, _demo_arguments),
}
