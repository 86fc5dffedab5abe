"""Demo pipeline job: Kafka -> Spark -> Delta.

spark-submit $(lakehouse spark-submit-args) jobs/demo_pipeline.py --events 10
.venv/bin/python jobs/demo_pipeline.py --events 10
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="produce sample orders, ingest them to Delta")
    parser.add_argument("--env", default="local", help="config overlay conf/ENV and .env.ENV")
    parser.add_argument("--events", type=int, default=10, help="sample events to produce")
    args = parser.parse_args(argv)

    from lakehouse import demo
    from lakehouse.settings import SettingsError, load_settings
    from lakehouse.spark import build_session

    try:
        settings = load_settings(args.env)
    except SettingsError as exc:
        print(f"demo_pipeline: {exc}", file=sys.stderr)
        return 2
    spark = build_session(settings, "demo_pipeline")
    try:
        demo.run(spark, settings, events=args.events)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
