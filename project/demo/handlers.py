"""Handlers for the demo queues, so a newcomer, the benchmark and an external worker have real work.

- ``demo.noop`` returns at once;
- ``demo.sleep`` sleeps for its ``seconds`` metadata value (default 1), reporting progress
  each tenth of a second and stopping early when cancelled;
- ``demo.fail`` raises, so retries and final failures show in the admin;
- ``demo.capped`` sleeps like ``demo.sleep`` on a queue capped at 2 running fleet-wide;
- ``demo.async_sleep`` (``async def``) awaits ``asyncio.sleep(seconds)`` (metadata, default 1),
  reporting progress at each step: hundreds run at once on one process's event loop;
- ``demo.async_io`` (``async def``) awaits ``asyncio.sleep(seconds)`` once and does nothing
  else — the benchmark's I/O-bound probe, beside ``demo.sleep`` on threads;
- ``demo.cpu`` does a fixed amount of pure-Python work (``rounds`` metadata, default 1,000,000)
  — the benchmark's CPU-bound probe, on threads or with ``runworker --pool processes``;
- ``demo.hang`` ignores every stop for 30 s, under a 1 s ``timeout``: the benchmark measures how
  soon past the limit the worker ends it;
- ``demo.latency`` appends how long ago its item was enqueued (metadata ``t0``, epoch
  seconds) to the file named by ``BENCH_LATENCY_FILE`` — the benchmark's wake-up probe.
"""

import asyncio
import os
import time

from workqueue import handlers


@handlers.register("demo.noop")
def noop(item, ctx):
    return None


@handlers.register("demo.sleep")
def sleep(item, ctx):
    try:
        seconds = float(item.metadata.get("seconds", "1"))
    except ValueError:
        seconds = 1.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.cancelled.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
            return
        ctx.progress()


@handlers.register("demo.fail")
def fail(item, ctx):
    raise RuntimeError(f"demo.fail always fails (attempt {ctx.attempt} of {item.max_attempts})")


handlers.register("demo.capped", sleep)


@handlers.register("demo.latency")
def latency(item, ctx):
    started = time.time()
    path = os.environ.get("BENCH_LATENCY_FILE")
    if path and "t0" in item.metadata:
        with open(path, "a") as out:
            out.write(f"{item.key} {started - float(item.metadata['t0']):.6f}\n")


def _seconds(item, default: float = 1.0) -> float:
    try:
        return float(item.metadata.get("seconds", default))
    except ValueError:
        return default


@handlers.register("demo.async_sleep")
async def async_sleep(item, ctx):
    deadline = time.monotonic() + _seconds(item)
    while (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(0.5, left))  # a cancel (lease lost, stall, stop) lands here
        ctx.progress()


@handlers.register("demo.async_io")
async def async_io(item, ctx):
    await asyncio.sleep(_seconds(item, 0.05))


@handlers.register("demo.cpu")
def cpu(item, ctx):
    total = 0
    for n in range(int(item.metadata.get("rounds", "1000000"))):
        total = (total + n * n) % 1_000_003
    return None


@handlers.register("demo.hang", timeout=1.0)
def hang(item, ctx):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # deaf to ctx.cancelled: only the timeout ends it
        time.sleep(0.01)
