"""Handlers for the test queues, one named behaviour each.

- test.noop: returns.
- test.record: records a Completion row in the same transaction it completes the item,
  so a count of Completions per key is a count of successful settlements.
- test.batched: records a Completion row (one per run) and returns without settling, so the
  worker's batched completion settles the item.
- test.fail: always raises.
- test.hang: waits until cancelled (or metadata["seconds"]), then returns.
- test.crash: kills its own process with SIGKILL (a poison item).
- test.capped: samples how many test.capped items are held, waits for a Sample named
  metadata["until"] when given (the test decides when the cap frees up), sleeps
  metadata["seconds"] (default 0.2), records.
- test.short / test.stall / test.timeout: record a Sample "started:<key>" (value: the attempt),
  then sleep metadata["seconds"] (default 0.5) reporting
  progress unless metadata["progress"] is "no" (never) or "reclaimed" (only on a reclaimed
  attempt); a cancelled run records a Sample "cancelled:<key>" and returns.
- test.holdonce: holds its first attempt until cancelled (a worker to kill mid-item), then
  records and completes on any later attempt.
- test.why / test.why.stall / test.why.timeout: record Sample "started:<key>", wait until told
  to stop (never reporting progress), then record Sample "why:<key>:<ctx.stop_reason>" whose
  value is ctx.is_cancelled() (1 or 0).
- test.flaky: test.record on a queue that retries at once (database-outage tests).
- test.flow / test.grouped / test.rated / test.grouped.lapse (flow control): wait for a
  Sample named metadata["until"] when given (renewing the lease), sleep metadata["seconds"]
  (default 0.1), record.
"""

import os
import signal
import time

from django.db import transaction

from tests.testapp.models import Completion, Sample
from workqueue import handlers
from workqueue.models import WorkItem


def _record(item, ctx):
    Completion.objects.create(
        queue=item.queue, key=item.key, worker_id=ctx.worker_id, attempt=ctx.attempt, reclaimed=ctx.reclaimed
    )


@handlers.register("test.noop")
def noop(item, ctx):
    return None


handlers.register("test.other", noop)


@handlers.register("test.record")
def record(item, ctx):
    seconds = float(item.metadata.get("seconds", "0"))
    if seconds:
        time.sleep(seconds)
    with transaction.atomic():
        _record(item, ctx)
        ctx.complete()


handlers.register("test.flaky", record)


@handlers.register("test.holdonce")
def holdonce(item, ctx):
    if ctx.attempt == 1:
        ctx.cancelled.wait(float(item.metadata.get("seconds", "60")))
        return
    with transaction.atomic():
        _record(item, ctx)
        ctx.complete()


@handlers.register("test.batched")
def batched(item, ctx):
    _record(item, ctx)


@handlers.register("test.fail")
def fail(item, ctx):
    raise RuntimeError(f"test.fail attempt {ctx.attempt}")


@handlers.register("test.hang")
def hang(item, ctx):
    seconds = float(item.metadata.get("seconds", "3600"))
    if not ctx.cancelled.wait(seconds):
        with transaction.atomic():
            _record(item, ctx)
            ctx.complete()


@handlers.register("test.crash")
def crash(item, ctx):
    if item.metadata.get("crash", "always") == "always" or ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    with transaction.atomic():
        _record(item, ctx)
        ctx.complete()


@handlers.register("test.capped")
def capped(item, ctx):
    held = WorkItem.objects.filter(queue="test.capped").held().filter(lease_expires_at__gt=time_now()).count()
    Sample.objects.create(name="capped_held", value=held)
    until = item.metadata.get("until")
    deadline = time.monotonic() + 60
    while until and not Sample.objects.filter(name=until).exists() and time.monotonic() < deadline:
        ctx.progress()
        time.sleep(0.05)
    time.sleep(float(item.metadata.get("seconds", "0.2")))
    with transaction.atomic():
        _record(item, ctx)
        ctx.complete()


def time_now():
    from django.db.models.functions import Now

    return Now()


def _sleepy(item, ctx):
    seconds = float(item.metadata.get("seconds", "0.5"))
    progress = item.metadata.get("progress", "yes")
    report = progress == "yes" or (progress == "reclaimed" and ctx.reclaimed)
    Sample.objects.create(name=f"started:{item.key}", value=ctx.attempt)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.cancelled.wait(0.05):
            Sample.objects.create(name=f"cancelled:{item.key}", value=1)
            return
        if report:
            ctx.progress()
    with transaction.atomic():
        _record(item, ctx)
        ctx.complete()


handlers.register("test.short", _sleepy)


def _why(item, ctx):
    Sample.objects.create(name=f"started:{item.key}", value=ctx.attempt)
    if ctx.cancelled.wait(float(item.metadata.get("seconds", "60"))):
        Sample.objects.create(name=f"why:{item.key}:{ctx.stop_reason}", value=int(ctx.is_cancelled()))


for _queue in ("test.why", "test.why.stall", "test.why.timeout"):
    handlers.register(_queue, _why)
handlers.register("test.stall", _sleepy)
handlers.register("test.timeout", _sleepy)


# -- worker hardening (issue 9: holds per claim, stall clock, lost connections, settle order;
# issue 10: BaseException in a handler) -------------------------------------------------------
#
# - test.reclaim: attempt 1 records Sample "started:<key>" and then ignores cancellation until
#   the test writes Sample "release:<key>" (a handler stuck in a call); later attempts record
#   and complete.
# - test.suicide: records Sample "run:<key>" and terminates its own database backend.
# - test.selfsettle: records and completes in its own transaction, then goes on working for
#   metadata["seconds"] (default 1.2) before it returns.
# - test.settled: test.batched on a short lease (the settler settles it).
# - test.interrupt: raises KeyboardInterrupt.


@handlers.register("test.reclaim")
def reclaim(item, ctx):
    if ctx.attempt > 1:
        with transaction.atomic():
            _record(item, ctx)
            ctx.complete()
        return
    Sample.objects.create(name=f"started:{item.key}", value=ctx.attempt)
    deadline = time.monotonic() + 60
    while not Sample.objects.filter(name=f"release:{item.key}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@handlers.register("test.suicide")
def suicide(item, ctx):
    from django.db import connection

    Sample.objects.create(name=f"run:{item.key}", value=ctx.attempt)
    with connection.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(pg_backend_pid())")


@handlers.register("test.selfsettle")
def selfsettle(item, ctx):
    with transaction.atomic():
        _record(item, ctx)
        ctx.complete()
    time.sleep(float(item.metadata.get("seconds", "1.2")))


handlers.register("test.settled", batched)


@handlers.register("test.interrupt")
def interrupt(item, ctx):
    raise KeyboardInterrupt(f"test.interrupt {item.key}")


def _flow(item, ctx):
    until = item.metadata.get("until")
    deadline = time.monotonic() + 60
    while until and not Sample.objects.filter(name=until).exists() and time.monotonic() < deadline:
        ctx.progress()
        time.sleep(0.05)
    time.sleep(float(item.metadata.get("seconds", "0.1")))
    with transaction.atomic():
        _record(item, ctx)
        ctx.complete()


for _queue in ("test.flow", "test.grouped", "test.rated", "test.grouped.lapse"):
    handlers.register(_queue, _flow)


# -- async def handlers (issue 15), run on runworker's event loop -------------------------------
#
# - test.async.short: records Sample "started:<key>" (the ORM's async method), awaits
#   metadata["seconds"] (default 0.5) in small steps reporting progress, then records a
#   Completion and completes the item in one transaction (sync_to_async). Cancelled: records
#   Sample "cancelled:<key>" and lets the cancellation go on.
# - test.async.holdonce: attempt 1 awaits until it is cancelled (a worker to kill mid-run);
#   later attempts record and complete.
# - test.async.block: attempt 1 blocks the loop without awaiting for metadata["block"]
#   seconds (longer than the queue's stall budget), then awaits: that await is where it is
#   cancelled. Later attempts record and complete.


def _record_and_complete(item, ctx):
    with transaction.atomic():
        _record(item, ctx)
        ctx.complete()


@handlers.register("test.async.short")
async def async_short(item, ctx):
    import asyncio

    from asgiref.sync import sync_to_async

    await Sample.objects.acreate(name=f"started:{item.key}", value=ctx.attempt)
    deadline = time.monotonic() + float(item.metadata.get("seconds", "0.5"))
    try:
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(0.05, left))
            ctx.progress()
    except asyncio.CancelledError:
        await Sample.objects.acreate(name=f"cancelled:{item.key}", value=ctx.attempt)
        raise
    await sync_to_async(_record_and_complete)(item, ctx)


@handlers.register("test.async.holdonce")
async def async_holdonce(item, ctx):
    import asyncio

    from asgiref.sync import sync_to_async

    if ctx.attempt == 1:
        await Sample.objects.acreate(name=f"started:{item.key}", value=ctx.attempt)
        while True:
            await asyncio.sleep(0.05)
            ctx.progress()
    await sync_to_async(_record_and_complete)(item, ctx)


@handlers.register("test.async.block")
async def async_block(item, ctx):
    import asyncio

    from asgiref.sync import sync_to_async

    if ctx.attempt == 1:
        await Sample.objects.acreate(name=f"started:{item.key}", value=ctx.attempt)
        time.sleep(float(item.metadata.get("block", "3")))  # no await: the whole loop waits
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await Sample.objects.acreate(name=f"cancelled:{item.key}", value=ctx.attempt)
            raise
        return
    await sync_to_async(_record_and_complete)(item, ctx)


def _backend_pid() -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


@handlers.register("test.async.orm")
async def async_orm(item, ctx):
    """The ORM from an async handler, the documented ways: which database session served each
    thread-sensitive call (Sample "orm1:<key>", "orm2:<key>": backend pids), and an async method."""
    import asyncio

    from asgiref.sync import sync_to_async

    first = await sync_to_async(_backend_pid)()
    await asyncio.sleep(float(item.metadata.get("seconds", "1")))  # the others run meanwhile
    second = await sync_to_async(_backend_pid)()
    await Sample.objects.acreate(name=f"orm1:{item.key}", value=first)
    await Sample.objects.acreate(name=f"orm2:{item.key}", value=second)


# -- every way a run ends (tests/workqueue/test_worker_capacity.py) ----------------------------
#
# - test.endings: ends its run the way metadata["end"] names: "return" (the worker's batched
#   completion settles it), "complete" (it settles itself), "raise" (RuntimeError), "retry"
#   (Retry, an hour's delay), "permanent" (Permanent), "requeue" (requeues itself once, noted
#   in Sample "requeued:<key>"), "leaselost" (attempt 1 takes its own proof away, then
#   completes: LeaseLost), "stale" (attempt 1 takes its own proof away and returns: the
#   settler's batch finds the proof gone), "hold" (attempt 1 records Sample "started:<key>"
#   and waits until it is cancelled, then records "cancelled:<key>" and returns), "handoff"
#   (returns a coroutine: the rest of the run goes on the event loop). Later attempts return.


def _end_complete(item, ctx):
    with transaction.atomic():
        ctx.complete()


def _end_raise(item, ctx):
    raise RuntimeError(f"test.endings {item.key}")


def _end_retry(item, ctx):
    from workqueue import Retry

    raise Retry(delay=3600)


def _end_permanent(item, ctx):
    from workqueue import Permanent

    raise Permanent(f"test.endings {item.key}")


def _end_requeue(item, ctx):
    _, first = Sample.objects.get_or_create(name=f"requeued:{item.key}", defaults={"value": 1})
    if first:
        with transaction.atomic():
            ctx.requeue()


def _end_proof_taken(item, ctx):
    if ctx.attempt == 1:
        WorkItem.objects.requeue_now([item.id])  # an operator's requeue: the proof is gone
        if item.metadata["end"] == "leaselost":
            with transaction.atomic():
                ctx.complete()  # raises LeaseLost


def _end_hold(item, ctx):
    if ctx.attempt == 1:
        Sample.objects.create(name=f"started:{item.key}", value=ctx.attempt)
        if ctx.cancelled.wait(60):
            Sample.objects.create(name=f"cancelled:{item.key}", value=ctx.attempt)


def _end_handoff(item, ctx):
    import asyncio

    async def rest():
        await asyncio.sleep(0.05)

    return rest()


_ENDINGS = {
    "complete": _end_complete,
    "raise": _end_raise,
    "retry": _end_retry,
    "permanent": _end_permanent,
    "requeue": _end_requeue,
    "leaselost": _end_proof_taken,
    "stale": _end_proof_taken,
    "hold": _end_hold,
    "handoff": _end_handoff,
}


@handlers.register("test.endings")
def endings(item, ctx):
    end = _ENDINGS.get(item.metadata.get("end", "return"))
    return end(item, ctx) if end is not None else None
