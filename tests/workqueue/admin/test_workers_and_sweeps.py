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
