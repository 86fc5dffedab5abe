"""The one map from what went wrong to an exit code, for the jobs and the `lakehouse` CLI alike.

Every anticipated failure is a `LakehouseError` whose class says its exit code; its message is
one line naming the problem and the fix. Layers subclass the categories below where they raise
(`bronze.offsets.DataLossError`, `quality.expectations.ExpectationFailed`, ...), so a new error
gets the right exit code by choosing its parent, not by editing a table of exceptions.

| code | meaning                                                                   |
|------|---------------------------------------------------------------------------|
| 0    | success                                                                   |
| 1    | the job failed (a Spark error, logged above) or a check it ran failed     |
| 2    | a bad flag or config: nothing ran                                         |
| 3    | Kafka no longer holds offsets the job needs: nothing written              |
| 4    | a destructive operation on a protected table was refused                  |
| 5    | the data broke a table's contract (a `fail` expectation, schema drift)    |
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_DATA_LOSS = 3
EXIT_PROTECTED = 4
EXIT_CONTRACT = 5


class LakehouseError(Exception):
    """An anticipated failure: one line for the user, no traceback."""

    exit_code = EXIT_FAILED


class UsageError(LakehouseError, ValueError):
    """A bad flag, config or declaration; nothing ran."""

    exit_code = EXIT_USAGE


class ServiceError(UsageError):
    """A service could not be installed, started, stopped, reached or used (Kafka Connect's
    REST API, a local dev-stack service): one clear line."""


class ServiceUnreachable(ServiceError):
    """A service that answers nothing (Kafka Connect's REST API down): the configuration may
    be right and the service back soon, so a scheduler's retry may succeed (exit 1)."""

    exit_code = EXIT_FAILED


class DataLoss(LakehouseError):
    """Data the job needs no longer exists at its source."""

    exit_code = EXIT_DATA_LOSS


class Refused(LakehouseError):
    """A destructive operation on a protected table was refused."""

    exit_code = EXIT_PROTECTED


class ContractViolation(LakehouseError):
    """The data broke a table's declared contract; nothing of the batch was committed."""

    exit_code = EXIT_CONTRACT


class CheckFailed(LakehouseError):
    """A check the user asked for ran and failed (e.g. `lakehouse validate`)."""

    exit_code = EXIT_FAILED


def verdict(exc: BaseException) -> tuple[str, int, bool]:
    """(the one line to print, the exit code, whether to log the traceback) for `exc`.

    Anything unexpected exits 1 with its first line, its traceback logged above; a stray
    `ValueError` from a library underneath (a malformed argument it was handed) exits 2."""
    if isinstance(exc, LakehouseError):
        return str(exc), exc.exit_code, False
    text = str(exc).strip()
    newer = next((c for c in NEWER_DELTA if f"[{c}]" in text), None)
    if newer is not None:
        return _newer_delta(text, newer), EXIT_FAILED, False
    first = text.splitlines()[0] if text else type(exc).__name__
    code = EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED
    return f"{type(exc).__name__}: {first}", code, True


def one_line(message: object, limit: int = 400) -> str:
    """`message` on one line, at most `limit` characters."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Delta's error classes for a table whose protocol (version or table features) this Delta
# Lake does not support: it was written, or upgraded, by a newer one.
NEWER_DELTA = (
    "DELTA_INVALID_PROTOCOL_VERSION",
    "DELTA_UNSUPPORTED_FEATURES_FOR_READ",
    "DELTA_UNSUPPORTED_FEATURES_FOR_WRITE",
)


def _newer_delta(text: str, error_class: str) -> str:
    """A Delta table written by a newer Delta Lake (a protocol this one cannot read or write):
    what Delta says, and the fix, instead of a stack."""
    from lakehouse.core.versions import DELTA_VERSION

    said = one_line(text.split(f"[{error_class}]", 1)[1].split("SQLSTATE")[0], 300)
    return (
        f"a Delta table needs a newer Delta Lake than this job's {DELTA_VERSION} ({said}); "
        "upgrade delta-spark (lakehouse/core/versions.py and pyproject.toml) to the version "
        "that wrote it, or write the table with this one"
    )
