"""`lakehouse`: the operator's command line.

    lakehouse [--env ENV] [--verbose] COMMAND ...   (--verbose: Spark's INFO lines too)

    lakehouse setup                 resolve the JVM packages and service jars (idempotent)
    lakehouse services start|stop|status [kafka|postgres|connect|spark|hdfs|all]
    lakehouse demo                  start the services and run the demo pipeline
    lakehouse notebook [--port N]   JupyterLab on 127.0.0.1 over notebooks/
    lakehouse spark-submit-args     the --packages/--conf a cluster spark-submit needs
    lakehouse pipeline [--json]     the jobs of one pipeline run, stage by stage
    lakehouse status [--json]       services, Kafka lag, per layer what the tables hold
    lakehouse reset TABLE           full refresh (refused for protected tables such as bronze)
    lakehouse unprotect TABLE --reason TEXT / lakehouse protect TABLE   (recorded)
    lakehouse validate TABLE        Great Expectations over a table's current rows, Data Docs;
                                    exit 1 if an expectation failed
    lakehouse replay TABLE [--fix COLUMN=SQL ...] [--where SQL]
                                    re-check quarantined rows (after a repair) and apply those
                                    that now pass to silver
    lakehouse boundary TABLE [--set TS --reason TEXT]
                                    an offline table's time boundary and its history

`main()` only parses arguments; each command (in `lakehouse.cli.stack` for the local services,
`lakehouse.cli.tables` for the tables, `lakehouse.cli.offline` for the boundary) loads
validated settings and calls the library. Errors print one line on stderr and exit with the
code `lakehouse.core.errors` assigns, as the jobs do.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from lakehouse.cli import common, connectors, offline, stack, tables
from lakehouse.cli.common import Command
from lakehouse.core.errors import EXIT_OK
from lakehouse.core.jobs import configure_logging, fail
from lakehouse.core.settings import load_settings

COMMANDS: dict[str, Command] = {
    **stack.COMMANDS,
    **tables.COMMANDS,
    **offline.COMMANDS,
    **connectors.COMMANDS,
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakehouse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="local", help="config overlay conf/ENV and .env.ENV")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also Spark's INFO lines and routine warnings (default: the command's lines, "
        "warnings and errors)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        command.arguments(sub.add_parser(name, help=command.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.verbose)
    common.set_verbose(args.verbose)
    prog = f"lakehouse {args.command}"
    try:
        COMMANDS[args.command].run(load_settings(args.env), args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below
    except BrokenPipeError:
        # The reader closed the pipe (`lakehouse pipeline | head -1`): it has what it wanted.
        # Whatever is still buffered goes nowhere, or Python's flush at exit would fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        return fail(prog, exc)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
