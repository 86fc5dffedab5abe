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
    from lakehouse.core.jobs import ingest_main

    return ingest_main("ingest_cdc", "cdc", __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
