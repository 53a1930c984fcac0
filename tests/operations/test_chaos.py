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
- every operation ends terminal, with no work item left unsettled: none stuck;
- the workflows among them (test.wf.crashy) all succeed with the right result, their
  ``transaction=True`` step ran exactly once and every plain step at least once.

Every other worker runs its handlers in the process pool (one child): killing its parent
takes the child down too (the child exits when its pipe closes), and what it held goes round.
"""

from __future__ import annotations

import os
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
WORKFLOWS = 20
DEADLINE_SECONDS = 240  # generous: a loaded machine boots workers slowly


def test_chaos_every_operation_ends_terminal_once_with_workers_killed_at_random(start_worker, spawn_command):
    rng = random.Random(20261130)
    kinds = [kind for kind, n in MIX.items() for _ in range(n)]
    rng.shuffle(kinds)
    # The workflows first: claimed first, they run while the kills happen.
    flows = [
        operations.start("test.wf.crashy", {"pause_b": 1.0, "pause_c": 1.0, "between": 0.3}).id
        for _ in range(WORKFLOWS)
    ]
    ids = {}
    for kind in kinds:
        request = {"units": rng.randint(2, 6), "pause": 0.08} if kind.endswith(".slow") else {}
        ids[operations.start(kind, request).id] = kind
    assert len(ids) == 200

    chaos = Chaos(rng, {**ids, **dict.fromkeys(flows, "test.wf.crashy")}, start_worker, spawn_command)
    chaos.run()
    chaos.stop()
    # How many recovers fit into the run depends on how fast processes start: at least one did.
    assert len(chaos.killed) >= 4 and len(chaos.recovers) >= 1

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
        check_operation(op, kind, began[op_id], succeeded_items[op_id])
        check_other_runs_were_killed(op, returned[op_id], chaos.killed)
        if any("finished_at" not in e for e in op.attempt_log) and op.state == "succeeded":
            taken_over += 1
    # The kills really landed mid-operation, and those operations still succeeded.
    print(
        f"chaos: {len(chaos.killed)} kills, {len(chaos.recovers)} recovers, {taken_over} taken over, "
        f"{time.monotonic() - chaos.started:.1f}s, attempts {Counter(op.attempts for op in rows.values())}"
    )
    assert taken_over >= 1
    check_workflows(flows)


def check_workflows(flows: list[str]) -> None:
    """Every workflow succeeded with every step recorded once; its transaction step ran once."""
    from tests.testapp.models import Sample

    runs = Counter(Sample.objects.filter(name__regex=r"^[abcd]:").values_list("name", flat=True))
    for op_id in flows:
        op = Operation.objects.get(pk=op_id)
        assert op.state == "succeeded" and op.result_detail == {"total": 10}, (op, op.error)
        assert [s.state for s in operations.steps(op_id)] == ["succeeded"] * 4
        assert runs[f"c:{op_id}"] == 1, "a transaction=True step ran exactly once"
        assert all(runs[f"{step}:{op_id}"] >= 1 for step in "abd")
    rows = list(Operation.objects.filter(pk__in=flows))
    resumed = sum(1 for op in rows if len(op.attempt_log) > 1)
    replayed = sum(1 for op_id in flows if any(runs[f"{step}:{op_id}"] > 1 for step in "abd"))
    print(
        f"chaos: {len(flows)} workflows, {resumed} resumed on another attempt "
        f"({replayed} ran a plain step twice), all succeeded"
    )


class Chaos:
    """The workers, the kills and the recovers of one chaos run."""

    def __init__(self, rng: random.Random, ids: dict, start_worker, spawn_command):
        self.rng = rng
        self.ids = ids
        self.start_worker = start_worker
        self.spawn_command = spawn_command
        self.names: dict = {}
        self.workers = [self.spawn() for _ in range(WORKERS)]
        self.killed: set[int] = set()
        self.recovers: list[subprocess.Popen] = []
        self.started = time.monotonic()

    def spawn(self):
        # Every other worker runs its sync handlers in a child process (the process pool): a
        # SIGKILL of such a worker must take its child with it, and lose only what they held.
        pool = ("--pool", "processes", "--processes", "1") if len(self.names) % 2 else ()
        return spawn_ops_worker(self.start_worker, self.names, "chaos", *pool)

    def run(self) -> None:
        """Until every operation is done: kill a busy worker now and then (and start another),
        and run ``recover`` every two seconds."""
        next_kill = self.started + self.rng.uniform(1.0, 2.0)
        next_recover = self.started + 2.0
        while Operation.objects.filter(pk__in=self.ids).active().exists():
            now = time.monotonic()
            assert now - self.started < DEADLINE_SECONDS, "operations were still unfinished at the deadline"
            kill_due = now >= next_kill and now - self.started < CHAOS_SECONDS and len(self.killed) < MAX_KILLS
            if kill_due and self.kill_one():
                next_kill = now + self.rng.uniform(0.5, 1.5)
            if now >= next_recover and all(p.poll() is not None for p in self.recovers):
                self.recovers.append(self.spawn_command("recover", stderr=subprocess.STDOUT))
                next_recover = now + 2.0
            time.sleep(0.1)

    def kill_one(self) -> bool:
        # Kill, at a random moment, a random worker that is in the middle of running
        # operations (never one still booting: on a slow machine that would kill nothing).
        running = set(Operation.objects.filter(pk__in=self.ids, state="running").values_list("worker_id", flat=True))
        busy = [w for w in self.workers if w.alive() and self.names[w] in running]
        if not busy:
            return False
        victim = self.rng.choice(busy)
        children = children_of(victim.pid)  # its process pool's children die with it
        victim.kill()
        self.killed.add(victim.pid)
        self.killed.update(children)
        self.workers.remove(victim)
        self.workers.append(self.spawn())
        return True

    def stop(self) -> None:
        """Once nothing is stuck: SIGTERM the workers, and every recover ended well."""
        # None stuck: nothing left for any worker to do for these operations.
        wait_until(
            lambda: not WorkItem.objects.filter(key__in=self.ids).unsettled().exists(),
            timeout=20,
            message="every work item of the chaos operations to settle",
        )
        # A worker still booting has no SIGTERM handler yet: let the last ones come up first.
        wait_until(
            lambda: Worker.objects.filter(pk__in=[self.names[w] for w in self.workers]).count() == len(self.workers),
            timeout=30,
            message="the last workers to start",
        )
        for w in self.workers:
            w.signal(signal.SIGTERM)
        for w in self.workers:
            assert w.wait(30) == 0, w.output()[-3000:]
        for p in self.recovers:
            output, _ = p.communicate(timeout=60)
            assert p.returncode == 0, output
            assert "operations_reoffered=" in output or "skipped" in output, output


def children_of(pid: int) -> set[int]:
    """The pids whose parent is ``pid`` (Linux /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                ppid = next(line for line in f if line.startswith("PPid:")).split()[1]
        except (OSError, StopIteration):
            continue
        if int(ppid) == pid:
            found.add(int(entry))
    return found


def check_operation(op, kind: str, began: list, succeeded_items: int) -> None:
    """Its end is the kind's, each attempt was begun once, and one success at most, the last."""
    assert op.done, op
    if kind.endswith(".doomed"):
        assert (op.state, op.error.code, op.error.retryable) == ("failed", "doomed", False), op.error
    else:
        assert op.state == "succeeded", (op, op.error)
    if kind.endswith(".flaky"):
        assert op.attempts >= 2
    # Each attempt number was begun by exactly one worker.
    numbers = [attempt for attempt, _pid in began]
    assert len(numbers) == len(set(numbers)), (op.id, began)
    logged = [e["number"] for e in op.attempt_log]
    assert logged == list(range(1, op.attempts + 1)), (op.id, op.attempt_log)
    assert set(numbers) <= set(logged)
    # At most one recorded success, and it is the last attempt.
    successes = [e for e in op.attempt_log if e.get("outcome") == "succeeded"]
    if op.state == "succeeded":
        assert len(successes) == 1 and op.attempt_log[-1] is successes[0], op.attempt_log
        assert succeeded_items == 1
    else:
        assert successes == [] and succeeded_items == 0


def check_other_runs_were_killed(op, returned: list, killed: set[int]) -> None:
    """Any run that returned but is not the recorded success died before its end was written:
    its process was one this test killed."""
    successes = [e["number"] for e in op.attempt_log if e.get("outcome") == "succeeded"]
    winner = successes[0] if op.state == "succeeded" else None
    for attempt, pid in returned:
        if attempt != winner:
            assert pid in killed, (op.id, attempt, pid, op.attempt_log)
