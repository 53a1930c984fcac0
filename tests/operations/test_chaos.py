"""Chaos: 200 operations of mixed kinds while worker processes are SIGKILLed at random.

What "none twice-succeeded" can honestly mean here: a run cannot share the transaction that
records its end, so a run can return and then die before its end is written (and the next
attempt runs it again: runners must be idempotent). What the design does promise, and what
this test checks, is:

- every attempt number of an operation was begun by exactly one worker (the guarded begin);
- the row records at most one success, as its last attempt, with exactly one work item
  settled succeeded;
- every run that returned normally but is not the recorded success ran in a process this
  test SIGKILLed (it died before its end was written), never in a live one;
- every operation ends terminal, with no work item left unsettled: none stuck.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections import Counter, defaultdict

import pytest

import operations
from operations.models import Operation
from tests.conftest import wait_until
from tests.operations.conftest import spawn_ops_worker
from tests.testapp.models import OperationRun
from workqueue.models import Worker, WorkItem

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MIX = {
    "test.ops.chaos.quick": 70,
    "test.ops.chaos.slow": 50,
    "test.ops.chaos.flaky": 40,
    "test.ops.chaos.doomed": 40,
}
WORKERS = 4
CHAOS_SECONDS = 40  # kills stop after this long, or after MAX_KILLS
MAX_KILLS = 12
DEADLINE_SECONDS = 240  # generous: a loaded machine boots workers slowly


def test_chaos_every_operation_ends_terminal_once_with_workers_killed_at_random(start_worker, spawn_command):
    rng = random.Random(20261130)
    kinds = [kind for kind, n in MIX.items() for _ in range(n)]
    rng.shuffle(kinds)
    ids = {}
    for kind in kinds:
        request = {"units": rng.randint(2, 6), "pause": 0.08} if kind.endswith(".slow") else {}
        ids[operations.start(kind, request).id] = kind
    assert len(ids) == 200

    names = {}

    def spawn():
        return spawn_ops_worker(start_worker, names, "chaos")

    workers = [spawn() for _ in range(WORKERS)]
    killed: set[int] = set()
    recovers: list[subprocess.Popen] = []
    started = time.monotonic()
    next_kill = started + rng.uniform(1.0, 2.0)
    next_recover = started + 2.0
    while Operation.objects.filter(pk__in=ids).active().exists():
        now = time.monotonic()
        assert now - started < DEADLINE_SECONDS, "operations were still unfinished at the deadline"
        if now >= next_kill and now - started < CHAOS_SECONDS and len(killed) < MAX_KILLS:
            # Kill, at a random moment, a random worker that is in the middle of running
            # operations (never one still booting: on a slow machine that would kill nothing).
            running = set(Operation.objects.filter(pk__in=ids, state="running").values_list("worker_id", flat=True))
            busy = [w for w in workers if w.alive() and names[w] in running]
            if busy:
                victim = rng.choice(busy)
                victim.kill()
                killed.add(victim.pid)
                workers.remove(victim)
                workers.append(spawn())
                next_kill = now + rng.uniform(0.5, 1.5)
        if now >= next_recover and all(p.poll() is not None for p in recovers):
            recovers.append(spawn_command("recover", stderr=subprocess.STDOUT))
            next_recover = now + 2.0
        time.sleep(0.1)

    # None stuck: nothing left for any worker to do for these operations.
    wait_until(
        lambda: not WorkItem.objects.filter(key__in=ids).unsettled().exists(),
        timeout=20,
        message="every work item of the chaos operations to settle",
    )
    # A worker still booting has no SIGTERM handler yet: let the last ones come up first.
    wait_until(
        lambda: Worker.objects.filter(pk__in=[names[w] for w in workers]).count() == len(workers),
        timeout=30,
        message="the last workers to start",
    )
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(30) == 0, w.output()[-3000:]
    for p in recovers:
        output, _ = p.communicate(timeout=60)
        assert p.returncode == 0, output
        assert "operations_reoffered=" in output or "skipped" in output, output
    # How many recovers fit into the run depends on how fast processes start: at least one did.
    assert len(killed) >= 4 and len(recovers) >= 1

    rows = {op.id: op for op in Operation.objects.filter(pk__in=ids)}
    began = defaultdict(list)
    returned = defaultdict(list)
    for op_id, event, attempt, pid in OperationRun.objects.filter(op_id__in=ids).values_list(
        "op_id", "event", "attempt", "pid"
    ):
        (began if event == "began" else returned)[op_id].append((attempt, pid))
    succeeded_items = Counter(WorkItem.objects.filter(key__in=ids, outcome="succeeded").values_list("key", flat=True))

    taken_over = 0
    for op_id, kind in ids.items():
        op = rows[op_id]
        assert op.done, op
        if kind.endswith(".doomed"):
            assert (op.state, op.error.code, op.error.retryable) == ("failed", "doomed", False), op.error
        else:
            assert op.state == "succeeded", (op, op.error)
        if kind.endswith(".flaky"):
            assert op.attempts >= 2
        # Each attempt number was begun by exactly one worker.
        numbers = [attempt for attempt, _pid in began[op_id]]
        assert len(numbers) == len(set(numbers)), (op_id, began[op_id])
        logged = [e["number"] for e in op.attempt_log]
        assert logged == list(range(1, op.attempts + 1)), (op_id, op.attempt_log)
        assert set(numbers) <= set(logged)
        # At most one recorded success, and it is the last attempt.
        successes = [e for e in op.attempt_log if e.get("outcome") == "succeeded"]
        if op.state == "succeeded":
            assert len(successes) == 1 and op.attempt_log[-1] is successes[0], op.attempt_log
            assert succeeded_items[op_id] == 1
            winner = successes[0]["number"]
        else:
            assert successes == [] and succeeded_items[op_id] == 0
            winner = None
        # Any other run that returned died before its end was written: its process was killed.
        for attempt, pid in returned[op_id]:
            if attempt != winner:
                assert pid in killed, (op_id, attempt, pid, op.attempt_log)
        if any("finished_at" not in e for e in op.attempt_log) and op.state == "succeeded":
            taken_over += 1
    # The kills really landed mid-operation, and those operations still succeeded.
    print(
        f"chaos: {len(killed)} kills, {len(recovers)} recovers, {taken_over} taken over, "
        f"{time.monotonic() - started:.1f}s, attempts {Counter(op.attempts for op in rows.values())}"
    )
    assert taken_over >= 1
