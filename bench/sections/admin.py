"""The ``admin`` section: every admin page's time on a table of millions of rows.

Not in the default run (loading ten million rows takes minutes): ``benchqueue --only admin``.
It loads ``admin_rows`` settled work items (a tenth carrying metadata, one in a hundred
failed with an error text, spread over the retention), ``admin_operations`` finished
operations (a request each, one in a hundred failed), a few hundred live items and a worker,
``ANALYZE``s, rolls the last hour up as cron's ``recover`` would, and times each page: the
median of 3 GETs as a logged-in superuser after a first one (reported beside it: a cold
cache). The target is 300 ms a page.
"""

from __future__ import annotations

import statistics
import time

import psycopg
from django.db import connection

DAY = 86400.0
CHUNK = 1_000_000
TARGET_MS = 300

LOAD_ITEMS = """
INSERT INTO work_items (public_id, queue, key, state, outcome, priority, run_after, attempts, max_attempts,
                        metadata, wire, reclaimed, handed_out, last_error, claimed_by,
                        created_at, started_at, stopped_at)
SELECT work_mint_id('work_'), 'admin.q' || (g %% 20), 'done-' || g, 'stopped',
       CASE WHEN g %% 100 = 0 THEN 'failed' ELSE 'succeeded' END, 0, a.at, 1, 5,
       CASE WHEN g %% 10 = 0 THEN jsonb_build_object('account', g %% 10000, 'region', 'eu') ELSE '{}'::jsonb END,
       false, false, false,
       CASE WHEN g %% 100 = 0 THEN 'TimeoutError: upstream ' || (g %% 97) || ' did not answer' ELSE '' END,
       'history', a.at, a.at, a.at
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
CROSS JOIN LATERAL (SELECT now() - make_interval(secs => %(span)s::float8 * (%(n)s - g) / %(n)s)) AS a(at)
"""
LOAD_LIVE = """
INSERT INTO work_items (public_id, queue, key, state, priority, run_after, attempts, max_attempts,
                        metadata, wire, reclaimed, handed_out, last_error, claimed_by, created_at)
SELECT work_mint_id('work_'), 'admin.q' || (g % 20), 'live-' || g, 'queued', 0, now(), 0, 5,
       '{}'::jsonb, false, false, false, '', '', now()
FROM generate_series(1, 500) AS g
"""
LOAD_OPERATIONS = """
INSERT INTO {table} (id, kind, owner, state, request, units_total, units_done, attempts, max_attempts,
                     error_code, error_message, created_at, updated_at, started_at, finished_at)
SELECT 'op_admin_' || g, 'admin.export.' || (g %% 5), (g %% 50)::text,
       CASE WHEN g %% 100 = 0 THEN 'failed' ELSE 'succeeded' END,
       jsonb_build_object('account', g %% 10000, 'format', 'csv'), 10, 10, 1, 5,
       CASE WHEN g %% 100 = 0 THEN 'upstream' ELSE '' END,
       CASE WHEN g %% 100 = 0 THEN 'Billing API timed out after 30 s' ELSE '' END,
       a.at, a.at, a.at, a.at
FROM generate_series(1, %(n)s::bigint) AS g
CROSS JOIN LATERAL (SELECT now() - make_interval(secs => %(span)s::float8 * (%(n)s - g) / %(n)s)) AS a(at)
"""


def load(conninfo: str, rows: int, ops: int, retention: float, log) -> float:
    """Load the rows (in chunks of a million, saying how far it got); ANALYZE; return seconds."""
    from operations.models import Operation

    started = time.perf_counter()
    span = retention + DAY
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for first in range(1, rows + 1, CHUNK):
            last = min(rows, first + CHUNK - 1)
            conn.execute(LOAD_ITEMS, {"first": first, "last": last, "n": rows, "span": span})
            log(f"  admin: {last:,} of {rows:,} work items ({time.perf_counter() - started:.0f}s)")
        conn.execute(LOAD_LIVE)
        if ops:
            table = psycopg.sql.Identifier(Operation._meta.db_table).as_string(conn)
            conn.execute(LOAD_OPERATIONS.format(table=table), {"n": ops, "span": span})
        conn.execute("ANALYZE")
    return time.perf_counter() - started


def pages() -> dict[str, str]:
    """Every admin page an operator opens, with the filters and searches the lists offer."""
    from django.urls import reverse

    from operations.models import Operation
    from workqueue.models import WorkItem

    items = reverse("admin:workqueue_workitem_changelist")
    ops = reverse("admin:operations_operation_changelist")
    item = WorkItem.objects.filter(state="stopped", outcome="failed").order_by("-id").values_list("pk", flat=True)[0]
    op = Operation.objects.filter(state="failed").order_by("-created_at").values_list("pk", flat=True)[0]
    return {
        "dashboard": reverse("admin:workqueue_dashboard"),
        "charts, last hour": reverse("admin:workqueue_dashboard_charts"),
        "charts, last week": reverse("admin:workqueue_dashboard_charts") + "?range=week",
        "work items": items,
        "work items, stopped": f"{items}?state__exact=stopped",
        "work items, queued": f"{items}?state__exact=queued",
        "work items, stuck": f"{items}?stuck=yes",
        "work items, one queue": f"{items}?queue=admin.q7",
        "work items, search a key": f"{items}?q=done-4242",
        "work items, search account=420": f"{items}?q=account%3D420",
        "work items, search error:upstream 7": f"{items}?q=error%3Aupstream+7+",
        "work item page": reverse("admin:workqueue_workitem_change", args=[item]),
        "workers": reverse("admin:workqueue_worker_changelist"),
        "schedules": reverse("admin:workqueue_schedule_changelist"),
        "sweep runs": reverse("admin:workqueue_maintenancerun_changelist"),
        "environments": reverse("admin:workqueue_environment_changelist"),
        "operations": ops,
        "operations, failed": f"{ops}?state__exact=failed",
        "operations, one kind": f"{ops}?kind=admin.export.3",
        "operations, one owner": f"{ops}?owner=7",
        "operations, search account=420": f"{ops}?q=account%3D420",
        "operations, search error:timed out": f"{ops}?q=error%3Atimed+out",
        "operation page": reverse("admin:operations_operation_change", args=[op]),
    }


def time_pages(paths: dict[str, str], gets: int = 4) -> dict[str, tuple[float, float]]:
    """(first GET, median of the rest) in milliseconds for each page, as a logged-in superuser;
    a page that does not answer 200 is an error, not a figure."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(
        username="admin-bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    out = {}
    for label, path in paths.items():
        took = []
        for _ in range(gets):
            started = time.perf_counter()
            response = client.get(path)
            took.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"admin page {path} answered {response.status_code}")
        out[label] = (took[0], statistics.median(took[1:]))
    return out


def bench_admin(opts, db, report) -> None:
    from workqueue.conf import wq_settings

    rows, ops = opts.admin_rows, opts.admin_operations
    loaded = load(db.conninfo, rows, ops, wq_settings().queue_defaults.retention, opts.log)
    opts.log(f"  admin: {rows:,} work items + {ops:,} operations loaded in {loaded:.0f}s")
    from workqueue.models import Worker

    Worker.objects.get_or_create(id="w-admin-bench", defaults={"host": "bench", "pid": 1, "queues": ["admin.q1"]})
    # What cron's recover or reap does each minute: roll the last hour's settlements up, so
    # the dashboard and the charts read the rollup (without it they count the items).
    from workqueue import stats

    stats.rollup()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_size_pretty(pg_total_relation_size('work_items'))")
        size = cur.fetchone()[0]
    timings = time_pages(pages())
    slowest = max(median for _first, median in timings.values())
    for label, (first, median) in timings.items():
        flag = "" if median <= TARGET_MS else f"; over the {TARGET_MS} ms target"
        report.add(f"admin: {label}", median, "ms", note=f"first GET {first:.0f} ms{flag}")
    report.add(
        f"admin: slowest page (target <= {TARGET_MS} ms)",
        slowest,
        "ms",
        note=f"{rows:,} work items ({size}), {ops:,} operations",
    )
    report.meta["admin"] = {"rows": rows, "operations": ops, "size": size, "load_seconds": round(loaded)}
