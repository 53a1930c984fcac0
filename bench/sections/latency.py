"""The ``latency`` section: enqueue to handler start on an idle queue (the NOTIFY wake-up)."""

from __future__ import annotations

import os
import tempfile
import time

from bench.harness import (
    ThrowawayDatabase,
    Workers,
    reset,
)
from bench.report import Options, Report


def bench_latency(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    from workqueue.models import WorkItem

    reset()
    with tempfile.NamedTemporaryFile("r", suffix=".lat", delete=False) as probe:
        path = probe.name
    workers = Workers(db.url, 1, ["--queue", "demo.latency", "--poll", "30"], env={"BENCH_LATENCY_FILE": path})
    samples: list[float] = []
    after_commit: list[float] = []  # the same, less the enqueue's own time (its commit included)
    try:
        workers.wait_ready()
        with open(path) as feed:
            for i in range(opts.latency_items):
                t0 = time.time()
                WorkItem.objects.enqueue("demo.latency", f"lat-{i}", metadata={"t0": f"{t0:.6f}"})
                enqueued = time.time() - t0
                deadline = time.monotonic() + 10
                line = ""
                while not line.endswith("\n"):
                    line += feed.readline()
                    if not line.endswith("\n"):
                        if time.monotonic() > deadline:
                            raise RuntimeError("no wake-up within 10 s:\n" + workers.output())
                        time.sleep(0.0002)
                samples.append(float(line.split()[1]) * 1000)
                after_commit.append(samples[-1] - enqueued * 1000)
                time.sleep(0.005)
    finally:
        workers.stop()
        os.unlink(path)
    samples.sort()
    after_commit.sort()

    def pct(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]

    note = f"{len(samples)} items on an idle queue, --poll 30 (NOTIFY wake-up); from the enqueue call"
    report.add("latency enqueue → handler start, p50", pct(samples, 50), "ms", note=note)
    report.add("latency enqueue → handler start, p95", pct(samples, 95), "ms")
    report.add("latency enqueue → handler start, p99", pct(samples, 99), "ms")
    note = "the same, from the enqueue's return (its durable commit done): the worker's own part"
    report.add("latency committed → handler start, p50", pct(after_commit, 50), "ms", note=note)
    report.add("latency committed → handler start, p99", pct(after_commit, 99), "ms")
