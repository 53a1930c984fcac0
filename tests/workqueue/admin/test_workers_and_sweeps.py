"""The worker list tells alive from stale by the database clock; the sweep list is read-only."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db.models.functions import Now
from django.urls import reverse

from workqueue.models import MaintenanceRun, Worker

pytestmark = pytest.mark.django_db


def status_of(page: str, worker_id: str) -> str:
    (row,) = [row for row in page.split("<tr") if f">{worker_id}</a>" in row]
    return re.search(r'class="wq-badge[^"]*"[^>]*>([^<]+)<', row).group(1)


def test_workers_show_alive_stale_or_exited(admin_client):
    Worker.objects.create(id="w-alive", host="h", pid=1, queues=["test.noop"], processed=12345)
    Worker.objects.create(id="w-stale", host="h", pid=2, queues=[], last_seen=Now() - dt.timedelta(minutes=5))
    Worker.objects.create(id="w-exited", host="h", pid=3, queues=[], state="stopped")
    page = admin_client.get(reverse("admin:workqueue_worker_changelist")).content.decode()
    assert [status_of(page, w) for w in ("w-alive", "w-stale", "w-exited")] == ["alive", "stale", "exited"]
    assert "12,345" in page and "5 min ago" in page
    assert admin_client.get(reverse("admin:workqueue_worker_add")).status_code == 403


def test_sweeps_are_listed_and_filtered_by_name(admin_client):
    MaintenanceRun.objects.create(name="recover", started_at=Now(), finished_at=Now(), counts={"requeued": 1200})
    MaintenanceRun.objects.create(name="reap", started_at=Now(), ok=False, error="boom")
    url = reverse("admin:workqueue_maintenancerun_changelist")
    page = admin_client.get(url).content.decode()
    assert "requeued=1,200" in page and ">failed<" in page
    recover_only = admin_client.get(url, {"name": "recover"}).context["cl"].result_list
    assert [run.name for run in recover_only] == ["recover"]


def test_the_dashboard_can_refresh_itself(admin_client):
    url = reverse("admin:workqueue_dashboard")
    assert '<meta http-equiv="refresh"' not in admin_client.get(url).content.decode()
    assert '<meta http-equiv="refresh" content="15">' in admin_client.get(url, {"refresh": "15"}).content.decode()
    assert '<meta http-equiv="refresh" content="5">' in admin_client.get(url, {"refresh": "1"}).content.decode()


def test_each_worker_shows_host_pid_queues_and_the_items_it_holds_from_one_query(admin_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.workqueue.admin.conftest import make_item
    from workqueue.models import State, WorkItem

    for n in range(3):
        Worker.objects.create(id=f"w-{n}", host=f"host-{n}", pid=100 + n, queues=["test.noop", "test.other"])
    a = make_item("test.noop", "held-by-0", State.ACTIVE, claimed_by="w-0")
    b = make_item("test.other", "also-held-by-0", State.STARTING, claimed_by="w-0")
    c = make_item("test.noop", "held-by-1", State.STOPPING, claimed_by="w-1")
    make_item("test.noop", "once-held-by-2", State.STOPPED, claimed_by="w-2")  # settled: not held
    with CaptureQueriesContext(connection) as ctx:
        page = admin_client.get(reverse("admin:workqueue_worker_changelist")).content.decode()
    item_reads = [q["sql"] for q in ctx.captured_queries if f'FROM "{WorkItem._meta.db_table}"' in q["sql"]]
    assert len(item_reads) == 1, item_reads  # one for the page, not one per worker
    rows = {w: row for row in page.split("<tr") for w in ("w-0", "w-1", "w-2") if f">{w}</a>" in row}
    for item in (a, b):
        assert reverse("admin:workqueue_workitem_change", args=[item.pk]) in rows["w-0"]
    assert reverse("admin:workqueue_workitem_change", args=[c.pk]) in rows["w-1"]
    assert "/workitem/" not in rows["w-2"]
    assert "host-1" in rows["w-1"] and ">101<" in rows["w-1"] and "test.noop, test.other" in rows["w-1"]
    detail = admin_client.get(reverse("admin:workqueue_worker_change", args=["w-0"])).content.decode()
    assert reverse("admin:workqueue_workitem_change", args=[a.pk]) in detail
