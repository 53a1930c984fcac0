"""The queue dashboard's numbers: one snapshot of every queue, self-hosted environment and sweep.

``snapshot()`` reads the database clock once and runs each statement of
``sql/dashboard.sql`` once for that instant, so every number on a page agrees with the others.
Each statement reads only the live part of ``work_items`` (partial indexes) and the last hour
of settlements, so the page costs the same on a table of millions of stopped rows.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS

from workqueue import controls, handlers, stats, store
from workqueue.conf import wq_settings

#: The chart covers the last hour in buckets of this many seconds (from workqueue.stats.minutes).
BUCKET_SECONDS = 300
BUCKETS = 3600 // BUCKET_SECONDS
#: Self-hosted environments listed on the page (the rest are counted, not listed).
ENVIRONMENT_LIMIT = 50
SWEEPS = ("recover", "reap")


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's row on the dashboard (zeros for a configured queue with no items)."""

    name: str
    ready: int = 0
    scheduled: int = 0
    pending: int = 0
    running: int = 0
    stopping: int = 0
    stuck: int = 0
    #: Items held under a live lease: what ``max_running`` is checked against.
    live_held: int = 0
    #: Seconds the longest-waiting due item has waited since its run_after (None: none due).
    oldest_wait: float | None = None
    max_running: int | None = None
    completed_hour: int = 0
    failed_hour: int = 0
    #: (completed, failed) per 5-minute bucket over the last hour, oldest first.
    buckets: tuple[tuple[int, int], ...] = ((0, 0),) * BUCKETS
    workers_alive: int = 0
    workers_stale: int = 0
    configured: bool = False
    has_handler: bool = False
    #: Active schedules that enqueue into this queue.
    schedules: int = 0
    #: An operator paused it (``manage.py queues pause``, the dashboard): nothing is claimed.
    paused: bool = False
    #: Its flow limits as the claim applies them, and whether each is the setting or an
    #: override (workqueue.controls.Effective; None on the totals row).
    flow: object = None

    @property
    def cap_full(self) -> bool:
        return self.max_running is not None and self.live_held >= self.max_running


@dataclass(frozen=True, slots=True)
class EnvironmentStats:
    """A self_hosted environment as its pollers see it (the wire's stats)."""

    id: str
    name: str
    depth: int = 0
    pending: int = 0
    workers_polling: int = 0


@dataclass(frozen=True, slots=True)
class SweepStatus:
    """The latest ``recover`` or ``reap`` run, and how long ago one last succeeded."""

    name: str
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    ok: bool | None = None
    error: str = ""
    #: Seconds since the latest run started (None: never ran).
    ago: float | None = None
    #: Seconds since the latest successful run started (None: never succeeded).
    ok_ago: float | None = None

    @property
    def running(self) -> bool:
        return self.started_at is not None and self.finished_at is None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the dashboard shows, as of ``now`` (the database clock)."""

    now: dt.datetime
    queues: list[QueueStats]
    totals: QueueStats
    environments: list[EnvironmentStats]
    environments_total: int
    sweeps: list[SweepStatus]
    #: Neither sweep succeeded within MAINTENANCE_WARN_AFTER (cron is missing or failing).
    maintenance_overdue: bool
    maintenance_warn_after: float
    workers_alive: int = 0
    workers_stale: int = 0
    stuck_after: float = 0.0
    worker_stale_after: float = 0.0
    polling_window: float = 0.0


def _queue_counts(conf, now: dt.datetime, using: str) -> dict[str, dict]:
    """Per queue: how many items are in each state now, and how long the oldest ready one waited."""
    held_back = controls.held_back_queues(using=using)
    stats = store.queue_stats(now=now, stuck_after=float(conf.stuck_after), held_back=held_back, using=using)
    return {
        queue: {
            "ready": ready,
            "scheduled": scheduled,
            "pending": pending,
            "running": running,
            "stopping": stopping,
            "stuck": stuck,
            "live_held": live_held,
            "oldest_wait": float(oldest_wait) if oldest_wait is not None else None,
        }
        for queue, ready, scheduled, pending, running, stopping, stuck, live_held, oldest_wait in stats
    }


def _settled_last_hour(now: dt.datetime, using: str) -> dict[str, dict]:
    """Per queue: the last hour's completions and failures in five-minute buckets, and their
    sums, from the per-minute rollup (workqueue.stats) and the minutes it has not reached."""
    out: dict[str, dict] = {}
    for queue, points in stats.minutes(now=now, window=stats.HOUR, using=using).items():
        slots = [[0, 0] for _ in range(BUCKETS)]
        for p in points:
            # A minute goes to the bucket its middle falls in; bucket 0 is the newest five
            # minutes, and the chart reads left (oldest) to right.
            age = (now - p.period).total_seconds() - 30
            slot = slots[BUCKETS - 1 - min(max(int(age // BUCKET_SECONDS), 0), BUCKETS - 1)]
            slot[0] += p.succeeded
            slot[1] += p.failed
        out[queue] = {
            "buckets": tuple((c, f) for c, f in slots),
            "completed_hour": sum(c for c, _ in slots),
            "failed_hour": sum(f for _, f in slots),
        }
    return out


_SUMMED = (
    "ready",
    "scheduled",
    "pending",
    "running",
    "stopping",
    "stuck",
    "live_held",
    "completed_hour",
    "failed_hour",
    "schedules",
)


def _totals(queues: list[QueueStats], *, workers_alive: int, workers_stale: int) -> QueueStats:
    """The all-queues row: counts summed, buckets summed slot by slot, the longest wait."""
    waits = [q.oldest_wait for q in queues if q.oldest_wait is not None]
    return QueueStats(
        name="",
        **{f: sum(getattr(q, f) for q in queues) for f in _SUMMED},
        buckets=tuple(
            (sum(q.buckets[i][0] for q in queues), sum(q.buckets[i][1] for q in queues)) for i in range(BUCKETS)
        ),
        workers_alive=workers_alive,
        workers_stale=workers_stale,
        oldest_wait=max(waits) if waits else None,
    )


def snapshot(*, now: dt.datetime | None = None, using: str = DEFAULT_DB_ALIAS) -> Snapshot:
    """Read the dashboard's numbers for the instant ``now`` (default: the database's now())."""
    conf = wq_settings()
    if now is None:
        now = store.dashboard_clock(using=using)[0][0]

    rows: dict[str, dict] = {}

    def row(queue: str) -> dict:
        return rows.setdefault(queue, {"name": queue})

    control_rows = controls.all_controls(using=using)
    for name in {*conf.queues, *handlers.queues(), *control_rows}:
        row(name).update(configured=name in conf.queues, has_handler=handlers.get(name) is not None)
    for queue, update in _queue_counts(conf, now, using).items():
        row(queue).update(update)

    for queue, update in _settled_last_hour(now, using).items():
        row(queue).update(update)

    alive_all = stale_all = 0
    for queue, alive, stale in store.worker_liveness(now=now, stale_after=float(conf.worker_stale_after), using=using):
        if queue is None:
            alive_all, stale_all = alive, stale
        else:
            row(queue).update(workers_alive=alive, workers_stale=stale)

    for queue, count in store.queue_schedules(using=using):
        if queue is not None:
            row(queue)["schedules"] = count

    queues = []
    for name, values in sorted(rows.items()):
        flow = controls.effective(conf.queue(name), control_rows.get(name))
        queues.append(
            QueueStats(**{**values, "max_running": flow.values["max_running"], "paused": flow.paused, "flow": flow})
        )
    totals = _totals(queues, workers_alive=alive_all, workers_stale=stale_all)

    env_rows = store.environment_stats(now=now, window=float(conf.polling_window), limit=ENVIRONMENT_LIMIT, using=using)
    environments = [
        EnvironmentStats(id=env_id, name=name, depth=depth, pending=pending, workers_polling=polling)
        for env_id, name, depth, pending, polling, _total in env_rows
    ]

    sweeps = [
        SweepStatus(
            name=name,
            started_at=started_at,
            finished_at=finished_at,
            ok=ok,
            error=error or "",
            ago=float(ago) if ago is not None else None,
            ok_ago=float(ok_ago) if ok_ago is not None else None,
        )
        for name, started_at, finished_at, ok, error, ago, ok_ago in store.maintenance_latest(now=now, using=using)
    ]
    warn_after = float(conf.maintenance_warn_after)
    overdue = not any(s.ok_ago is not None and s.ok_ago <= warn_after for s in sweeps)

    return Snapshot(
        now=now,
        queues=queues,
        totals=totals,
        environments=environments,
        environments_total=env_rows[0][5] if env_rows else 0,
        sweeps=sweeps,
        maintenance_overdue=overdue,
        maintenance_warn_after=warn_after,
        workers_alive=alive_all,
        workers_stale=stale_all,
        stuck_after=float(conf.stuck_after),
        worker_stale_after=float(conf.worker_stale_after),
        polling_window=float(conf.polling_window),
    )


def table_estimate(table: str, *, using: str = DEFAULT_DB_ALIAS) -> int | None:
    """The planner's row count for ``table`` (None when it was never analyzed)."""
    rows = store.table_row_estimate(table=table, using=using)
    if not rows or rows[0][0] is None or rows[0][0] < 0:
        return None
    return int(rows[0][0])
