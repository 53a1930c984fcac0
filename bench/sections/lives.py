"""The ``operations``, ``batch`` and ``tasks`` sections: a life from start to done, 2 workers."""

from __future__ import annotations

import statistics
import time

from bench import cpu, rawsql
from bench.harness import (
    ThrowawayDatabase,
    Workers,
    in_threads,
    reset,
)
from bench.report import Options, Report


def _life(
    opts: Options, db: ThrowawayDatabase, n: int, queue_args: list[str], start_one, done_count
) -> tuple[float, float, cpu.Cpu]:
    """(done/s, started/s, CPU of the 2 workers and their backends) over opts.runs; the
    starters' CPU (threads in this process) is not in it."""
    rates, start_rates = [], []
    spent = cpu.Cpu(0.0, 0.0)
    for _ in range(opts.runs):
        reset()
        workers = Workers(db.url, 2, [*queue_args, "--batch", str(opts.batch), "--concurrency", str(opts.concurrency)])
        try:
            workers.wait_ready()
            meter = workers.meter().start()
            started = time.perf_counter()
            in_threads(n, start_one, opts.starters)
            start_rates.append(n / (time.perf_counter() - started))
            deadline = time.monotonic() + max(60, n / 100)
            while done_count() < n:
                if time.monotonic() > deadline:
                    raise RuntimeError("operations did not finish:\n" + workers.output())
                time.sleep(0.02)
            rates.append(n / (time.perf_counter() - started))
            spent += meter.stop()
        finally:
            workers.stop()
    return statistics.median(rates), statistics.median(start_rates), spent


def bench_operations(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    import operations
    from operations.models import Operation

    rate, start_rate, spent = _life(
        opts,
        db,
        opts.operations,
        ["--queue", "operations"],
        lambda i: operations.start("demo.nothing", None),
        lambda: Operation.objects.succeeded().count(),
    )
    reset()
    raw, raw_n, raw_spent = rawsql.operations_life(db.conninfo, opts.operations, connections=2, batch=opts.batch)
    report.add(
        "operations: start → run no-op → succeeded, 2 workers",
        rate,
        "ops/s",
        raw,
        note=f"started from {opts.starters} threads at {start_rate:,.0f}/s",
        spent=spent,
        spent_items=opts.operations * opts.runs,
        raw_spent=raw_spent,
        raw_spent_items=raw_n,
    )


def bench_batch(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    """One batch of no-op children, fanned in: from batch() to the parent terminal, 2 workers."""
    import operations
    from operations.models import Operation

    n = opts.batch_children
    rates, call_times = [], []
    for _ in range(opts.runs):
        reset()
        workers = Workers(
            db.url, 2, ["--queue", "operations", "--batch", str(opts.batch), "--concurrency", str(opts.concurrency)]
        )
        try:
            workers.wait_ready()
            started = time.perf_counter()
            batch = operations.batch("demo.nothing", [None] * n, then=("demo.nothing", None))
            call_times.append(time.perf_counter() - started)
            deadline = time.monotonic() + max(60, n / 50)
            while not Operation.objects.filter(pk=batch.id).terminal().exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("the batch did not finish:\n" + workers.output())
                time.sleep(0.02)
            rates.append(n / (time.perf_counter() - started))
            state = Operation.objects.get(pk=batch.id).state
            if state != "succeeded":
                raise RuntimeError(f"the bench batch ended {state}")
        finally:
            workers.stop()
    plain = next((r for r in report.rows if r.name.startswith("operations: start")), None)
    beside = f"; plain operations {plain.value:,.0f} ops/s" if plain else ""
    report.add(
        f"batch: {n:,} no-op children → parent done",
        statistics.median(rates),
        "children/s",
        note=f"2 workers; batch() call {statistics.median(call_times):.2f}s{beside}",
    )


def bench_tasks(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    from operations.models import Operation
    from project.demo.tasks import add

    rate, start_rate, spent = _life(
        opts,
        db,
        opts.tasks,
        ["--queue", "tasks.default"],
        lambda i: add.enqueue(i, i),
        lambda: Operation.objects.succeeded().count(),
    )
    report.add(
        "@task: enqueue → run → SUCCESSFUL, 2 workers",
        rate,
        "tasks/s",
        note=f"enqueued from {opts.starters} threads at {start_rate:,.0f}/s",
        spent=spent,
        spent_items=opts.tasks * opts.runs,
    )


def bench_workflows(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    """A 5-step no-op workflow from start to done (runs/s, steps/s) beside a no-op operation,
    2 workers; then workflows waiting on a signal, all signalled at once: until all finished."""
    import operations
    from operations.models import Operation

    n = opts.workflows
    rate, _, spent = _life(
        opts,
        db,
        n,
        ["--queue", "operations"],
        lambda i: operations.start("demo.five_steps", None),
        lambda: Operation.objects.succeeded().count(),
    )
    plain = next((r for r in report.rows if r.name.startswith("operations: start")), None)
    per_step = f"; a step costs {plain.value / (rate * 5):.2f}× a no-op operation" if plain else ""
    report.add(
        "workflows: 5 no-op steps → succeeded, 2 workers",
        rate,
        "runs/s",
        note=f"{rate * 5:,.0f} steps/s{per_step}",
        spent=spent,
        spent_items=n * opts.runs,
    )
    report.add("workflows: a signal-waiting crowd, all signalled at once", *_signalled(opts, db))


def _signalled(opts: Options, db: ThrowawayDatabase) -> tuple[float, str]:
    """Seconds from signalling ``opts.waiting`` waiting workflows to all of them done (median)."""
    import operations
    from operations.models import Operation

    n = opts.waiting
    times = []
    for _ in range(opts.runs):
        reset()
        ids = [operations.start("demo.await_signal", {"timeout": 3600}).id for _ in range(n)]
        workers = Workers(
            db.url, 2, ["--queue", "operations", "--batch", str(opts.batch), "--concurrency", str(opts.concurrency)]
        )
        try:
            workers.wait_ready()
            deadline = time.monotonic() + max(120, n / 20)
            while Operation.objects.filter(pk__in=ids, wait_kind="signal").count() < n:
                if time.monotonic() > deadline:
                    raise RuntimeError("the workflows did not all wait:\n" + workers.output())
                time.sleep(0.05)
            started = time.perf_counter()
            from django.db import transaction

            with transaction.atomic():
                for op_id in ids:
                    operations.signal(op_id, "go", op_id)
            while Operation.objects.filter(pk__in=ids).succeeded().count() < n:
                if time.monotonic() > deadline:
                    raise RuntimeError("the signalled workflows did not all finish:\n" + workers.output())
                time.sleep(0.02)
            times.append(time.perf_counter() - started)
        finally:
            workers.stop()
    return statistics.median(times), f"s for {n:,}"
