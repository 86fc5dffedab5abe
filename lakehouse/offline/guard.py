"""A move never undoes a backfill, however the two interleave.

A move decides which buckets a backfill owns (`audit.owned_buckets`) before it writes, and
Delta's conflict check covers only commits made after the write's own snapshot. A backfill
that commits between the two is therefore invisible to both: the move's `replaceWhere` would
replace the backfilled window with realtime rows. Right before it writes, the move therefore
looks again (`backfilled_in`) and leaves out the window of any backfill committed since its
plan, so readers never see that window's realtime rows again (a resume after the write does
not look: it cannot tell what the look saw). A backfill that commits between that look and the
move's write is the one case left; the move closes it after its commit: it finds the backfill
commits that landed between the offline version it planned at and its own commit (each
backfill commit carries a Delta transaction `backfill:<table>:<hash>:<window>`/seq, announced
with its window in `_system/offline_log` before the commit), and puts the rows of the
buckets it overwrote back as they were just before its commit, in one more commit, before the
boundary moves. A backfill that commits after the move simply wins (its commit is later).

The other way round (`restore_moves`): a backfill whose window starts after the boundary also
writes the buckets in between, from the realtime version it read at its start; the gap buckets
a move committed meanwhile are put back as the move left them, right after the backfill's
commit (`offline/gap.py`). What still races with that put-back is left to the next move, which
moves the gap of every backfill committed since its predecessor planned again
(`gaps_committed`).

The commits are read from the offline table's log files directly (`_delta_log/<v>.json`: its
`txn` actions), a few small files per move, no Spark job.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from lakehouse.core import fs, tables
from lakehouse.offline import buckets, store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Txn = tuple[str, int]  # a Delta transaction: (appId, version)
# Every backfill commit's appId starts so (`lakehouse.offline.backfill`): a move reads the
# announcements only when such a commit landed among its own.
BACKFILL_APP = "backfill:"
RESTORE = ":restore"  # the suffix of a put-back's appId


def backfill_app(table: str, digest: str, window: tuple[datetime, datetime]) -> str:
    """A backfill's appId: its input and its window. A rerun after a crash, the same input
    over the same window, has its first run's (Delta skips a write already committed); the
    same input over another window is another write."""
    start, end = (f"{w:%Y%m%dT%H%M%S}" for w in window)
    return f"{BACKFILL_APP}{table}:{digest[:16]}:{start}-{end}"


def is_backfill(app: str) -> bool:
    """A backfill's own commit (announced with its window), not a put-back (`RESTORE`)."""
    return app.startswith(BACKFILL_APP) and RESTORE not in app


@dataclass(frozen=True)
class Announced:
    """A backfill's window, announced before its commit."""

    txn: Txn
    window: tuple[datetime, datetime]
    # A version of the offline table before the commit: the one the backfill read at its
    # start, before the realtime rows of its gap.
    offline_version: int
    gap: tuple[datetime, ...] = ()  # the buckets between the boundary and the window


class Announcements:
    """The backfills announced in `_system/offline_log`, read when first needed and read again
    only when asked about a backfill commit the last read did not know: each backfill is
    announced before it commits, so a read is stale only for a commit that landed after it
    (a put-back that read them before its write must see a backfill committed during it)."""

    def __init__(self, read: Callable[[], list[Announced]]) -> None:
        self._read = read
        self._seen: list[Announced] | None = None

    def __call__(self, commits: Iterable[Txn] = ()) -> list[Announced]:
        known = {a.txn for a in self._seen or ()}
        unknown = any(is_backfill(app) and (app, seq) not in known for app, seq in commits)
        if self._seen is None or unknown:
            self._seen = self._read()
        return self._seen

    def take(self, seen: list[Announced]) -> None:
        """A read of the same log made elsewhere, newer than any before (the log only grows,
        and it is read just before this is called)."""
        self._seen = seen


def txn_commits(spark: SparkSession, path: str, since: int, until: int) -> dict[Txn, int]:
    """The Delta transactions committed in versions (since, until] of the table at `path`,
    with the version of each."""
    log_dir = f"{path.rstrip('/')}/_delta_log"
    found: dict[Txn, int] = {}
    for version in range(since + 1, until + 1):
        name = f"{log_dir}/{version:020d}.json"
        if not fs.exists(spark, name):
            continue  # cleaned up after the log retention: long before any live move
        for line in fs.read_text(spark, name).splitlines():
            action = json.loads(line) if line.strip() else {}
            if "txn" in action:
                found[(action["txn"]["appId"], int(action["txn"]["version"]))] = version
    return found


def commits_since(spark: SparkSession, path: str, version: int) -> dict[Txn, int]:
    """The transactions committed after `version` (a move's plan) up to the latest: read once
    before the write (`backfilled_in`) and once after it (`restore_backfills`)."""
    return txn_commits(spark, path, version, tables.latest_version(spark, path))


def backfilled_in(
    commits: dict[Txn, int],
    announced: Announcements,
    bucket_seconds: int,
) -> set[datetime]:
    """The buckets of the backfills among `commits` (those since a move's plan): its write
    leaves them out. `announced` is read only when a backfill commit is among them."""
    if not any(is_backfill(app) for app, _seq in commits):
        return set()
    return {
        b
        for a in announced(commits)
        if a.txn in commits
        for b in buckets.starts(*a.window, bucket_seconds)
    }


def restore_backfills(
    spark: SparkSession,
    path: str,
    announced: Announcements,
    since: int,
    txn: Txn,
    replaced: Callable[[datetime], bool],
    bucket_seconds: int,
) -> set[datetime]:
    """After the commit of `txn` (a move planned at offline version `since`, or a backfill's
    put-back of its gap, `since` the backfill's commit): the buckets it replaced that a
    backfill had committed after `since`, put back as they were just before it, in one commit
    (idempotent under `<appId>:restore`). Returns those buckets. `announced` (a read of
    `_system/offline_log`) is called only when a backfill committed in between: the usual
    move, alone on the table, reads just its few log files."""
    commits = commits_since(spark, path, since)
    mine = commits.get(txn)
    if mine is None:
        return set()
    before = {t for t, v in commits.items() if v < mine}
    if not any(is_backfill(app) for app, _seq in before):
        return set()
    backfills = announced(before)
    hit = {
        b
        for a in backfills
        if a.txn in before
        for b in buckets.starts(*a.window, bucket_seconds)
        if replaced(b)
    }
    hit -= _backfilled(commits, mine, None, announced, bucket_seconds)
    if hit:
        # No retry on a write conflict: that is a backfill committing to these buckets right
        # now, whose rows must win; the caller fails and its resume (or rerun) decides again.
        # Unless it was this very put-back, committed by another (a move finishing it).
        try:
            _put_back(spark, path, mine, hit, txn)
        except Exception as exc:
            same = (f"{txn[0]}{RESTORE}", txn[1])
            if not tables.is_write_conflict(exc) or same not in commits_since(spark, path, since):
                raise
    return hit


def restore_moves(
    spark: SparkSession,
    path: str,
    since: int,
    txn: Txn,
    move_app: str,
    replaced: Callable[[int, datetime], bool],
    gap: list[datetime],
    announced: Announcements,
    bucket_seconds: int,
    keep_out: frozenset[datetime] = frozenset(),
) -> set[datetime]:
    """After the commit of backfill `txn`, which also wrote the `gap` buckets (between the
    boundary and its window) from the realtime version it read while the offline table was at
    `since`: a move that committed in between wrote those buckets from a newer realtime
    version, and the next move reads changes only since that one, so the backfill's older copy
    would stay. Such buckets are put back as the move left them (from the version just before
    `txn`), in one commit, unless a later move replaced them again or a later backfill's
    window holds them; so are those in the window of a backfill committed in between (it owns
    them: no move would rewrite them). A backfill committing to the gap between that look and
    the put-back is put back in turn (also on a rerun that finds the put-back done).
    `move_app`: the moves' appId; `replaced(n, bucket)`: whether move plan n replaces the
    bucket; `keep_out`: buckets a later run rewrote from a newer realtime version. Returns the
    buckets that keep the move's rows.
    (What this does not see: a move or a later backfill's gap writing them in that moment, a
    move planned after the plans were read. Those keep older rows until the next move, which
    moves the gap of every backfill committed since its predecessor again: `gaps_committed`.)"""
    restore = (f"{txn[0]}{RESTORE}", txn[1])
    for attempt in range(1, _RESTORE_ATTEMPTS + 1):
        commits = commits_since(spark, path, since)
        mine = commits.get(txn)
        if mine is None or not gap:
            return set()
        done = [(n, v) for (app, n), v in commits.items() if app == move_app]
        hit = {b for b in gap for n, v in done if v < mine and replaced(n, b)}
        hit -= {b for b in hit for n, v in done if v > mine and replaced(n, b)}
        # A backfill that committed to the gap after this one read it owns those buckets: the
        # commit wrote over them with the realtime rows, and no move rewrites an owned bucket.
        owned = set(gap) & _backfilled(commits, since, mine, announced, bucket_seconds)
        # A later backfill's gap too: written from a newer realtime version than the move's
        # rows here (a put-back done long after, by a rerun under a new seq).
        later = _backfilled(commits, mine, None, announced, bucket_seconds, gaps=True) | keep_out
        hit, owned = hit - later, owned - later
        if restore not in commits:  # not a rerun after the put-back
            if not hit | owned:
                return hit
            try:
                _put_back(spark, path, mine, hit | owned, txn)
            except Exception as exc:
                # A move writing these buckets right now: its rows are newer still, so look
                # again (it is a later move then) rather than retry the same rows over it.
                if not tables.is_write_conflict(exc):
                    raise
                if attempt < _RESTORE_ATTEMPTS:
                    continue
                # Unless this very put-back committed (a move finishing it): go on from there.
                if restore not in commits_since(spark, path, since):
                    raise
        # Every gap bucket: one the look left alone is rewritten with the same rows.
        won = restore_backfills(
            spark, path, announced, mine, restore, set(gap).__contains__, bucket_seconds
        )
        return hit - owned - won
    raise AssertionError("not reached: the last attempt returns or raises")


def first_announcement(announced: list[Announced], txn: Txn) -> Announced | None:
    """A run's first announcement: a rerun under the same transaction announces again (its
    write skipped as done, the first one's gap is what the commit wrote)."""
    mine = [a for a in announced if a.txn == txn]
    return min(mine, key=lambda a: a.offline_version, default=None)


def backfill_runs(commits: dict[Txn, int]) -> set[Txn]:
    """The backfill runs among `commits` that committed or put rows back (`<appId>:restore`,
    `<appId>:restore:restore`): each as its own transaction."""
    return {(app.split(RESTORE)[0], seq) for app, seq in commits if app.startswith(BACKFILL_APP)}


def gaps_committed(announced: Announcements, runs: set[Txn]) -> set[datetime]:
    """The gap buckets of the backfill `runs` (those committed, or that put a move's rows back,
    since the previous move planned: `backfill_runs`). A move moves them again: each was
    written from a realtime version older than the move's, and whatever raced with it (a move
    between a put-back's look and its write, a move that read past the gap without writing
    it, a rerun under a new transaction) leaves nothing older behind for longer than one
    move."""
    if not runs:
        return set()
    return {b for a in announced(runs) if a.txn in runs for b in a.gap}


def _backfilled(
    commits: dict[Txn, int],
    after: int,
    before: int | None,
    announced: Announcements,
    bucket_seconds: int,
    gaps: bool = False,
) -> set[datetime]:
    """The buckets of the backfills among `commits` that committed in versions (after, before)
    (None: no end), and their gaps with `gaps`. After a commit, a later backfill wins, so
    nothing is put back over it. `announced` is read only when a backfill committed in
    between."""
    inside = [t for t, v in commits.items() if v > after and (before is None or v < before)]
    if not any(is_backfill(app) for app, _seq in inside):
        return set()
    return {
        b
        for a in announced(inside)
        if a.txn in inside
        for b in [*buckets.starts(*a.window, bucket_seconds), *(a.gap if gaps else ())]
    }


def _put_back(spark: SparkSession, path: str, mine: int, hit: set[datetime], txn: Txn) -> None:
    """The `hit` buckets as they were just before version `mine`, in one commit under
    `<appId>:restore` (no retry: the callers decide what a conflict means)."""
    rows = spark.read.format("delta").option("versionAsOf", mine - 1).load(path)
    where = store.bucket_predicate_sql(sorted(hit))
    store.replace_where(rows.where(where), path, where, f"{txn[0]}{RESTORE}", txn[1], False)


_RESTORE_ATTEMPTS = 3
