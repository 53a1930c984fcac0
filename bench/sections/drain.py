"""The ``drain`` section: no-op drains by 1 and 2 processes beside the raw-SQL ceiling, plain
`runworker` (every queue) beside the single-queue drain, and drains under flow control."""

from __future__ import annotations

import statistics

from bench import cpu, rawsql
from bench.harness import (
    ThrowawayDatabase,
    drain_once,
    reset,
)
from bench.report import Options, Report

#: Flow-control drain figures: demo.noop under a runtime override (workqueue.controls), items
#: spread over FLOW_GROUPS groups. The per-group cap leaves room for every item two workers
#: hold at once, and the rate is far above what they reach: both measure what the checks
#: cost, not a limit binding.
FLOW_GROUPS = 10
FLOW_CASES = (
    ("max_running_per_group=100, 10 groups", {"max_running_per_group": 100}),
    ("rate=100000/s (not binding), 10 groups", {"rate": "100000/s"}),
)


def bench_drain(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    from workqueue import controls
    from workqueue.models import WorkItem

    raw_by_count = {}
    for count in opts.workers:
        rates, raw_rates, site_rates = [], [], []
        spent, raw_spent, raw_items, site_spent = cpu.Cpu(0.0, 0.0), cpu.Cpu(0.0, 0.0), 0, cpu.Cpu(0.0, 0.0)
        for _ in range(opts.runs):
            reset()
            rate, run_spent = drain_once(db, count, opts.drain_items, opts.batch, opts.concurrency)
            rates.append(rate)
            spent += run_spent
            # The worker a site runs: plain runworker, every queue the demo registers (sync,
            # async def, operations, the @task backends', schedules'), the same backlog.
            reset()
            site_rate, run_site = drain_once(db, count, opts.drain_items, opts.batch, opts.concurrency, site=True)
            site_rates.append(site_rate)
            site_spent += run_site
            reset()
            WorkItem.objects.enqueue_many([("raw.drain", f"r-{i}") for i in range(opts.drain_items)])
            n, raw_rate, run_raw = rawsql.drain(db.conninfo, "raw.drain", connections=count, batch=opts.batch)
            raw_rates.append(raw_rate)
            raw_spent += run_raw
            raw_items += n
        raw_by_count[count] = statistics.median(raw_rates)
        paired = statistics.median(r / raw for r, raw in zip(rates, raw_rates, strict=True))
        report.add(
            f"drain, {count} runworker process{'es' if count > 1 else ''} (no-op)",
            statistics.median(rates),
            "items/s",
            raw_by_count[count],
            f"batch {opts.batch}, concurrency {opts.concurrency}; ratio: median of {opts.runs} paired runs",
            spent=spent,
            spent_items=opts.drain_items * opts.runs,
            raw_spent=raw_spent,
            raw_spent_items=raw_items,
            paired_ratio=paired,
        )
        report.add(
            f"drain, {count} plain runworker{'s' if count > 1 else ''} (every queue, no-op)",
            statistics.median(site_rates),
            "items/s",
            statistics.median(rates),
            "no --queue: the demo's whole registry; ratio: to the single-queue drain above, median of paired runs",
            spent=site_spent,
            spent_items=opts.drain_items * opts.runs,
            paired_ratio=statistics.median(r / one for r, one in zip(site_rates, rates, strict=True)),
        )
    count = max(opts.workers)
    for label, limits in FLOW_CASES:
        controls.write("demo.noop", limits=limits, by="benchqueue")
        try:
            rates = []
            for _ in range(opts.runs):
                reset()
                rates.append(
                    drain_once(db, count, opts.drain_items, opts.batch, opts.concurrency, groups=FLOW_GROUPS)[0]
                )
        finally:
            controls.write("demo.noop", clear=list(limits), by="benchqueue")
        report.add(
            f"drain, {count} runworker processes, {label}",
            statistics.median(rates),
            "items/s",
            raw_by_count[count],
            "a runtime override; ratio to the plain raw-SQL drain",
        )
