r"""Closed time buckets of a realtime (silver) table -> its offline table; the boundary moves.

    source .venv/bin/activate
    spark-submit --master 'local[2]' $(lakehouse spark-submit-args) \
        jobs/realtime_to_offline.py --table orders_offline
    python jobs/realtime_to_offline.py --table orders_offline --now 2026-01-01T06:00:00Z
    python jobs/realtime_to_offline.py --table orders_offline --trigger continuous --interval 5m
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from lakehouse.core.jobs import run_job
    from lakehouse.offline.move import move_parser, options_from_args, run

    args = move_parser().parse_args(argv)
    options = options_from_args(args)
    return run_job(
        "realtime_to_offline",
        args.env,
        lambda spark, settings: run(spark, settings, options),
        trigger=args.trigger,
        verbose=args.verbose,
    )


if __name__ == "__main__":
    sys.exit(main())
