r"""Corrected records replace closed buckets of an offline table in one commit; the boundary
follows the newest offline data.

    source .venv/bin/activate
    spark-submit --master 'local[2]' $(lakehouse spark-submit-args) jobs/backfill.py \
        --table orders_offline --input fixed/ --from 2026-01-01 --to 2026-01-02 --dry-run
    python jobs/backfill.py --table orders_offline --input fixed.jsonl \
        --from 2026-01-01T00:00Z --to 2026-01-01T04:00Z --reason 'refunds re-priced'
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from lakehouse.core.jobs import run_job
    from lakehouse.offline.backfill import backfill_parser, options_from_args, run

    args = backfill_parser().parse_args(argv)
    options = options_from_args(args)
    return run_job(
        "backfill",
        args.env,
        lambda spark, settings: run(spark, settings, options),
        trigger=args.trigger,
        verbose=args.verbose,
    )


if __name__ == "__main__":
    sys.exit(main())
