r"""Debezium CDC topics -> bronze (append-only Delta, raw envelope kept, exactly once).

    source .venv/bin/activate
    spark-submit --master 'local[2]' $(lakehouse spark-submit-args) \
        jobs/ingest_cdc.py --source customers
    python jobs/ingest_cdc.py --source customers --trigger continuous
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from lakehouse.bronze.ingest import ingest, ingest_parser, options_from_args
    from lakehouse.core.jobs import run_job

    job = "ingest_cdc"
    args = ingest_parser(job, __doc__.splitlines()[0]).parse_args(argv)
    options = options_from_args(args)
    return run_job(
        job,
        args.env,
        lambda spark, settings: ingest(spark, settings, options, "cdc"),
        trigger=args.trigger,
        verbose=args.verbose,
    )


if __name__ == "__main__":
    sys.exit(main())
