"""Handlers for the process pool and the worker-enforced limits (tests/workqueue/test_process_pool.py,
tests/workqueue/test_time_limits.py). Each records Sample rows named ``<what>:<key>``.

- test.cpu (process pool): Sample "began:<key>", a fixed amount of pure-Python work
  (metadata["n"] rounds), then Sample "pid:<key>"; both valued the pid that ran it (their
  ``at`` times bound the run).
- test.proc.suicide (process pool): attempt 1 SIGKILLs its own process; later attempts succeed.
- test.proc.limits (process pool, soft_timeout 0.5 s, timeout 2 s) and test.thread.limits (threads,
  the same limits): Sample "started:<key>"; spins until told to stop, then Sample
  "soft:<key>" (value 1 if the reason was timeout); with metadata["obey"] it returns then,
  else it spins on (the timeout must end it); a run that gets to the end records "done:<key>".
- test.proc.memory (process pool, max_memory_mb 150): holds metadata["mb"] MB for the life of its
  process, then Sample "pid:<key>".
- test.async.limits (async def, soft_timeout 0.5 s): see async_limited.
"""

import os
import signal
import time

from tests.testapp.models import Sample
from workqueue import handlers

_kept = []  # test.proc.memory's allocations: alive for the process's life


def mark(what: str, key: str, value: int = 1) -> None:
    Sample.objects.create(name=f"{what}:{key}"[:64], value=value)


def burn(rounds: int) -> int:
    total = 0
    for n in range(rounds):
        total = (total + n * n) % 1_000_003
    return total


@handlers.register("test.cpu", pool="processes")
def cpu(item, ctx):
    mark("began", item.key, os.getpid())
    burn(int(item.metadata.get("n", 2_000_000)))
    mark("pid", item.key, os.getpid())


def cpu_on_threads(item, ctx):
    burn(int(item.metadata.get("n", 2_000_000)))
    mark("pid", item.key, os.getpid())


handlers.register("test.cpu.threads", cpu_on_threads)


@handlers.register("test.proc.suicide", pool="processes")
def suicide(item, ctx):
    mark("started", item.key, item.attempts)
    if item.attempts == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    mark("done", item.key, os.getpid())


def limited(item, ctx):
    mark("started", item.key, os.getpid())
    deadline = time.monotonic() + 30
    while not ctx.cancelled.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    mark("soft", item.key, int(ctx.stop_reason == "timeout"))
    if not item.metadata.get("obey"):
        while time.monotonic() < deadline:  # ignores the stop: only the timeout ends it
            time.sleep(0.01)
    mark("done", item.key)


handlers.register("test.proc.limits", limited, pool="processes", soft_timeout=0.5, timeout=2)
handlers.register("test.thread.limits", limited, soft_timeout=0.5, timeout=2)


@handlers.register("test.proc.memory", pool="processes", max_memory_mb=150)
def memory(item, ctx):
    _kept.append(bytearray(int(item.metadata.get("mb", 0)) * 2**20))
    mark("pid", item.key, os.getpid())


async def async_limited(item, ctx):
    """test.async.limits (soft_timeout 0.5 s): awaits for 30 s; a cancel lands at the await.
    Sample "cancelled:<key>" = 1 when it came from the soft timeout; with metadata["catch"] it
    catches the cancel and returns (its work is done), else the cancel propagates."""
    import asyncio

    await Sample.objects.acreate(name=f"started:{item.key}"[:64], value=item.attempts)
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await Sample.objects.acreate(name=f"cancelled:{item.key}"[:64], value=int(ctx.stop_reason == "timeout"))
        if not item.metadata.get("catch"):
            raise


handlers.register("test.async.limits", async_limited, soft_timeout=0.5)
