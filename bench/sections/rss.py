"""The ``rss`` section: a worker's resident memory after warm-up and after a long drain."""

from __future__ import annotations

from bench.harness import (
    ThrowawayDatabase,
    Workers,
    reset,
    wait_drained,
)
from bench.report import Options, Report


def bench_rss(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    from workqueue.models import WorkItem

    reset()
    workers = Workers(
        db.url, 1, ["--queue", "demo.noop", "--batch", str(opts.batch), "--concurrency", str(opts.concurrency)]
    )
    try:
        workers.wait_ready()
        # Warm up with a first batch so the start figure includes loaded code and caches.
        WorkItem.objects.enqueue_many([("demo.noop", f"warm-{i}") for i in range(min(5_000, opts.rss_items))])
        wait_drained("demo.noop", 120)
        before = workers.rss()[0]
        for base in range(0, opts.rss_items, 10_000):
            WorkItem.objects.enqueue_many(
                [("demo.noop", f"rss-{base + i}") for i in range(min(10_000, opts.rss_items - base))]
            )
            wait_drained("demo.noop", 300)
        after = workers.rss()[0]
    finally:
        workers.stop()
    report.add("worker RSS after warm-up", before, "MB")
    report.add(
        f"worker RSS after draining {opts.rss_items:,} more", after, "MB", note=f"{(after / before - 1) * 100:+.1f}%"
    )
