"""Kafka JSON events -> bronze (append-only Delta, raw bytes kept, exactly once).

spark-submit $(lakehouse spark-submit-args) jobs/ingest_events.py --source orders
.venv/bin/python jobs/ingest_events.py --source orders --trigger continuous
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from lakehouse.ingest import IngestOptions, ingest
    from lakehouse.jobs import ingest_parser, run_job

    args = ingest_parser("ingest_events", __doc__.splitlines()[0]).parse_args(argv)
    options = IngestOptions(
        args.source, args.start_from, args.trigger, args.historical, args.allow_data_loss
    )
    return run_job("ingest_events", args.env, lambda s, c: ingest(s, c, options, "events"))


if __name__ == "__main__":
    sys.exit(main())
