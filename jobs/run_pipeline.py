r"""Several jobs of the pipeline in one driver: every step of `lakehouse pipeline` (or those
named with --only), each in a thread and a Spark session of its own.

    source .venv/bin/activate
    python jobs/run_pipeline.py --trigger continuous
    python jobs/run_pipeline.py --trigger continuous \
        --only ingest_events.orders --only refine_silver.orders --trigger-interval '1 second'
    spark-submit --master 'local[2]' $(lakehouse spark-submit-args) jobs/run_pipeline.py
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from lakehouse.core.jobs import base_parser, run_job
    from lakehouse.together import PipelineOptions, run_pipeline

    parser = base_parser("run_pipeline", __doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="JOB.NAME",
        help="run only this step (repeatable; `lakehouse pipeline` lists them), "
        "e.g. refine_silver.orders",
    )
    parser.add_argument(
        "--trigger-interval",
        default=None,
        help="the refine streams' micro-batch interval (continuous; default: refine_silver's); "
        "the ingests take theirs from sources.yml",
    )
    args = parser.parse_args(argv)
    options = PipelineOptions(args.env, args.trigger, tuple(args.only), args.trigger_interval)
    return run_job(
        "run_pipeline",
        args.env,
        lambda spark, settings: run_pipeline(spark, settings, options),
        trigger=args.trigger,
        verbose=args.verbose,
    )


if __name__ == "__main__":
    sys.exit(main())
