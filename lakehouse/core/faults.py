"""Named fault points for crash tests: `LAKEHOUSE_FAULT=<name>` makes the process SIGKILL
itself when it reaches the point of that name, exactly between two commits, which no outside
timing can hit reliably. Unset (always, outside the tests) a point does nothing."""

from __future__ import annotations

import os
import signal

FAULT_ENV = "LAKEHOUSE_FAULT"


def point(name: str) -> None:
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
