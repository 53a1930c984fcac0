"""The ``schedules`` section: many interval schedules due at once, fired by 2 workers."""

from __future__ import annotations

import statistics
import time

from django.db import transaction

from bench.harness import (
    ThrowawayDatabase,
    Workers,
    reset,
)
from bench.report import Options, Report


def bench_schedules(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    """``opts.schedules`` interval schedules all due at once; 2 workers' scheduler loops fire them."""
    import datetime as dt

    from workqueue import schedules
    from workqueue.models import Schedule

    rates, took = [], []
    for _ in range(opts.runs):
        reset()
        workers = Workers(db.url, 2, ["--queue", "demo.noop", "--concurrency", str(opts.concurrency)])
        try:
            workers.wait_ready()
            now = schedules.db_now()
            hour = 3600
            due = schedules.Timing(every=hour).newest(now, 1, now - dt.timedelta(hours=1))[0]
            with transaction.atomic():
                Schedule.objects.bulk_create(
                    Schedule(
                        name=f"bench-{n}",
                        queue="demo.noop",
                        every=hour,
                        timezone="UTC",
                        next_slot=due,
                        source="admin",
                    )
                    for n in range(opts.schedules)
                )
                started = time.perf_counter()
                schedules.notify_changed()  # at commit: every scheduler loop wakes
            deadline = time.monotonic() + max(60, opts.schedules / 20)
            while Schedule.objects.filter(name__startswith="bench-", last_slot__isnull=True).exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("the schedules were not all fired:\n" + workers.output())
                time.sleep(0.01)
            elapsed = time.perf_counter() - started
            took.append(elapsed)
            rates.append(opts.schedules / elapsed)
            fired = Schedule.objects.filter(name__startswith="bench-").exclude(fired=1).count()
            if fired:
                raise RuntimeError(f"{fired} schedules did not fire exactly once")
        finally:
            workers.stop()
    report.add(
        f"schedules: {opts.schedules:,} due at once, 2 workers, fire all",
        statistics.median(took),
        "s",
        note="notify at commit → every slot enqueued and recorded",
    )
    report.add("schedules: slots fired", statistics.median(rates), "slots/s")
