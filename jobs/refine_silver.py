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
    from lakehouse.core.jobs import refine_main

    return refine_main(argv)


if __name__ == "__main__":
    sys.exit(main())
