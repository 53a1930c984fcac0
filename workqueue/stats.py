"""The settlement rollup: per queue, a row per minute and per hour of what settled (succeeded,
failed) and how long it waited and ran, so the dashboard's last hour and the charts cost the
same on a table of any size.

- ``rollup()`` writes the minutes since the newest rolled-up one (the items' rows in that range,
  read through ``work_items_stopped_idx``) and rewrites the hours they fall in. ``recover``
  and ``reap`` run it (whichever cron runs first), so the rollup is at most a sweep's
  interval behind; a minute is rolled up once it ended ``LAG`` seconds ago.
- ``minutes()`` and ``hours()`` read the series: the rolled-up rows, and the items' own rows
  for the minutes the rollup has not reached yet, so a page is never stale and never counts a
  minute twice. With no rollup at all (no cron), they read the items, as before.
- ``prune()`` (``reap``) forgets minutes after ``MINUTES_KEPT`` and hours after ``HOURS_KEPT``.

Durations are kept as histograms (``HIST_BUCKETS`` half-powers of two of milliseconds), so a
percentile of any window is the sum of its rows' histograms: ``percentile()`` answers with
the upper bound of the bucket it falls in (within a factor of 1.42).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, transaction

from workqueue import store
from workqueue.models import HIST_BUCKETS

#: A minute is rolled up once it ended this many seconds ago (a settle commits well within it).
LAG = 5.0
#: A first rollup (or one after a long pause) starts at most this far back.
BACKFILL = 3600.0
MINUTES_KEPT = 2 * 86400.0
HOURS_KEPT = 8 * 86400.0
HOUR = 3600.0
LOCK = "workqueue.stats.rollup"
WEEK = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class Point:
    """One queue's (or all queues') settlements in one minute or hour."""

    period: dt.datetime
    succeeded: int = 0
    failed: int = 0
    wait: tuple[int, ...] = (0,) * HIST_BUCKETS
    run: tuple[int, ...] = (0,) * HIST_BUCKETS

    def __add__(self, other: Point) -> Point:
        return Point(
            self.period,
            self.succeeded + other.succeeded,
            self.failed + other.failed,
            tuple(a + b for a, b in zip(self.wait, other.wait, strict=True)),
            tuple(a + b for a, b in zip(self.run, other.run, strict=True)),
        )


def rollup(*, using: str = DEFAULT_DB_ALIAS, now: dt.datetime | None = None) -> int:
    """Roll up the minutes that ended since the last rollup; how many minute rows it wrote.

    One rollup at a time (``recover`` and ``reap`` from the same crontab minute would write the
    same rows): a transaction-scoped advisory lock, and a rollup that does not get it skips."""
    with transaction.atomic(using=using):
        if not store.maintenance_try_lock(name=LOCK, using=using)[0][0]:
            return 0
        ((since, until),) = store.stats_window(now=now, backfill=BACKFILL, lag=LAG, using=using)
        if since >= until:
            return 0
        written = store.stats_rollup_minutes(since=since, until=until, using=using)
        store.stats_rollup_hours(since=since, using=using)
        return written


def prune(*, using: str = DEFAULT_DB_ALIAS, now: dt.datetime | None = None) -> int:
    """Forget rolled-up minutes and hours past their keep; how many rows."""
    return store.stats_prune(now=now, minutes_kept=MINUTES_KEPT, hours_kept=HOURS_KEPT, using=using)


def _series(rows: Iterable[tuple]) -> dict[str, list[Point]]:
    """Rows (queue, period, succeeded, failed, wait_hist, run_hist) as points per queue, by period."""
    out: dict[str, dict[dt.datetime, Point]] = {}
    for queue, period, succeeded, failed, wait, run in rows:
        point = Point(period, succeeded, failed, tuple(wait), tuple(run))
        known = out.setdefault(queue, {})
        known[period] = known[period] + point if period in known else point
    return {queue: [by[p] for p in sorted(by)] for queue, by in out.items()}


def minutes(*, now: dt.datetime | None = None, window: float = HOUR, using: str = DEFAULT_DB_ALIAS):
    """Per queue, a point per minute (only minutes with settlements) over ``window`` up to ``now``."""
    return _series(store.stats_minutes(now=now, window=window, using=using))


def hours(*, now: dt.datetime | None = None, window: float = WEEK, using: str = DEFAULT_DB_ALIAS):
    """Per queue, a point per hour (as of the last rollup) over ``window`` up to ``now``."""
    return _series(store.stats_hours(now=now, window=window, using=using))


def combined(series: dict[str, list[Point]]) -> list[Point]:
    """All queues' points summed per period."""
    by: dict[dt.datetime, Point] = {}
    for points in series.values():
        for p in points:
            by[p.period] = by[p.period] + p if p.period in by else p
    return [by[p] for p in sorted(by)]


def bucket_bound(b: int) -> float:
    """The upper bound of histogram bucket ``b``, in seconds."""
    return 2 ** ((b + 1) / 2) / 1000


def percentile(hist: Iterable[int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of a histogram, as its bucket's upper bound in seconds;
    None for an empty one."""
    counts = list(hist)
    total = sum(counts)
    if not total:
        return None
    rank, seen = q * total, 0
    for b, n in enumerate(counts):
        seen += n
        if seen >= rank:
            return bucket_bound(b)
    return bucket_bound(len(counts) - 1)
