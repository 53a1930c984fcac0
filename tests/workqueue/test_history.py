"""A table full of history: settling and reaping cost their own rows, not the whole table.

``work_items`` keeps every settled item for its queue's retention, so in production it holds
millions of stopped rows beside a few hundred held ones. These tests load such a table
(100,000 rows, ANALYZEd) and check the plans of the statements that run beside it all day.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test import override_settings

from workqueue.models import WorkItem
from workqueue.sql import QUERIES
from workqueue.states import HELD_STATES, UNHELD_STATES, State
from workqueue.sweeps import reap as reaper

pytestmark = pytest.mark.django_db(transaction=True)


def load_history(stopped_days: float = 1.0, rows: int = 100_000, queued_percent: int = 1) -> None:
    """``rows`` rows (100,000): stopped ones settled over the last ``stopped_days``,
    ``queued_percent`` queued, a few held."""
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO work_items (public_id, queue, key, state, outcome, priority, run_after, attempts,
                                    max_attempts, metadata, wire, reclaimed, handed_out, last_error,
                                    claimed_by, created_at, stopped_at, lease_expires_at, lease_token)
            SELECT 'work_h' || g, 'test.noop', 'h' || g, s.state,
                   CASE WHEN s.state = 'stopped' THEN 'succeeded' END, 0, now(), 1, 5, '{}', false, false,
                   false, '', '', now(),
                   CASE WHEN s.state = 'stopped' THEN now() - make_interval(secs => %s * 86400.0 * g / %s) END,
                   CASE WHEN s.state = 'active' THEN now() + interval '1 minute' END,
                   CASE WHEN s.state = 'active' THEN gen_random_uuid() END
            FROM generate_series(1, %s) AS g,
                 LATERAL (SELECT CASE WHEN g %% 100 < %s THEN 'queued'
                                      WHEN g %% 1000 = 1 THEN 'active'
                                      ELSE 'stopped' END AS state) AS s
            """,
            [stopped_days, rows, rows, queued_percent],
        )
        cur.execute("ANALYZE work_items")


def explain(name: str, params: dict) -> str:
    with connection.cursor() as cur:
        cur.execute("EXPLAIN " + QUERIES[name], params)
        return "\n".join(r[0] for r in cur.fetchall())


def test_settle_looks_each_presented_id_up_by_primary_key_on_a_table_of_history():
    load_history()
    held = list(WorkItem.objects.filter(state="active").values_list("id", "lease_token")[:50])
    plan = explain(
        "item_complete_many",
        {"ids": [i for i, _ in held], "tokens": [t for _, t in held], "outcome": "succeeded"},
    )
    assert "work_items_pkey" in plan, plan
    # Not through the index of every held row, which the planner estimates at one row here.
    assert "work_items_held_idx" not in plan, plan
    assert "Seq Scan on work_items" not in plan, plan


@pytest.mark.parametrize("rows, queued_percent", [(5_000, 1), (30_000, 1), (5_000, 90)])
def test_claim_settle_and_renewal_look_their_items_up_by_primary_key_on_a_mid_size_table(rows, queued_percent):
    """Between a fresh table and one of history, a seq scan of the whole table looks cheaper to
    the planner than a few hundred primary-key lookups: a claim joined its candidates to every
    row by hash (a queue the statistics do not know yet: ~225 candidates estimated), and a
    settle filtered every row against the held states (estimated at one row), 23 ms for 300
    items on 30,000 rows. Each statement must reach its rows by primary key, whatever the
    table's size and whatever the planner estimates."""
    load_history(rows=rows, queued_percent=queued_percent)  # history, or a backlog of another queue
    WorkItem.objects.enqueue_many([("test.fresh", f"f{i}") for i in range(300)])  # a queue not in the statistics
    claim = {
        "queues": ["test.fresh"],
        "limits": [300],
        "leases": [30.0],
        "caps": [None],
        "wires": [False],
        "limit": 300,
        "worker_id": "plans",
        "relaxed": False,
    }
    plans = {"item_claim": explain("item_claim", claim), "item_claim_capped": explain("item_claim_capped", claim)}
    with connection.cursor() as cur:
        cur.execute(QUERIES["item_claim"], claim)
        held = [(r[0], r[11]) for r in cur.fetchall()]
    assert len(held) == 300
    ids, tokens = [i for i, _ in held], [t for _, t in held]
    plans["item_complete_many"] = explain("item_complete_many", {"ids": ids, "tokens": tokens, "outcome": "succeeded"})
    plans["item_extend_many"] = explain(
        "item_extend_many", {"ids": ids, "tokens": tokens, "leases": [30.0] * 300, "relaxed": False}
    )
    plans["item_release_many"] = explain("item_release_many", {"ids": ids, "tokens": tokens, "channel": "c"})
    for name, plan in plans.items():
        assert "Seq Scan on work_items" not in plan, f"{name}:\n{plan}"
        # (A shutdown's release may read the held index instead: it is bounded by what is held.)
        assert "work_items_pkey" in plan or name == "item_release_many", f"{name}:\n{plan}"


@pytest.mark.parametrize("state", list(State))
def test_settle_takes_held_items_only_whatever_the_state(state):
    """The settle's predicate names the states it does not take; this covers the whole set, so
    a new state cannot slip through it unnoticed."""
    token = uuid.uuid4()
    WorkItem.objects.enqueue("test.noop", "k")
    WorkItem.objects.filter(key="k").update(state=state, lease_token=token)
    item = WorkItem.objects.get(key="k")
    assert (state in HELD_STATES) is (state not in UNHELD_STATES)  # the settle says NOT IN unheld
    settled, lost = WorkItem.objects.complete_many([item])
    assert (len(settled), len(lost)) == ((1, 0) if state in HELD_STATES else (0, 1))
    assert WorkItem.objects.get(key="k").state == (State.STOPPED if state in HELD_STATES else state)


def reap_params(**extra) -> dict:
    week = 7 * 86400.0
    return {
        "queues": ["test.noop", "test.other"],
        "retentions": [week, 60.0],
        "default_retention": week,
        "min_retention": 60.0,
        "now": None,
        "limit": 1000,
        **extra,
    }


def test_reap_reads_the_stopped_index_from_the_oldest_row_past_retention():
    load_history(stopped_days=1.0)
    plan = explain("item_reap_stopped", reap_params())
    assert "Index Scan using work_items_stopped_idx" in plan, plan
    # The shortest retention bounds the scan: a sweep with little to delete reads little.
    assert "Index Cond: (stopped_at <" in plan, plan
    assert "Seq Scan on work_items" not in plan, plan


def test_a_reap_sweep_with_nothing_past_retention_reads_a_handful_of_pages():
    load_history(stopped_days=1.0)  # all within the default retention (7 days)
    with connection.cursor() as cur:
        cur.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + QUERIES["item_reap_stopped"],
            reap_params(queues=["test.noop"], retentions=[7 * 86400.0], min_retention=7 * 86400.0),
        )
        plan = cur.fetchone()[0][0]["Plan"]
    assert plan["Actual Rows"] == 0
    touched = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert touched < 50, f"{touched} buffers for a sweep that deletes nothing (the table has ~100,000 rows)"


def test_reap_deletes_the_oldest_first_and_by_each_queues_retention():
    def stopped(queue: str, key: str, age: dt.timedelta) -> None:
        WorkItem.objects.enqueue(queue, key)
        WorkItem.objects.filter(queue=queue, key=key).update(
            state="stopped", outcome="succeeded", stopped_at=Now() - age
        )

    stopped("history.brief", "older", dt.timedelta(hours=3))
    stopped("history.brief", "old", dt.timedelta(hours=2))
    stopped("history.brief", "young", dt.timedelta(seconds=10))
    stopped("test.noop", "two-days", dt.timedelta(days=2))  # default retention: 7 days
    stopped("history.long", "nine-days", dt.timedelta(days=9))  # its own retention: 30 days
    from django.conf import settings

    base = settings.WORKQUEUE
    conf = {
        **base,
        "REAP_BATCH": 1,
        "QUEUES": {**base["QUEUES"], "history.brief": {"retention": 3600}, "history.long": {"retention": 30 * 86400}},
    }
    with override_settings(WORKQUEUE=conf):
        assert reaper.delete_stopped() == 1
        assert not WorkItem.objects.filter(key="older").exists()
        assert WorkItem.objects.filter(key="old").exists()
        assert reaper.delete_stopped() == 1
        assert reaper.delete_stopped() == 0
    assert sorted(WorkItem.objects.values_list("key", flat=True)) == ["nine-days", "two-days", "young"]


def load_other_queues_history(rows: int = 20_000) -> None:
    """``rows`` settled items of 20 other queues over the last 8 days, then ANALYZE: the
    statistics see history and not one queued item (a site whose queues were drained when
    autovacuum last looked)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO work_items (public_id, queue, key, state, outcome, priority, run_after, attempts,
                                    max_attempts, metadata, wire, reclaimed, handed_out, last_error,
                                    claimed_by, created_at, started_at, stopped_at)
            SELECT 'work_h' || g, 'history.' || (g %% 20), 'done-' || g, 'stopped', 'succeeded', 0, a.at, 1, 5,
                   '{}', false, false, false, '', 'history', a.at, a.at, a.at
            FROM generate_series(1, %s) AS g
            CROSS JOIN LATERAL (SELECT now() - make_interval(secs => 8 * 86400.0 * g / %s)) AS a(at)
            """,
            [rows, rows],
        )
        cur.execute("ANALYZE work_items")


def plans_of(verb) -> list[str]:
    """Run ``verb()``, then EXPLAIN each statement it ran on work_items with the same
    parameters (the statistics have not changed, so neither has the plan)."""
    ran: list[tuple[str, object]] = []

    def capture(execute, sql, params, many, context):
        if "work_items" in sql and sql.lstrip().upper().startswith(("WITH", "SELECT", "UPDATE")):
            ran.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        verb()
    plans = []
    with connection.cursor() as cur:
        for sql, params in ran:
            cur.execute("EXPLAIN " + sql, params)
            plans.append(sql.split("\n")[0] + "\n" + "\n".join(r[0] for r in cur.fetchall()))
    return plans


@pytest.mark.parametrize("queue", ["test.noop", "test.capped", "test.flow"])
def test_a_claim_walks_the_claim_and_held_indexes_when_the_statistics_saw_no_queued_item(queue):
    """A site with history whose last ANALYZE found no queued item (the queue was drained at
    that moment: the usual case for a burst on an idle queue). The planner then estimates
    every partial index over live rows at one row, and it read the unsettled items' key index
    from end to end with a filter instead of the claim index: a 2,000-item backlog made each
    claim of 200 filter every unsettled row (31.7 ms against 8.4 ms on a million stopped
    rows, and 0.26 of the fresh table's drain). The claim's ready walk must read
    work_items_claim_idx and its lapsed walk work_items_held_idx, whichever path it takes
    (plain, capped, flow-controlled)."""
    load_other_queues_history()
    if queue == "test.flow":
        from workqueue import controls

        controls.write(queue, limits={"max_running_per_group": 100}, by="test")
    WorkItem.objects.enqueue_many([(queue, f"f{i}") for i in range(2_000)])  # after the ANALYZE
    plans = plans_of(lambda: WorkItem.objects.claim([queue], limit=200, worker_id="plans"))
    claim = [p for p in plans if "work_items_claim_idx" in p]
    assert claim, "\n\n".join(plans)
    for plan in plans:
        assert "work_items_unsettled_key" not in plan, plan
        assert "Seq Scan on work_items" not in plan, plan
    assert "work_items_held_idx" in claim[0], claim[0]


def test_a_wire_poll_walks_the_poll_index_when_the_statistics_saw_no_queued_item():
    """The same trap for the wire's poll: its walk must read work_items_poll_idx."""
    from workqueue.environments import create_environment

    load_other_queues_history()
    environment, _key = create_environment("plans", "self_hosted")
    WorkItem.objects.enqueue_many(
        [{"queue": "test.wire", "key": f"w{i}", "environment": environment.id} for i in range(2_000)]
    )
    plans = plans_of(lambda: WorkItem.objects.poll(environment.id))
    assert any("work_items_poll_idx" in p for p in plans), "\n\n".join(plans)
    for plan in plans:
        assert "work_items_unsettled_key" not in plan, plan
        assert "Seq Scan on work_items" not in plan, plan


def test_cancel_by_key_still_reads_the_unsettled_items_key_index():
    """The index the claims may no longer read is still the one a cancel by key reads."""
    load_history(rows=20_000)
    plan = explain("item_cancel_key", {"key": "h7", "queue": None})
    assert "work_items_unsettled_keyed_idx" in plan, plan


def prepared_plan(marker: str, args: list) -> str:
    """EXPLAIN ANALYZE of the statement this connection prepared whose text holds ``marker``,
    run with ``args`` through the plan the server keeps for it (after five runs, the generic
    plan when it looks no dearer than the custom ones)."""
    with connection.cursor() as cur:
        cur.execute("SELECT name, generic_plans FROM pg_prepared_statements WHERE statement LIKE %s", [f"%{marker}%"])
        ((name, generic),) = cur.fetchall()
        literals = ", ".join(["%s"] * len(args))
        cur.execute(f"EXPLAIN (ANALYZE, TIMING OFF) EXECUTE {name}({literals})", args)
        return f"generic plans: {generic}\n" + "\n".join(r[0] for r in cur.fetchall())


def test_a_batch_settle_matches_each_presented_item_once_when_the_statistics_saw_no_held_item():
    """The same stale statistics estimate the held rows at one, and the prepared settle's plan
    joined its 200 rows to the 200 presented (id, proof) pairs by a nested loop that ran the
    unnest again for every row: 40,000 pairs formed and compared per settle of 200 (9.8 ms
    against 3.0 ms in a 2-connection drain beside a million stopped rows: two thirds of what
    the history cost that drain). Each presented pair must be read once."""
    load_other_queues_history()
    WorkItem.objects.enqueue_many([("test.fresh", f"f{i}") for i in range(8 * 200)])  # after the ANALYZE
    for _ in range(7):  # as a worker's connection runs it: prepared, then the server's kept plan
        batch = WorkItem.objects.claim(["test.fresh"], limit=200, worker_id="plans").items
        assert len(WorkItem.objects.complete_many(batch)[0]) == 200
    batch = WorkItem.objects.claim(["test.fresh"], limit=200, worker_id="plans").items
    batch.sort(key=lambda i: i.lease_token)  # as the store sends them
    # item_complete_many ($1 ids, $2 proofs, $3 outcome)
    statement = "AS tokens)\nUPDATE work_items w\nSET state = 'stopped'"
    plan = prepared_plan(statement, [[i.id for i in batch], [i.lease_token for i in batch], "succeeded"])
    assert "(actual rows=200 loops=1)" in plan.splitlines()[1], plan  # all 200 settled
    # A node run once per row reads one row (the arrays' one-row holder), never the pairs again.
    for rows, loops in re.findall(r"actual rows=(\d+) loops=(\d+)", plan):
        assert int(loops) == 1 or int(rows) <= 1, plan
    assert "Rows Removed by Join Filter" not in plan, plan


def test_a_renewal_of_every_held_lease_reads_each_presented_item_once_when_the_statistics_saw_none():
    """The lease keeper's renewal joins the same kind of pairs, every few seconds, for every
    item a worker holds."""
    load_other_queues_history()
    WorkItem.objects.enqueue_many([("test.fresh", f"f{i}") for i in range(400)])  # after the ANALYZE
    held = WorkItem.objects.claim(["test.fresh"], limit=400, worker_id="plans").items
    for _ in range(7):  # prepared, then the server's kept plan
        renewed = WorkItem.objects.extend_many(held, [30.0] * len(held))
        assert sum(v is not None for v in renewed.values()) == 400
    held.sort(key=lambda i: i.lease_token)  # as the store sends them
    statement = "WITH p AS (SELECT $1::bigint[] AS ids"  # item_extend_many ($1 ids, $2 proofs, $3 leases)
    plan = prepared_plan(statement, [[i.id for i in held], [i.lease_token for i in held], [30.0] * len(held), False])
    assert "(actual rows=800 loops=1)" in plan.splitlines()[1], plan  # 400 held, 400 renewed
    # A node run once per row reads one row (the arrays' one-row holder), never the pairs again.
    for rows, loops in re.findall(r"actual rows=(\d+) loops=(\d+)", plan):
        assert int(loops) == 1 or int(rows) <= 1, plan
