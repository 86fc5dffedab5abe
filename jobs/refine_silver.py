r"""Bronze Change Data Feed -> silver (parsed, checked, upserted or CDC-applied, idempotent).

    source .venv/bin/activate
    spark-submit --master 'local[2]' $(lakehouse spark-submit-args) \
        jobs/refine_silver.py --table orders
    python jobs/refine_silver.py --table customers --trigger continuous
    python jobs/refine_silver.py --table orders --full-refresh
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from lakehouse.core.jobs import run_job
    from lakehouse.silver.refine import options_from_args, refine, refine_parser

    args = refine_parser().parse_args(argv)
    options = options_from_args(args)
    return run_job(
        "refine_silver",
        args.env,
        lambda spark, settings: refine(spark, settings, options),
        trigger=args.trigger,
        verbose=args.verbose,
    )


if __name__ == "__main__":
    sys.exit(main())
