"""The ``io`` section: I/O-bound items on the event loop (async def) and on the threads."""

from __future__ import annotations

import statistics

from bench.harness import (
    ThrowawayDatabase,
    drain_one_queue,
)
from bench.report import Options, Report


def bench_io(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    """I/O-bound work: items that each wait ``io_seconds``, one process, at default settings:
    ``async def`` on the event loop (demo.async_io) vs a sync handler on the threads (demo.sleep)."""
    from workqueue.conf import wq_settings

    meta = {"seconds": str(opts.io_seconds)}
    conf = wq_settings()
    ms = f"{opts.io_seconds * 1000:.0f} ms"
    rates = [drain_one_queue(db, "demo.async_io", opts.io_items, [], metadata=meta) for _ in range(opts.runs)]
    report.add(
        f"I/O-bound: {opts.io_items:,} items awaiting {ms}, async def",
        statistics.median(rates),
        "items/s",
        note=f"1 process, --async-concurrency {conf.async_concurrency} (default)",
    )
    rates = [drain_one_queue(db, "demo.sleep", opts.io_items, [], metadata=meta) for _ in range(opts.runs)]
    report.add(
        f"I/O-bound: {opts.io_items:,} items sleeping {ms}, threads",
        statistics.median(rates),
        "items/s",
        note=f"1 process, --concurrency {conf.concurrency} (default)",
    )
