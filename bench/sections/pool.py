"""The ``pool`` section: the process pool beside the thread pool, one runworker process.

- CPU-bound: ``demo.cpu`` (a fixed amount of pure-Python work per item) with 2 threads, then
  with 2 child processes (``--pool processes``): on 2 cores the threads share one GIL, the
  children do not;
- no-op: the ``demo.noop`` drain with 2 children as a ratio to the same drain with 2 threads:
  what the pipe to a child costs per item;
- timeout: how long past its 1 s ``timeout`` a ``demo.hang`` run (deaf to every stop) is ended,
  on a thread and on a child.
"""

from __future__ import annotations

import statistics
import time

from bench.harness import ThrowawayDatabase, Workers, drain_once, reset, wait_drained
from bench.report import Options, Report


def _drain(opts: Options, db: ThrowawayDatabase, items: int, *, queue: str, processes: bool, metadata=None):
    args = ("--pool", "processes", "--processes", "2") if processes else ()
    rates = []
    for _ in range(opts.runs):
        reset()
        rate, _spent = drain_once(db, 1, items, opts.batch, 2, args=args, queue=queue, metadata=metadata)
        rates.append(rate)
    return statistics.median(rates)


def bench_pool(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    n = opts.cpu_items
    rounds = {"rounds": str(opts.cpu_rounds)}
    threads = _drain(opts, db, n, queue="demo.cpu", processes=False, metadata=rounds)
    processes = _drain(opts, db, n, queue="demo.cpu", processes=True, metadata=rounds)
    report.add(
        "pool: CPU-bound items, 2 threads",
        threads,
        "items/s",
        note=f"{opts.cpu_rounds:,} rounds of pure Python per item; 1 runworker process",
    )
    report.add(
        "pool: CPU-bound items, 2 child processes",
        processes,
        "items/s",
        note=f"{processes / threads:.2f}× the threads (runworker --pool processes --processes 2)",
    )
    noop_threads = _drain(opts, db, opts.pool_noop_items, queue="demo.noop", processes=False)
    noop_processes = _drain(opts, db, opts.pool_noop_items, queue="demo.noop", processes=True)
    report.add(
        "pool: no-op drain, 2 child processes",
        noop_processes,
        "items/s",
        note=f"{noop_processes / noop_threads:.2f}× the same drain on 2 threads ({noop_threads:,.0f}/s): the pipe",
    )

    overrun = {name: _overrun(opts, db, args) for name, args in (("thread", ()), ("child", ("--pool", "processes")))}
    report.add(
        "pool: a run past its 1 s timeout, ended after",
        overrun["child"] * 1000,
        "ms",
        note=f"past the limit, on a child (killed); on a thread {overrun['thread'] * 1000:.0f} ms (abandoned)",
    )


def _overrun(opts: Options, db: ThrowawayDatabase, args: tuple[str, ...]) -> float:
    """Seconds past its 1 s timeout until a deaf demo.hang run was ended (median over runs)."""
    from workqueue.models import WorkItem

    overruns = []
    for n in range(opts.runs):
        reset()
        workers = Workers(db.url, 1, ["--queue", "demo.hang", "--queue", "demo.noop", "--processes", "1", *args])
        try:
            workers.wait_ready()
            # A first item starts the child (its start-up is not the timeout's to answer for).
            WorkItem.objects.enqueue("demo.noop", f"warm-{n}")
            wait_drained("demo.noop", timeout=60)
            item, _ = WorkItem.objects.enqueue("demo.hang", f"hang-{n}")
            deadline = time.monotonic() + 60
            while (item := WorkItem.objects.get(pk=item.id)).state != "stopped":
                if time.monotonic() > deadline:
                    raise RuntimeError("the timed-out run was not ended:\n" + workers.output())
                time.sleep(0.02)
            overruns.append((item.stopped_at - item.started_at).total_seconds() - 1.0)
        finally:
            workers.stop()
    return statistics.median(overruns)
