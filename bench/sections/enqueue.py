"""The ``enqueue`` section: one item per statement, and enqueue_many, beside raw INSERTs."""

from __future__ import annotations

import statistics
import time
import uuid

from bench import rawsql
from bench.harness import (
    ThrowawayDatabase,
    reset,
)
from bench.report import Options, Report


def bench_enqueue(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    from workqueue.models import WorkItem

    singles, bulks = [], []
    for _ in range(opts.runs):
        reset()
        tag = uuid.uuid4().hex[:6]
        started = time.perf_counter()
        for i in range(opts.enqueue_single):
            WorkItem.objects.enqueue("demo.noop", f"s-{tag}-{i}")
        singles.append(opts.enqueue_single / (time.perf_counter() - started))
        reset()
        started = time.perf_counter()
        for base in range(0, opts.enqueue_bulk, 1000):
            WorkItem.objects.enqueue_many(
                [("demo.noop", f"b-{tag}-{base + i}") for i in range(min(1000, opts.enqueue_bulk - base))]
            )
        bulks.append(opts.enqueue_bulk / (time.perf_counter() - started))
    reset()
    raw_single = rawsql.insert_single(db.conninfo, opts.enqueue_single, "raw.insert")
    reset()
    raw_bulk = rawsql.insert_bulk(db.conninfo, opts.enqueue_bulk, "raw.insert")
    report.add("enqueue, one item per statement+commit", statistics.median(singles), "items/s", raw_single)
    report.add("enqueue_many, 1,000 items per statement", statistics.median(bulks), "items/s", raw_bulk)
