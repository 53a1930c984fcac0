"""`make mutants`: inject small defects one at a time and check that the suite catches each.

Each mutant below is one minimal textual edit (``old`` -> ``new``, ``old`` found exactly once in
its file) of a SQL statement (workqueue/sql/*.sql, operations/sql/*.sql, the SQL fragments of
workqueue/sql.py), of the worker's accounting (workqueue/worker/*.py), or of another rule a test
was written for (issue 35), named, with the tests that must catch it. For each mutant, the
script copies the repository (its tracked and untracked, not ignored files, as they are in the
working tree: uncommitted changes included) into a scratch directory, applies the edit there,
and runs the mutant's tests there (``pytest -x``), with that copy first on the import path and
a database of its own (DEVDB_NAME; DATABASE_URL's database name when that is set). The working
tree itself is never written. Each result:

    caught       the tests failed (the first failing test is shown)
    SURVIVED     the tests passed: the suite does not notice this defect
    no test yet  a test file the mutant names does not exist (yet)
    error        the edit no longer applies (its text is not in the file exactly once: the
                 list needs updating), or the run broke before any test could fail (pytest
                 exit code other than 0 or 1, e.g. an import error)

First, unless --no-baseline, the tests of every selected mutant run once on an unmutated copy:
they must pass, or a "caught" would mean nothing.

Exit status: 0 when every mutant that has its tests was caught; 1 when any survived or is in
error, or the baseline failed. A mutant with no test yet is listed but does not fail the run.

    python scripts/mutants.py               # every mutant
    python scripts/mutants.py NAME ...      # these (a name, or a glob: 'claim-*')
    python scripts/mutants.py --list        # what each mutates and its tests
    python scripts/mutants.py --check       # only check that every edit still applies

Run it through ``make mutants`` (the venv and the database are set up there). It takes
minutes, so it is not part of every CI run: run it before a release and after changing a SQL
statement or the worker's accounting (the README's development section says so).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from queue import SimpleQueue
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent

CAPACITY = "tests/workqueue/test_worker_capacity.py"
ENDING = f"{CAPACITY}::test_every_ending_gives_the_runs_slot_back"
SHUTDOWN = f"{CAPACITY}::test_a_shutdown_gives_back_the_slots_of_what_it_released_and_of_what_never_started"
LEDGER = "tests/workqueue/test_worker_ledger.py"
MANAGER = "tests/workqueue/test_manager.py"
SKIPS_LOCKED = f"{MANAGER}::test_a_claim_skips_a_row_another_transaction_holds_locked_and_takes_the_others_at_once"
SWEEPS = "tests/workqueue/test_sweeps.py"
SCHEDULES = "tests/workqueue/test_schedules.py"
PERMISSIONS = "tests/workqueue/admin/test_every_action.py"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository root
    old: str
    new: str
    tests: tuple[str, ...]  # pytest node ids (or files) that must catch it
    what: str  # the defect, in words

    def apply(self, text: str) -> str:
        found = text.count(self.old)
        if found != 1:
            raise ValueError(f"{self.name}: its text is in {self.path} {found} times, not once")
        return text.replace(self.old, self.new)


MUTANTS: list[Mutant] = [
    # -- the claim (workqueue/sql/fragments.sql, controls.sql) ---------------------------------
    Mutant(
        "claim-ready-waits-for-locked-rows",
        "workqueue/sql/fragments.sql",
        "        LIMIT $q.n\n        FOR UPDATE SKIP LOCKED\n    ) AS c\n),\nlapsed AS (",
        "        LIMIT $q.n\n        FOR UPDATE\n    ) AS c\n),\nlapsed AS (",
        (SKIPS_LOCKED,),
        "the claim's ready walk waits for rows another transaction holds (FOR UPDATE, no SKIP LOCKED)",
    ),
    Mutant(
        "claim-lapsed-waits-for-locked-rows",
        "workqueue/sql/fragments.sql",
        "        ORDER BY w.lease_expires_at\n        LIMIT $q.n\n        FOR UPDATE SKIP LOCKED",
        "        ORDER BY w.lease_expires_at\n        LIMIT $q.n\n        FOR UPDATE",
        (SKIPS_LOCKED,),
        "the claim's lapsed-lease walk waits for rows another transaction holds",
    ),
    Mutant(
        "flow-claim-ready-waits-for-locked-rows",
        "workqueue/sql/controls.sql",
        "        LIMIT q.scan\n        FOR UPDATE SKIP LOCKED\n    ) AS c\n),\nlapsed AS (",
        "        LIMIT q.scan\n        FOR UPDATE\n    ) AS c\n),\nlapsed AS (",
        (SKIPS_LOCKED,),
        "the flow-control claim's ready walk waits for locked rows",
    ),
    Mutant(
        "flow-claim-lapsed-waits-for-locked-rows",
        "workqueue/sql/controls.sql",
        "        ORDER BY w.lease_expires_at\n        LIMIT q.scan\n        FOR UPDATE SKIP LOCKED",
        "        ORDER BY w.lease_expires_at\n        LIMIT q.scan\n        FOR UPDATE",
        (SKIPS_LOCKED,),
        "the flow-control claim's lapsed-lease walk waits for locked rows",
    ),
    Mutant(
        "claim-charges-no-attempt",
        "workqueue/sql/fragments.sql",
        "SET state = 'active', attempts = w.attempts + 1, lease_token = gen_random_uuid(),",
        "SET state = 'active', attempts = w.attempts, lease_token = gen_random_uuid(),",
        (f"{MANAGER}::test_claim_takes_priority_then_run_after_then_age_and_charges_an_attempt",),
        "a claim does not charge the attempt",
    ),
    Mutant(
        "claim-hands-out-spent-lapsed-items",
        "workqueue/sql/fragments.sql",
        "WHERE {by_pkey:w, SELECT id FROM $candidates} AND w.id = c.id AND NOT (c.lapsed AND c.spent)",
        "WHERE {by_pkey:w, SELECT id FROM $candidates} AND w.id = c.id",
        (
            "tests/workqueue/test_worker_process.py::"
            "test_a_poison_item_that_kills_its_worker_every_time_is_failed_once_its_attempts_are_spent",
        ),
        "a lapsed item whose attempts are spent is handed out again (a poison item loops)",
    ),
    Mutant(
        "claim-reclaimed-flag-lost",
        "workqueue/sql/fragments.sql",
        "claimed_by = %(worker_id)s, reclaimed = c.lapsed",
        "claimed_by = %(worker_id)s, reclaimed = false",
        (SKIPS_LOCKED,),
        "an item taken over from a dead holder is not flagged reclaimed",
    ),
    Mutant(
        "lapsed-spent-off-by-one",
        "workqueue/sql/fragments.sql",
        "($w.attempts >= $w.max_attempts)",
        "($w.attempts > $w.max_attempts)",
        (f"{SWEEPS}::test_dry_run_counts_everything_and_changes_nothing",),
        "a lapsed item gets one attempt more than max_attempts",
    ),
    # -- enqueue's live-key rule ----------------------------------------------------------------
    Mutant(
        "live-key-repeat-lowers-priority",
        "workqueue/sql/fragments.sql",
        "DO UPDATE SET priority = greatest(w.priority, excluded.priority),",
        "DO UPDATE SET priority = excluded.priority,",
        (f"{MANAGER}::test_enqueue_is_idempotent_per_live_key_and_only_raises_priority_and_pulls_run_after_earlier",),
        "a repeated enqueue of a live key may lower its priority",
    ),
    Mutant(
        "live-key-repeat-delays",
        "workqueue/sql/fragments.sql",
        "              run_after = least(w.run_after, excluded.run_after)",
        "              run_after = excluded.run_after",
        (f"{MANAGER}::test_enqueue_is_idempotent_per_live_key_and_only_raises_priority_and_pulls_run_after_earlier",),
        "a repeated enqueue of a live key may push its run_after later",
    ),
    # -- proofs ------------------------------------------------------------------------------
    Mutant(
        "extend-ignores-the-proof",
        "workqueue/sql/fragments.sql",
        "WHERE w.id = $id AND w.lease_token = $token AND w.state IN {states_running}\nRETURNING w.lease_expires_at",
        "WHERE w.id = $id AND w.state IN {states_running}\nRETURNING w.lease_expires_at",
        (f"{MANAGER}::test_a_stale_proof_gets_lease_lost_from_every_holder_write_and_changes_nothing",),
        "extend (and operations' begin and flush) moves a lease whose proof is stale",
    ),
    Mutant(
        "settle-ignores-the-proof",
        "workqueue/sql/queries.sql",
        "AND w.id = t.id AND w.lease_token = t.token\n  AND w.state NOT IN {states_unheld}",
        "AND w.id = t.id\n  AND w.state NOT IN {states_unheld}",
        (f"{MANAGER}::test_batched_completion_settles_the_others_and_refuses_the_one_whose_lease_was_taken_over",),
        "a batched completion settles an item whose proof is stale",
    ),
    Mutant(
        "renew-ignores-the-proof",
        "workqueue/sql/queries.sql",
        "    WHERE {by_pkey:w, SELECT id FROM t} AND w.lease_token = t.token AND w.state IN {states_running}",
        "    WHERE {by_pkey:w, SELECT id FROM t} AND w.state IN {states_running}",
        ("tests/workqueue/test_lease_keeper.py::test_a_lost_lease_cancels_the_holder_and_is_reported_by_close",),
        "the lease keeper's renewal moves a lease whose proof is stale",
    ),
    # -- failure, release --------------------------------------------------------------------
    Mutant(
        "retry-ignores-the-backoff",
        "workqueue/sql/queries.sql",
        "SET state = 'queued', run_after = now() + make_interval(secs => %(delay)s), lease_token = NULL,",
        "SET state = 'queued', run_after = now(), lease_token = NULL,",
        (f"{MANAGER}::test_fail_retries_with_backoff_until_max_attempts_then_fails_with_the_last_error",),
        "a failed attempt is retried at once, without its backoff",
    ),
    Mutant(
        "release-charges-the-attempt",
        "workqueue/sql/queries.sql",
        "SET state = 'queued', attempts = greatest(w.attempts - 1, 0), lease_token = NULL,\n"
        "    lease_expires_at = NULL, reclaimed = false, claimed_by = ''\nFROM unnest",
        "SET state = 'queued', attempts = w.attempts, lease_token = NULL,\n"
        "    lease_expires_at = NULL, reclaimed = false, claimed_by = ''\nFROM unnest",
        (f"{MANAGER}::test_release_refunds_the_attempt_and_keeps_run_after", SHUTDOWN),
        "a graceful release (shutdown) keeps the attempt its claim charged",
    ),
    # -- recover and reap --------------------------------------------------------------------
    Mutant(
        "recover-finalizes-live-stopping-items",
        "workqueue/sql/queries.sql",
        "    WHERE state = 'stopping' AND (lease_expires_at IS NULL OR lease_expires_at < coalesce(%(now)s, now()))",
        "    WHERE state = 'stopping' AND (lease_expires_at IS NULL OR lease_expires_at > coalesce(%(now)s, now()))",
        (f"{SWEEPS}::test_two_concurrent_runs_one_works_the_other_skips_and_each_run_is_recorded",),
        "recover finalizes stopping items whose lease is still live, not the lapsed ones",
    ),
    Mutant(
        "hard-timeout-fails-young-items",
        "workqueue/sql/queries.sql",
        "          AND h.started_at < coalesce(%(now)s, now()) - make_interval(secs => t.timeout_s)",
        "          AND h.started_at > coalesce(%(now)s, now()) - make_interval(secs => t.timeout_s)",
        (f"{SWEEPS}::test_hard_timeout_fails_the_item_clears_the_proof_and_tells_the_holder",),
        "reap fails items that started less than hard_timeout ago",
    ),
    Mutant(
        "reap-deletes-items-that-are-not-stopped",
        "workqueue/sql/queries.sql",
        "    WHERE w.state = 'stopped'\n"
        "      AND w.stopped_at < coalesce(%(now)s, now()) - make_interval(secs => %(min_retention)s)",
        "    WHERE w.stopped_at < coalesce(%(now)s, now()) - make_interval(secs => %(min_retention)s)",
        (f"{SWEEPS}::test_reap_deletes_only_stopped_items_past_retention_and_no_live_item_however_old",),
        "reap deletes rows past the retention whatever their state (issue 35 item 5)",
    ),
    Mutant(
        "reap-deletes-all-but-its-batch",
        "workqueue/sql/queries.sql",
        "DELETE FROM work_items\nWHERE id = ANY(ARRAY(",
        "DELETE FROM work_items\nWHERE id <> ALL(ARRAY(",
        (f"{SWEEPS}::test_reap_deletes_only_stopped_items_past_retention_and_no_live_item_however_old",),
        "reap deletes every row except the batch it picked",
    ),
    Mutant(
        "reap-newest-first",
        "workqueue/sql/queries.sql",
        "    ORDER BY w.stopped_at\n    LIMIT %(limit)s",
        "    ORDER BY w.stopped_at DESC\n    LIMIT %(limit)s",
        ("tests/workqueue/test_history.py::test_reap_deletes_the_oldest_first_and_by_each_queues_retention",),
        "a bounded reap deletes the newest rows past retention first",
    ),
    # -- schedules ---------------------------------------------------------------------------
    Mutant(
        "schedule-fire-and-advance-in-two-transactions",
        "workqueue/schedules/firing.py",
        "            result.fired.extend(fired)\n        store.schedule_advance_many(**updates, now=now, using=using)",
        "            result.fired.extend(fired)\n"
        "    with transaction.atomic(using=using):\n"
        "        store.schedule_advance_many(**updates, now=now, using=using)",
        (f"{SCHEDULES}::test_a_tick_while_another_firer_is_between_its_enqueue_and_its_advance_fires_nothing",),
        "a slot's enqueue commits before last_slot advances: a second firer runs the slot again (item 3)",
    ),
    Mutant(
        "schedule-advance-keeps-next-slot",
        "workqueue/sql/queries.sql",
        "    next_slot = u.next_slot,\n",
        "    next_slot = s.next_slot,\n",
        (f"{SCHEDULES}::test_reaped_items_are_never_fired_again",),
        "a firing pass does not move the schedule's next_slot",
    ),
    Mutant(
        "schedule-fires-while-paused",
        "workqueue/sql/queries.sql",
        "WHERE s.enabled AND s.removed_at IS NULL\n  AND s.next_slot <= coalesce(%(now)s::timestamptz, now())",
        "WHERE s.removed_at IS NULL\n  AND s.next_slot <= coalesce(%(now)s::timestamptz, now())",
        (f"{SCHEDULES}::test_pause_stops_firing_resume_restarts_it_and_run_now_adds_exactly_one_run",),
        "a paused schedule still fires",
    ),
    # -- flow control (controls.sql, workqueue/sql/fragments.sql) -------------------------------
    Mutant(
        "flow-claim-ignores-pause",
        "workqueue/sql/controls.sql",
        "        SELECT CASE WHEN u.paused THEN 0 ELSE least(",
        "        SELECT CASE WHEN false THEN 0 ELSE least(",
        ("tests/workqueue/test_controls.py::test_a_paused_queue_does_not_hold_back_another_in_the_same_claim",),
        "a paused queue is still claimed from",
    ),
    Mutant(
        "group-cap-off-by-one",
        "workqueue/sql/fragments.sql",
        "    CASE WHEN $q.group_cap IS NOT NULL\n         THEN $q.group_cap\n",
        "    CASE WHEN $q.group_cap IS NOT NULL\n         THEN $q.group_cap + 1\n",
        (
            "tests/workqueue/test_controls.py::test_concurrent_claimers_under_a_group_cap_never_hold_more_than_the_cap_per_group",
        ),
        "max_running_per_group lets one item more per group start",
    ),
    Mutant(
        "rate-counts-starts-outside-its-window",
        "workqueue/sql/fragments.sql",
        "WHERE st.queue = $queue AND st.started_at > now() - make_interval(secs => $seconds))",
        "WHERE st.queue = $queue AND st.started_at < now() - make_interval(secs => $seconds))",
        ("tests/workqueue/test_controls.py::test_a_queue_rate_counts_the_starts_inside_its_window_and_only_those",),
        "a queue's rate counts the starts outside its window instead of those inside it",
    ),
    Mutant(
        "cap-counts-lapsed-holders",
        "workqueue/sql/fragments.sql",
        "AND slot_h.state IN {states_held}\n       AND slot_h.lease_expires_at > now())",
        "AND slot_h.state IN {states_held})",
        ("tests/workqueue/test_claim_concurrency.py::test_a_reclaimed_item_takes_a_slot_of_the_cap_too",),
        "max_running counts holders whose lease lapsed (a dead worker keeps its slots)",
    ),
    # -- the wire ----------------------------------------------------------------------------
    Mutant(
        "heartbeat-ignores-its-echo",
        "workqueue/sql/wire.sql",
        "           ELSE w.state = 'active' AND w.last_heartbeat_at = %(expected)s::timestamptz END",
        "           ELSE w.state = 'active' END",
        ("tests/workqueue/wire/test_sdk.py::test_stale_heartbeat_raises_the_sdk_412_with_current_state",),
        "a wire heartbeat with a stale echo is accepted",
    ),
    Mutant(
        "ack-ignores-the-cap",
        "workqueue/sql/wire.sql",
        "    WHERE w.id = t.id AND t.due AND NOT t.others_reservation AND t.has_slot",
        "    WHERE w.id = t.id AND t.due AND NOT t.others_reservation",
        (
            "tests/workqueue/wire/test_caps.py::test_concurrent_acks_on_a_one_slot_queue_start_one_item_and_refuse_the_rest_with_409",
        ),
        "a wire ack starts an item on a capped queue with no free slot",
    ),
    # -- operations (operations/sql/queries.sql) -----------------------------------------------
    Mutant(
        "op-begin-takes-a-live-lease",
        "operations/sql/queries.sql",
        "      AND (o.state = 'pending' OR (o.state = 'running' AND o.claimed_until < now()))\n"
        "      AND o.attempts < o.max_attempts AND NOT o.cancel_requested",
        "      AND (o.state = 'pending' OR (o.state = 'running' AND o.claimed_until > now()))\n"
        "      AND o.attempts < o.max_attempts AND NOT o.cancel_requested",
        (
            "tests/operations/test_one_lease.py::"
            "test_a_flush_after_another_worker_claimed_the_item_is_not_held_and_the_claimant_begins",
        ),
        "begin takes an operation another worker runs under a live lease, and not a lapsed one",
    ),
    Mutant(
        "fan-in-counts-a-child-twice",
        "operations/sql/queries.sql",
        "    WHERE c.id = ANY(%(ids)s::text[]) AND c.parent_id IS NOT NULL AND NOT c.fanned_in",
        "    WHERE c.id = ANY(%(ids)s::text[]) AND c.parent_id IS NOT NULL",
        ("tests/operations/test_batches.py::test_a_child_is_counted_on_its_parent_once_however_often_its_fan_in_runs",),
        "the fan-in counts a child that was already counted",
    ),
    # -- the worker's accounting (workqueue/worker/) --------------------------------------------
    Mutant(
        "stall-cancelled-run-keeps-its-slot",
        "workqueue/worker/settler.py",
        'hold.reason or "cancelled")\n        self.ledger.finished(hold, ok=False)\n',
        'hold.reason or "cancelled")\n',
        (
            f"{CAPACITY}::test_runs_cancelled_by_a_stall_give_their_slot_back_so_a_one_runner_worker_goes_on",
            f"{ENDING}[stalled]",
            f"{ENDING}[cancelled-on-the-event-loop]",
        ),
        "a run that returns after it was cancelled (stall, lost lease, hard timeout, shutdown, async "
        "cancellation) keeps its slot (issue 35 item 1)",
    ),
    Mutant(
        "failed-run-keeps-its-slot",
        "workqueue/worker/settler.py",
        "            self.ledger.finished(hold, ok=outcome.action is Action.COMPLETE)",
        "            self.ledger.stopped(hold)",
        (f"{ENDING}[failed]", f"{ENDING}[lease-lost-at-its-own-settle]", f"{ENDING}[its-connection-killed]"),
        "a failed, retried, lost or released run keeps its slot (issue 35 item 6)",
    ),
    Mutant(
        "settled-batch-keeps-its-slots",
        "workqueue/worker/settler.py",
        "                self.ledger.finished_many(batch, {id(i) for i in lost})\n",
        "",
        (f"{ENDING}[returned]",),
        "the settler's batch settles its items and keeps their slots",
    ),
    Mutant(
        "lost-before-start-keeps-its-slot",
        "workqueue/worker/pools/base.py",
        'to start (%s); not running it", item, hold.reason)\n            self.ledger.finished(hold, ok=False)\n',
        'to start (%s); not running it", item, hold.reason)\n',
        (f"{ENDING}[lost-before-it-started]",),
        "a hold whose lease went while it waited for a runner keeps its slot",
    ),
    Mutant(
        "given-back-keeps-its-slot",
        "workqueue/worker/ledger.py",
        "        with self._lock:\n            self._leave(hold)\n        self.keeper.drop(hold)",
        "        with self._lock:\n            pass\n        self.keeper.drop(hold)",
        (SHUTDOWN,),
        "an item given back without running (shutdown) keeps its slot",
    ),
    Mutant(
        "leaving-hold-stays-returned",
        "workqueue/worker/ledger.py",
        "            pool.returned.discard(hold)\n        return pool",
        "        return pool",
        (f"{ENDING}[returned]",),
        "a settled item stays counted as waiting for the settler: the threads' room drifts",
    ),
    Mutant(
        "leaving-hold-keeps-the-loops-slot",
        "workqueue/worker/ledger.py",
        "            pool.holds.discard(hold)\n            pool.returned.discard(hold)",
        "            pool.returned.discard(hold)",
        (f"{ENDING}[cancelled-on-the-event-loop]", f"{ENDING}[handed-to-the-event-loop]"),
        "a run that ends on the event loop keeps its slot in the loop's lane",
    ),
    Mutant(
        "handoff-leaves-the-threads-lane",
        "workqueue/worker/ledger.py",
        "            self.threads.holds.discard(hold)\n            self.loop.holds.add(hold)\n",
        "            self.loop.holds.add(hold)\n",
        (f"{ENDING}[handed-to-the-event-loop]",),
        "a run handed on to the event loop is not counted in the loop's lane",
    ),
    Mutant(
        "returned-run-keeps-a-runners-place",
        "workqueue/worker/ledger.py",
        "            pool.returned.add(hold)\n",
        "",
        (f"{LEDGER}::test_items_waiting_for_the_settler_leave_room_for_the_next_claim",),
        "a returned run waiting for the settler still takes a runner's place",
    ),
    Mutant(
        "lost-settles-count-as-succeeded",
        "workqueue/worker/ledger.py",
        "            failed = sum(1 for hold in mine if id(hold.item) in lost) if lost else 0",
        "            failed = 0",
        (LEDGER,),
        "a batch's settles that found the lease lost count as succeeded",
    ),
    Mutant(
        "refill-threshold-off-by-one",
        "workqueue/worker/ledger.py",
        "        if busy > self.refill_at:\n            return 0",
        "        if busy >= self.refill_at:\n            return 0",
        (LEDGER,),
        "the claim loop claims again one item later than half a batch",
    ),
    Mutant(
        "shutdown-gives-nothing-back",
        "workqueue/worker/shutdown.py",
        "            settler.give_back(pool.take_waiting())",
        "            pool.take_waiting()",
        (SHUTDOWN,),
        "at shutdown the items claimed but not started are dropped, not released",
    ),
    Mutant(
        "shutdown-releases-nothing",
        "workqueue/worker/shutdown.py",
        '            settler.release(leftover, "shutdown")\n',
        "",
        (SHUTDOWN,),
        "at shutdown the items still running after the grace period are cancelled but not released",
    ),
    Mutant(
        "stall-clock-never-starts",
        "workqueue/worker/pools/base.py",
        "        hold.progress()  # starts the stall clock",
        "        pass  # starts the stall clock",
        (
            "tests/workqueue/test_worker_process.py::test_a_stalled_handler_is_cancelled_and_its_item_becomes_reclaimable",
        ),
        "a handler that never reports progress is never stall-cancelled",
    ),
    Mutant(
        "permanent-failure-retried",
        "workqueue/worker/outcome.py",
        '        return Ending(Action.FAIL, f"{exc.__class__.__name__}: {exc}")',
        '        return Ending(Action.RETRY, f"{exc.__class__.__name__}: {exc}")',
        ("tests/workqueue/test_worker_outcome.py",),
        "Permanent is retried like any other exception",
    ),
    Mutant(
        "dead-connection-charged",
        "workqueue/worker/outcome.py",
        "    if isinstance(exc, DB_ERRORS) and not connection_usable:",
        "    if isinstance(exc, DB_ERRORS) and connection_usable:",
        ("tests/workqueue/test_worker_outcome.py",),
        "a handler's dead connection is charged as its failure, a failed statement is released",
    ),
    # -- the admin's permissions (issue 35 item 2; the test comes with issue 25) ------------------
    Mutant(
        "retry-now-needs-no-permission",
        "workqueue/admin/items.py",
        '@admin.action(description="Retry now (failed items: a new run, attempts reset)", permissions=["operate"])',
        '@admin.action(description="Retry now (failed items: a new run, attempts reset)")',
        (PERMISSIONS,),
        "the work items' retry_now action is offered to users without the change permission",
    ),
    Mutant(
        "run-now-needs-no-permission",
        "workqueue/admin/items.py",
        '@admin.action(description="Run now (scheduled items: due at once)", permissions=["operate"])',
        '@admin.action(description="Run now (scheduled items: due at once)")',
        (PERMISSIONS,),
        "the work items' run_now action is offered to users without the change permission",
    ),
]


# -- running ------------------------------------------------------------------------------


@dataclass
class Result:
    mutant: Mutant
    status: str  # caught, SURVIVED, no test yet, error
    seconds: float = 0.0
    detail: str = ""


def repository_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    return [name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def scratch_copy(files: list[str]) -> Path:
    scratch = Path(tempfile.mkdtemp(prefix="mutant-"))
    for name in files:
        target = scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return scratch


def database_env(slot: int) -> dict[str, str]:
    """The environment of a scratch copy's runs: its code first on the path, its own database."""
    base = os.environ.get("DEVDB_NAME", "workqueue")
    name = f"{base}_mutants_{slot}"
    env = {**os.environ, "DEVDB_NAME": name, "PYTHONDONTWRITEBYTECODE": "1"}
    if env.get("DATABASE_URL"):
        parts = urlsplit(env["DATABASE_URL"])
        env["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{name}"))
    return env


def run_tests(scratch: Path, tests: tuple[str, ...], env: dict[str, str], log: Path, timeout: float) -> int:
    env = {**env, "PYTHONPATH": str(scratch)}
    probe = subprocess.run(
        [sys.executable, "-c", "import workqueue, operations; print(workqueue.__file__, operations.__file__)"],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0 or any(not Path(p).is_relative_to(scratch) for p in probe.stdout.split()):
        log.write_text(f"the scratch copy's packages are not the ones imported: {probe.stdout}{probe.stderr}")
        return -1
    command = [sys.executable, "scripts/devdb.py", "run", "--", sys.executable, "-m", "pytest", "-x", "-q"]
    with log.open("w") as out:
        try:
            done = subprocess.run(
                [*command, *tests], cwd=scratch, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            out.write(f"\n[mutants] no result in {timeout:.0f}s: stopped\n")
            return -2
    return done.returncode


def first_failure(log: Path) -> str:
    text = log.read_text(errors="replace")
    found = re.search(r"^(?:FAILED|ERROR) (\S+)", text, re.MULTILINE)
    return found.group(1) if found else ""


def missing_tests(mutant: Mutant) -> list[str]:
    return [t.split("::")[0] for t in mutant.tests if not (ROOT / t.split("::")[0]).exists()]


def run_mutant(mutant: Mutant, files: list[str], slot: int, logs: Path, timeout: float) -> Result:
    if missing := missing_tests(mutant):
        return Result(mutant, "no test yet", detail=", ".join(missing))
    started = time.monotonic()
    scratch = scratch_copy(files)
    try:
        target = scratch / mutant.path
        try:
            target.write_text(mutant.apply(target.read_text()))
        except ValueError as exc:
            return Result(mutant, "error", detail=str(exc))
        log = logs / f"{mutant.name}.log"
        rc = run_tests(scratch, mutant.tests, database_env(slot), log, timeout)
        seconds = time.monotonic() - started
        if rc == 0:
            return Result(mutant, "SURVIVED", seconds)
        if rc == 1:
            return Result(mutant, "caught", seconds, first_failure(log))
        if rc == -2:
            return Result(mutant, "caught", seconds, f"hung: no result in {timeout:.0f}s ({log})")
        return Result(mutant, "error", seconds, f"exit {rc}, see {log}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def baseline(mutants: list[Mutant], files: list[str], logs: Path, timeout: float) -> bool:
    tests = tuple(dict.fromkeys(t for m in mutants if not missing_tests(m) for t in m.tests))
    if not tests:
        return True
    print(f"baseline: {len(tests)} test selections on an unmutated copy ...", flush=True)
    scratch = scratch_copy(files)
    log = logs / "baseline.log"
    try:
        rc = run_tests(scratch, tests, database_env(0), log, timeout * 3)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if rc != 0:
        print(f"baseline FAILED (exit {rc}): {first_failure(log) or log}; fix the suite first", flush=True)
        return False
    print("baseline: green", flush=True)
    return True


def table(results: list[Result]) -> str:
    width = max(len(r.mutant.name) for r in results)
    where = max(len(r.mutant.path) for r in results)
    lines = [f"{'mutant':<{width}}  {'file':<{where}}  {'result':<11}  {'time':>6}  caught by / detail"]
    lines.append("-" * len(lines[0]))
    for r in results:
        secs = f"{r.seconds:5.0f}s" if r.seconds else ""
        lines.append(f"{r.mutant.name:<{width}}  {r.mutant.path:<{where}}  {r.status:<11}  {secs:>6}  {r.detail}")
    return "\n".join(lines)


def select(patterns: list[str]) -> list[Mutant]:
    if not patterns:
        return list(MUTANTS)
    chosen = [m for m in MUTANTS if any(fnmatch.fnmatchcase(m.name, p) for p in patterns)]
    unknown = [p for p in patterns if not any(fnmatch.fnmatchcase(m.name, p) for m in MUTANTS)]
    if unknown:
        sys.exit(f"no mutant named {', '.join(unknown)} (see --list)")
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (names or globs); default: all")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    parser.add_argument("--check", action="store_true", help="check that every edit still applies, run nothing")
    parser.add_argument("--jobs", type=int, default=1, help="mutants at once, each its own copy and database")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the tests")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for one mutant's tests")
    args = parser.parse_args()
    names = [m.name for m in MUTANTS]
    duplicated = {n for n in names if names.count(n) > 1}
    if duplicated:
        sys.exit(f"mutant names used twice: {', '.join(sorted(duplicated))}")
    mutants = select(args.names)
    if args.list:
        for m in mutants:
            print(f"{m.name}  ({m.path}): {m.what}")
            for t in m.tests:
                print(f"    {t}")
        return 0
    stale = []
    for m in mutants:
        try:
            m.apply((ROOT / m.path).read_text())
        except (ValueError, OSError) as exc:
            stale.append(str(exc))
    if args.check or stale:
        print("\n".join(stale) or f"all {len(mutants)} mutations apply")
        return 1 if stale else 0
    files = repository_files()
    logs = Path(tempfile.mkdtemp(prefix="mutants-logs-"))
    print(f"{len(mutants)} mutants; logs in {logs}", flush=True)
    if not args.no_baseline and not baseline(mutants, files, logs, args.timeout):
        return 1
    slots: SimpleQueue[int] = SimpleQueue()
    for n in range(max(1, args.jobs)):
        slots.put(n)

    def one(mutant: Mutant) -> Result:
        slot = slots.get()
        try:
            result = run_mutant(mutant, files, slot, logs, args.timeout)
        finally:
            slots.put(slot)
        print(f"  {result.status:<11} {mutant.name} {result.detail}", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, mutants))
    print()
    print(table(results))
    count = {s: sum(1 for r in results if r.status == s) for s in ("caught", "SURVIVED", "no test yet", "error")}
    print(
        f"\n{count['caught']} caught, {count['SURVIVED']} survived, {count['no test yet']} with no test yet, "
        f"{count['error']} in error, of {len(results)}"
    )
    return 1 if count["SURVIVED"] or count["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
