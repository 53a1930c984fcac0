"""Operation kinds for the operations tests, one named behaviour each (requests are dicts).

- test.ops.tiers: both progress tiers: ``units`` units of ``per_unit`` advances each (plus a
  negative advance that must be ignored), ``pause`` seconds inside each unit.
- test.ops.count: the count tier only (no total): ``steps`` advances of ``per_step``.
- test.ops.hold: ticks (advance 1 every 50 ms) for up to ``seconds``; stops cleanly when
  cancelled unless ``honour_cancel`` is false (then it never looks and runs to the end).
- test.ops.takeover: attempt 1 ticks until its process is killed (or it loses the
  operation); any later attempt succeeds. max_attempts 2, so attempt 2 is final.
- test.ops.why: ticks until told to stop, then records Sample "why:<op id>:<stop_reason>"
  whose value is ``reporter.is_cancelled()`` (1 or 0), and returns.
- test.ops.fail: always ``Fail("upstream_down")`` (retried; max_attempts 3).
- test.ops.atomic: two units, each inside the run's own transaction.atomic() (progress calls
  included), each longer than a progress interval.
- test.ops.partial: finishes 2 of 3 units (10 rows each), then fails (retried; max_attempts 2).
- test.ops.unretryable: ``Unretryable(Fail("no_such_subject"))``.
- test.ops.unretryable_error: ``Unretryable(ValueError(...))`` (any exception, not only a Fail).
- test.ops.crash: raises RuntimeError (recorded under ``internal``; max_attempts 2).
- test.ops.bigresult: returns a result detail over 16 KiB.
- test.ops.chatty: says 2000 characters, then fails for good with a 3000-character message.
- test.ops.typed: takes a TypedRequest dataclass.
- test.ops.chaos.quick / .slow / .doomed / .flaky: the chaos test's mix.
- test.ops.deps.spawn: starts ``kind`` with ``after=[itself]`` from inside its run (so it gains a
  dependent while it runs), ``pause`` seconds after that, then succeeds.
- test.ops.batch.child: a batch child: ``n`` rows after ``pause`` seconds, failing (retried) on
  the attempts listed in ``fail_on``; test.ops.batch.doomed fails for good (code doomed);
  test.ops.batch.then is a then: reads ``reporter.parent`` and every child, returns what it saw;
  test.ops.chain.add is a chain step: the previous step's total plus ``add``.

Every run records an OperationRun ``began`` row before it starts and a ``returned`` row when
it returns normally (not when it raises), so tests can see what each attempt saw.
"""

import os
import time
from dataclasses import dataclass

from django.db import transaction

import operations
from tests.testapp.models import OperationRun, Sample


def record(reporter, kind: str, event: str) -> None:
    attempt = reporter.attempt
    OperationRun.objects.create(
        op_id=attempt.id, kind=kind, event=event, attempt=attempt.number, final=attempt.final, pid=os.getpid()
    )


def kind(name: str, **options):
    """Register ``fn`` as ``name``, recording ``began`` before it and ``returned`` after it."""

    def add(fn):
        def run(request, reporter):
            record(reporter, name, "began")
            result = fn(request, reporter)
            record(reporter, name, "returned")
            return result

        run.__name__ = run.__qualname__ = fn.__name__
        run.__module__ = fn.__module__
        operations.register(name, run, **options)
        return fn

    return add


@kind("test.ops.tiers", count_label="rows")
def tiers(request, reporter):
    units = int(request.get("units", 3))
    per_unit = int(request.get("per_unit", 100))
    pause = float(request.get("pause", 0))
    reporter.set_units(units)
    for n in range(1, units + 1):
        reporter.start_unit(f"unit-{n}")
        reporter.say("working on unit %d of %d", n, units)
        for _ in range(per_unit):
            reporter.advance(1)
        reporter.advance(-50)  # ignored: the count is monotonic
        if pause:
            time.sleep(pause)
        reporter.finish_unit()
    return operations.Result(uri=f"memory://tiers/{reporter.attempt.id}", detail={"units": units})


@kind("test.ops.count", count_label="records")
def count(request, reporter):
    for _ in range(int(request.get("steps", 5))):
        reporter.advance(int(request.get("per_step", 1000)))
        time.sleep(float(request.get("pause", 0)))
    return None


@kind("test.ops.hold", count_label="ticks")
def hold(request, reporter):
    honour = request.get("honour_cancel", True)
    deadline = time.monotonic() + float(request.get("seconds", 30))
    while time.monotonic() < deadline:
        if honour and reporter.cancelled.is_set():  # any stop (is_cancelled(): a caller's cancel only)
            return {"stopped": "cancelled"}
        reporter.advance(1)
        time.sleep(0.05)
    return {"stopped": "deadline"}


@kind("test.ops.takeover", count_label="ticks", max_attempts=2)
def takeover(request, reporter):
    if reporter.attempt.number == 1:
        while not reporter.cancelled.is_set():  # the takeover: the hold is lost, not cancelled
            reporter.advance(1)
            time.sleep(0.05)
        return None
    return {"attempt": reporter.attempt.number}


@kind("test.ops.why", count_label="ticks")
def why(request, reporter):
    deadline = time.monotonic() + float(request.get("seconds", 60))
    while time.monotonic() < deadline and not reporter.cancelled.is_set():
        reporter.advance(1)
        time.sleep(0.05)
    name = f"why:{reporter.attempt.id}:{reporter.stop_reason}"
    Sample.objects.create(name=name, value=int(reporter.is_cancelled()))


@kind("test.ops.fail", max_attempts=3)
def fail(request, reporter):
    raise operations.Fail("upstream_down", "the upstream was down on attempt %d", reporter.attempt.number)


@kind("test.ops.atomic", count_label="rows")
def atomic_units(request, reporter):
    # Each unit's own writes and its progress calls inside one transaction of the run's.
    reporter.set_units(2)
    for n in range(2):
        with transaction.atomic():
            reporter.start_unit(f"unit-{n + 1}")
            for _ in range(8):
                reporter.advance(1)
                time.sleep(0.1)  # longer than a progress interval: the flusher wants in
            Sample.objects.create(name=f"atomic:{reporter.attempt.id}", value=n)
            reporter.finish_unit()
    return {"units": 2}


@kind("test.ops.partial", count_label="rows", max_attempts=2)
def partial(request, reporter):
    reporter.set_units(3)
    for n in range(2):
        reporter.start_unit(f"unit-{n + 1}")
        reporter.advance(10)
        reporter.finish_unit()
    raise operations.Fail("partial", "gave up after two of three units on attempt %d", reporter.attempt.number)


@kind("test.ops.unretryable")
def unretryable(request, reporter):
    raise operations.Unretryable(
        operations.Fail("no_such_subject", "subject %s does not exist", request.get("subject", "?"))
    )


@kind("test.ops.unretryable_error", max_attempts=3)
def unretryable_error(request, reporter):
    raise operations.Unretryable(ValueError(f"subject {request.get('subject', '?')} is malformed"))


@kind("test.ops.crash", max_attempts=2)
def crash(request, reporter):
    raise RuntimeError(f"kaboom on attempt {reporter.attempt.number}")


@kind("test.ops.bigresult")
def bigresult(request, reporter):
    return {"blob": "x" * (17 * 1024)}


@kind("test.ops.chatty")
def chatty(request, reporter):
    reporter.say("m" * 2000)
    raise operations.Unretryable(operations.Fail("too_chatty", "e" * 3000))


@dataclass
class TypedRequest:
    name: str
    size: int = 1


@kind("test.ops.typed", request_type=TypedRequest)
def typed(request: TypedRequest, reporter):
    return {"type": type(request).__name__, "name": request.name, "size": request.size}


# -- the chaos mix --------------------------------------------------------------------


@kind("test.ops.chaos.quick", max_attempts=10)
def chaos_quick(request, reporter):
    reporter.advance(1)
    return {"ok": True}


@kind("test.ops.chaos.slow", count_label="rows", max_attempts=10)
def chaos_slow(request, reporter):
    units = int(request.get("units", 4))
    reporter.set_units(units)
    for n in range(units):
        reporter.start_unit(f"part-{n}")
        for _ in range(5):
            reporter.advance(10)
            time.sleep(float(request.get("pause", 0.05)))
        reporter.finish_unit()
    return {"units": units}


@kind("test.ops.chaos.doomed", max_attempts=10)
def chaos_doomed(request, reporter):
    raise operations.Unretryable(operations.Fail("doomed", "this one never works"))


@kind("test.ops.chaos.flaky", max_attempts=10)
def chaos_flaky(request, reporter):
    if reporter.attempt.number == 1:
        raise operations.Fail("flaky", "first attempts always fail")
    return {"attempt": reporter.attempt.number}


# -- batches and chains (tests/operations/test_batches.py, test_batch_processes.py) ------


@kind("test.ops.batch.child", count_label="rows", max_attempts=10)
def batch_child(request, reporter):
    """Count ``n`` rows; ``pause`` seconds first; fail (retried) on attempts listed in ``fail_on``."""
    time.sleep(float(request.get("pause", 0)))
    if reporter.attempt.number in request.get("fail_on", []):
        raise operations.Fail("flaky", f"attempt {reporter.attempt.number} fails by request")
    reporter.advance(int(request.get("n", 1)))
    return {"n": int(request.get("n", 1))}


@kind("test.ops.batch.doomed")
def batch_doomed(request, reporter):
    raise operations.Unretryable(operations.Fail("doomed", request.get("why", "this child never works")))


@kind("test.ops.batch.then")
def batch_then(request, reporter):
    """The callback: read the batch and every child through the public API; return what it saw."""
    parent = reporter.parent
    seen, states, after = 0, {}, None
    while True:
        page, after = operations.children(parent.id, after=after, limit=50)
        for child in page:
            states[child.state] = states.get(child.state, 0) + 1
            if child.result is not None and isinstance(child.result.detail, dict):
                seen += int(child.result.detail.get("n", 0))
        if after is None:
            break
    return {
        "parent": parent.id,
        "parent_state": parent.state,
        "states": states,
        "rows": seen,
        "tag": request.get("tag"),
    }


@kind("test.ops.chain.add")
def chain_add(request, reporter):
    """A chain step: the previous step's total plus ``add``."""
    previous = reporter.previous
    before = previous.result.detail["total"] if previous is not None else 0
    return {"total": before + int(request.get("add", 1)), "previous": previous.id if previous else None}


# -- async def kinds (issue 15) ---------------------------------------------------------------
#
# - test.ops.async_wait: records Sample "async-op-started:<id>", then awaits ``seconds``
#   (default 1) in ten steps, advancing the count; ``await reporter.flush()`` at the end.
# - test.ops.async_hold: advances every 50 ms until ``seconds`` (default 30) pass; never looks
#   at ``is_cancelled()``: a cancellation reaches it as CancelledError at an await.
# - test.ops.async_flaky: fails its first attempt with Fail("flaky"), then succeeds.


@operations.register("test.ops.async_wait", count_label="steps")
async def async_wait(request, reporter):
    import asyncio

    await Sample.objects.acreate(name=f"async-op-started:{reporter.attempt.id}", value=reporter.attempt.number)
    seconds = float((request or {}).get("seconds", 1))
    reporter.set_units(10)
    for _ in range(10):
        await asyncio.sleep(seconds / 10)
        reporter.advance(1)
        reporter.finish_unit()
    ack = await reporter.flush()
    return {"flushed": ack is not None and ack.held, "count": 10}


@operations.register("test.ops.async_hold", count_label="ticks")
async def async_hold(request, reporter):
    import asyncio

    await Sample.objects.acreate(name=f"async-op-started:{reporter.attempt.id}", value=reporter.attempt.number)
    deadline = time.monotonic() + float((request or {}).get("seconds", 30))
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        reporter.advance(1)
    return {"stopped": "deadline"}


@operations.register("test.ops.async_flaky", max_attempts=3)
async def async_flaky(request, reporter):
    if reporter.attempt.number == 1:
        raise operations.Fail("flaky", "attempt %d failed", reporter.attempt.number)
    return {"attempt": reporter.attempt.number}


# -- dependencies (tests/operations/test_deps.py, test_deps_processes.py) ----------------


@kind("test.ops.deps.spawn")
def deps_spawn(request, reporter):
    dependent = operations.start(request.get("kind", "test.ops.batch.child"), {"n": 1}, after=[reporter.op_id])
    time.sleep(float(request.get("pause", 0)))
    return {"dependent": dependent.id}


@kind("test.ops.deaf", count_label="ticks", max_attempts=2, soft_timeout=0.5, timeout=1.5)
def deaf(request, reporter):
    """Ignores every stop for 30 s (records Sample "why:<id>:<stop_reason>" once told): only
    its kind's timeout ends it."""
    told = False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if reporter.cancelled.is_set() and not told:
            told = True
            Sample.objects.create(name=f"why:{reporter.attempt.id}:{reporter.stop_reason}", value=1)
        reporter.advance(1)
        time.sleep(0.02)


@kind("test.ops.suicide", max_attempts=2)
def ops_suicide(request, reporter):
    """Attempt 1 SIGKILLs its own process (a process-pool child); attempt 2 succeeds."""
    if reporter.attempt.number == 1:
        os.kill(os.getpid(), 9)
    return {"attempt": reporter.attempt.number}
