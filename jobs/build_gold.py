r"""Silver table or hybrid view -> gold table: the groups a change touched are recomputed and
MERGEd, so gold always equals a full recompute of its source.

    source .venv/bin/activate
    spark-submit --master 'local[2]' $(lakehouse spark-submit-args) \
        jobs/build_gold.py --table daily_revenue
    python jobs/build_gold.py --table daily_revenue --trigger continuous
    python jobs/build_gold.py --table daily_revenue --full-refresh
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from lakehouse.core.jobs import run_job
    from lakehouse.gold.build import gold_parser, options_from_args, run

    args = gold_parser().parse_args(argv)
    options = options_from_args(args)
    return run_job(
        "build_gold",
        args.env,
        lambda spark, settings: run(spark, settings, options),
        trigger=args.trigger,
        verbose=args.verbose,
    )


if __name__ == "__main__":
    sys.exit(main())
