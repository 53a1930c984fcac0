"""The ``history`` section: does the drain slow down once the table holds a site's history?

A production ``work_items`` keeps every settled item for its queue's ``retention`` (7 days by
default) and many items scheduled ahead, so the claim and settle statements run beside
millions of rows the fresh tables of the other sections never have. This section measures
the 2-process drain on two databases in the same run, alternating between them run by run
(this machine is shared, so only a ratio measured side by side means anything):

- *small*: a fresh table, emptied before each run, as the ``drain`` section measures;
- *big*: the same schema after one ``INSERT … SELECT generate_series`` of N stopped items
  (settled over the last retention + 1 day, in 20 other queues) and one of M items
  scheduled a day ahead (20 more queues), then ``ANALYZE``.

Beside them: the raw-SQL ceiling on each, enqueue (one item per statement) on each, the
admin pages' times on each, the drain on the big table with and without a concurrent
``reap`` (one sweep after another, each a bounded batch, for the whole drain), and the plans
of one claim and one settle on the big table (``EXPLAIN (ANALYZE, BUFFERS)``, both the custom
plan and the plan the server picks for the prepared statement after warm-up) in the JSON.

It works on databases of its own, so the other sections never see its rows.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
import uuid

import psycopg
from django.db import connection, connections
from psycopg import sql as pgsql

from bench import rawsql
from workqueue.sql import CLAIMED_COLUMNS, QUERIES

_ID, _TOKEN = CLAIMED_COLUMNS.index("id"), CLAIMED_COLUMNS.index("lease_token")
DAY = 86400.0
OTHER_QUEUES = 20

# The history, written the way the queue writes it: ids minted by work_mint_id, stopped items
# spread evenly over retention + 1 day (so one day's worth is past retention for reap).
LOAD_STOPPED = """
INSERT INTO work_items (public_id, queue, key, state, outcome, priority, run_after, attempts, max_attempts,
                        metadata, wire, reclaimed, handed_out, last_error, claimed_by,
                        created_at, started_at, stopped_at)
SELECT work_mint_id('work_'), 'history.done.' || (g %% %(queues)s), 'done-' || g, 'stopped', 'succeeded', 0,
       a.at, 1, 5, '{}'::jsonb, false, false, false, '', 'history', a.at, a.at, a.at
FROM generate_series(1, %(n)s) AS g
CROSS JOIN LATERAL (SELECT now() - make_interval(secs => %(span)s * (%(n)s - g) / %(n)s)) AS a(at)
"""
LOAD_SCHEDULED = """
INSERT INTO work_items (public_id, queue, key, state, priority, run_after, attempts, max_attempts,
                        metadata, wire, reclaimed, handed_out, last_error, claimed_by, created_at)
SELECT work_mint_id('work_'), 'history.later.' || (g %% %(queues)s), 'later-' || g, 'queued', 0,
       now() + interval '1 day' + make_interval(secs => g %% 3600), 0, 5, '{}'::jsonb, false, false, false,
       '', '', now()
FROM generate_series(1, %(m)s) AS g
"""


def _use(name: str) -> None:
    """Point this process's Django connections at the database called ``name``."""
    connections.close_all()
    connection.settings_dict["NAME"] = name


def conninfo(db, name: str) -> str:
    return db.conninfo.replace(f"dbname={db.name}", f"dbname={name}", 1)


def _url(db, name: str) -> str:
    return db.url.replace(f"/{db.name}", f"/{name}", 1)


def load_history(conninfo: str, stopped: int, scheduled: int, retention: float) -> float:
    """Add ``stopped`` settled items and ``scheduled`` future items; ANALYZE; return seconds."""
    started = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if stopped:
            conn.execute(LOAD_STOPPED, {"n": stopped, "span": retention + DAY, "queues": OTHER_QUEUES})
        if scheduled:
            conn.execute(LOAD_SCHEDULED, {"m": scheduled, "queues": OTHER_QUEUES})
        conn.execute("ANALYZE work_items")
    return time.perf_counter() - started


def _empty() -> None:
    with connection.cursor() as cur:
        cur.execute("TRUNCATE work_items")
        cur.execute("VACUUM ANALYZE work_items")


def _buffers() -> int:
    """Shared buffers this database's backends have touched so far (hits and reads).

    Wall-clock rates on a shared machine swing by tens of percent; buffers per item do not,
    so they show whether an item costs the database more on the big table.
    """
    with connection.cursor() as cur:
        if connection.pg_version >= 150000:
            cur.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(0.3)  # let exited backends' counters land
        cur.execute("SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()")
        return cur.fetchone()[0]


def _drain(opts, url: str, during=None) -> tuple[float, object]:
    """Two runworker processes drain ``opts.drain_items`` no-op items; return (items/s, what
    ``during`` returned). ``during(stop_event)`` runs in a thread for the whole drain."""
    from bench.harness import Workers, wait_drained
    from workqueue.models import WorkItem

    workers = Workers(
        url, 2, ["--queue", "demo.noop", "--batch", str(opts.batch), "--concurrency", str(opts.concurrency)]
    )
    side: dict = {}
    stop = threading.Event()
    thread = None
    try:
        workers.wait_ready()
        if during is not None:
            thread = threading.Thread(target=lambda: side.setdefault("result", during(stop)))
        tag = uuid.uuid4().hex[:6]
        started = time.perf_counter()
        if thread:
            thread.start()
        for base in range(0, opts.drain_items, 10_000):
            WorkItem.objects.enqueue_many(
                [("demo.noop", f"h-{tag}-{base + i}") for i in range(min(10_000, opts.drain_items - base))]
            )
        wait_drained("demo.noop", timeout=max(120, opts.drain_items / 200))
        rate = opts.drain_items / (time.perf_counter() - started)
    finally:
        stop.set()
        if thread:
            thread.join()
        workers.stop()
    return rate, side.get("result")


def _raw_drain(opts, conninfo: str) -> float:
    from workqueue.models import WorkItem

    WorkItem.objects.enqueue_many([("raw.drain", f"r-{uuid.uuid4().hex[:8]}-{i}") for i in range(opts.drain_items)])
    return rawsql.drain(conninfo, "raw.drain", connections=2, batch=opts.batch)[1]


def _enqueue(n: int) -> float:
    from workqueue.models import WorkItem

    tag = uuid.uuid4().hex[:6]
    started = time.perf_counter()
    for i in range(n):
        WorkItem.objects.enqueue("history.enqueue", f"e-{tag}-{i}")
    return n / (time.perf_counter() - started)


ADMIN_PAGES = {
    "change list": "/admin/workqueue/workitem/",
    "change list, stopped": "/admin/workqueue/workitem/?state__exact=stopped",
    "change list, queued": "/admin/workqueue/workitem/?state__exact=queued",
    "dashboard": "/admin/workqueue/workitem/dashboard/",
}


def _admin_ms() -> dict[str, float]:
    """Median milliseconds of 3 GETs of each admin page (after a first), as a superuser."""
    from django.urls import reverse

    from bench.sections.admin import time_pages

    pages = dict(ADMIN_PAGES, dashboard=reverse("admin:workqueue_dashboard"))
    return {label: median for label, (_first, median) in time_pages(pages).items()}


def _reap_loop(stop: threading.Event) -> dict:
    """Run ``reap`` sweeps until ``stop``: back to back while each deletes a full batch (a
    day's worth of history is past retention), then once a second."""
    from workqueue.conf import wq_settings
    from workqueue.sweeps import run_sweep

    deleted, sweeps = 0, 0
    try:
        while not stop.is_set():
            result = run_sweep("reap")
            sweeps += 1
            deleted += result.counts.get("deleted", 0)
            if result.counts.get("deleted", 0) < wq_settings().reap_batch:
                stop.wait(1.0)  # caught up: sweep again in a second (as a tight cron would)
    finally:
        connections.close_all()
    return {"deleted": deleted, "sweeps": sweeps}


# -- plans ----------------------------------------------------------------------------------


def _literal(conn, value) -> str:
    return pgsql.Literal(value).as_string(conn)


def _prepared_name(conn, marker: str) -> str:
    for name, statement in conn.execute("SELECT name, statement FROM pg_prepared_statements"):
        if marker in statement:
            return name
    raise RuntimeError(f"no prepared statement contains {marker!r}")


def _plan_counts(conn, name: str) -> dict:
    generic, custom = conn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = %s", [name]
    ).fetchone()
    return {"generic_plans": generic, "custom_plans": custom}


def _explain(conn, text: str, params=None) -> str:
    return "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + text, params, prepare=False))


def _named_args(statement: str) -> list[str]:
    """The %(name)s (or binary %(name)b) parameters of ``statement`` in the order psycopg numbers them."""
    seen: list[str] = []
    for name in re.findall(r"%\((\w+)\)[sbt]", statement):
        if name not in seen:
            seen.append(name)
    return seen


def _explain_prepared(conn, statement: str, marker: str, params: dict) -> tuple[str, dict]:
    name = _prepared_name(conn, marker)
    args = ", ".join(_literal(conn, params[a]) for a in _named_args(statement))
    text = "\n".join(r[0] for r in conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE {name}({args})", prepare=False))
    return text, _plan_counts(conn, name)


def plans(conninfo: str, batch: int) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) of one claim and one settle, as custom plans and as the plan
    the server uses for the prepared statement after warm-up (the app prepares both)."""
    from workqueue.models import WorkItem

    queue = "history.plan"
    WorkItem.objects.enqueue_many([(queue, f"p-{uuid.uuid4().hex[:8]}-{i}") for i in range(batch * 10)])
    claim, settle = QUERIES["item_claim"], QUERIES["item_complete_many"]
    claim_params = rawsql._claim_params(queue, batch, 30.0)
    out: dict = {}
    with rawsql._connect(conninfo) as conn:

        def settle_params(rows) -> dict:
            rows = sorted(rows, key=lambda r: r[_TOKEN].int)  # as the store sends them: sorted by proof
            return {"ids": [r[_ID] for r in rows], "tokens": [r[_TOKEN] for r in rows], "outcome": "succeeded"}

        # Warm-up, as a worker's connection runs them: prepared, then executed 6 times, after
        # which the server has settled on a generic or a custom plan for each.
        for _ in range(6):
            rows = conn.execute(claim, claim_params).fetchall()
            conn.execute(settle, settle_params(rows)).fetchall()
        claim_text, claim_counts = _explain_prepared(conn, claim, "lease_token = gen_random_uuid()", claim_params)
        rows = conn.execute(claim, claim_params).fetchall()
        settle_text, settle_counts = _explain_prepared(conn, settle, "outcome = $", settle_params(rows))
        out["claim"] = {"prepared": claim_text, **claim_counts, "custom": _explain(conn, claim, claim_params)}
        rows = conn.execute(claim, claim_params).fetchall()
        out["settle"] = {
            "prepared": settle_text,
            **settle_counts,
            "custom": _explain(conn, settle, settle_params(rows)),
        }
        conn.execute(settle, settle_params(conn.execute(claim, claim_params).fetchall()))
    return out


def _sizes(conninfo: str) -> dict:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c "
            "WHERE c.oid = 'work_items'::regclass "
            "   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'work_items'::regclass) "
            "ORDER BY 1"
        ).fetchall()
    return {name: size for name, size in rows}


# -- the section ----------------------------------------------------------------------------


def bench_history(opts, db, report) -> None:
    from bench.harness import ThrowawayDatabase
    from workqueue.conf import wq_settings

    stopped, scheduled = opts.history_stopped, opts.history_scheduled
    retention = wq_settings().queue_defaults.retention
    small_rates, big_rates, small_raw, big_raw = [], [], [], []
    small_enq, big_enq, with_reap, without_reap = [], [], [], []
    small_bufs, big_bufs = [], []
    reaped: list[dict] = []
    with ThrowawayDatabase() as small:
        big = f"{small.name}_big"
        connections.close_all()
        with psycopg.connect(small.admin, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{big}" TEMPLATE "{small.name}"')
        try:
            loaded = load_history(conninfo(small, big), stopped, scheduled, retention)
            opts.log(f"  history: {stopped:,} stopped + {scheduled:,} scheduled loaded in {loaded:.0f}s")

            def on_small() -> None:
                _use(small.name)
                _empty()
                before = _buffers()
                small_rates.append(_drain(opts, small.url)[0])
                small_bufs.append((_buffers() - before) / opts.drain_items)
                _empty()
                small_raw.append(_raw_drain(opts, small.conninfo))
                small_enq.append(_enqueue(opts.enqueue_single))

            def on_big() -> None:
                _use(big)
                before = _buffers()
                big_rates.append(_drain(opts, _url(small, big))[0])
                big_bufs.append((_buffers() - before) / opts.drain_items)
                big_raw.append(_raw_drain(opts, conninfo(small, big)))
                big_enq.append(_enqueue(opts.enqueue_single))

            # Alternate which goes first, so a drift in the machine's load favours neither.
            for n in range(opts.runs):
                for step in (on_small, on_big) if n % 2 == 0 else (on_big, on_small):
                    step()
            _use(small.name)
            small_admin = _admin_ms()
            _use(big)
            big_admin = _admin_ms()
            plan = plans(conninfo(small, big), opts.batch)
            for n in range(opts.runs):
                if n % 2:
                    without_reap.append(_drain(opts, _url(small, big))[0])
                rate, swept = _drain(opts, _url(small, big), during=_reap_loop)
                with_reap.append(rate)
                reaped.append(swept)
                if not n % 2:
                    without_reap.append(_drain(opts, _url(small, big))[0])
            sizes = _sizes(conninfo(small, big))
        finally:
            _use(small.name)
            connections.close_all()
            with psycopg.connect(small.admin, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                    "AND pid <> pg_backend_pid()",
                    [big],
                )
                admin.execute(f'DROP DATABASE IF EXISTS "{big}"')

    med = statistics.median
    label = f"big table: +{stopped:,} stopped, +{scheduled:,} scheduled"
    note = f"batch {opts.batch}, concurrency {opts.concurrency}; small and big alternate, run by run"
    report.add("history: drain, 2 processes, small table", med(small_rates), "items/s", med(small_raw), note)
    report.add("history: drain, 2 processes, big table", med(big_rates), "items/s", med(big_raw), label)
    report.add(
        "history: drain big / small (target >= 0.90)",
        med(big_rates) / med(small_rates),
        "ratio",
        note=f"raw SQL big / small {med(big_raw) / med(small_raw):.2f}",
    )
    report.add(
        "history: buffers per drained item, big / small",
        med(big_bufs) / med(small_bufs),
        "ratio",
        note=f"{med(big_bufs):.1f} vs {med(small_bufs):.1f} shared buffers (hit or read) per item",
    )
    report.add("history: enqueue one per commit, small table", med(small_enq), "items/s")
    report.add("history: enqueue one per commit, big table", med(big_enq), "items/s")
    deleted = sum(r["deleted"] for r in reaped if r)
    sweeps = sum(r["sweeps"] for r in reaped if r)
    report.add(
        "history: big drain with reap / without",
        med(with_reap) / med(without_reap),
        "ratio",
        note=f"{med(with_reap):,.0f} vs {med(without_reap):,.0f}/s; reap deleted {deleted:,} rows in {sweeps} sweeps",
    )
    for page in small_admin:
        report.add(
            f"history: admin {page}, big table", big_admin[page], "ms", note=f"small table: {small_admin[page]:.0f} ms"
        )
    report.meta["history"] = {
        "stopped": stopped,
        "scheduled": scheduled,
        "load_seconds": loaded,
        "drain_small": small_rates,
        "drain_big": big_rates,
        "raw_small": small_raw,
        "raw_big": big_raw,
        "buffers_per_item_small": small_bufs,
        "buffers_per_item_big": big_bufs,
        "drain_big_without_reap": without_reap,
        "drain_big_with_reap": with_reap,
        "reap": reaped,
        "admin_ms_small": small_admin,
        "admin_ms_big": big_admin,
        "sizes_big": sizes,
        "plans": plan,
    }
