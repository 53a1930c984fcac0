"""Schedules admin: the list says what runs and when, actions pause/resume/run-now, the form refuses bad input."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse

from workqueue import schedules
from workqueue.models import Schedule, WorkItem

pytestmark = pytest.mark.django_db

FORM = {
    "name": "nightly",
    "cron": "30 2 * * *",
    "every": "",
    "timezone": "Europe/Berlin",
    "misfire": "latest",
    "queue": "test.noop",
    "key_prefix": "",
    "metadata": "{}",
    "priority": "0",
    "kind": "",
    "request": "null",
    "task": "",
    "args": "[]",
    "enabled": "on",
}


def test_the_changelist_shows_what_runs_when_and_the_next_run(admin_client):
    schedules.add({"name": "tenner", "queue": "test.noop", "every": 10})
    schedules.add({"name": "nightly", "queue": "test.noop", "cron": "30 2 * * *", "timezone": "Europe/Berlin"})
    schedules.run_now("tenner")
    page = admin_client.get(reverse("admin:workqueue_schedule_changelist")).content.decode()
    assert "item on test.noop" in page and "every 10 s" in page
    assert "cron 30 2 * * * (Europe/Berlin)" in page
    assert "in " in page and "tenner:manual:" in page and "enabled" in page


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"cron": "61 * * * *"}, "cron", "is not valid: Bad minute"),
        ({"cron": "* * *"}, "cron", "must have five fields"),
        ({"timezone": "Europe/Atlantis"}, "timezone", "unknown time zone 'Europe/Atlantis'"),
        ({"queue": "no.such.queue"}, "queue", "unknown queue"),
    ],
)
def test_the_form_refuses_a_bad_cron_or_time_zone_and_writes_nothing(admin_client, change, field, message):
    response = admin_client.post(reverse("admin:workqueue_schedule_add"), {**FORM, **change})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors and message in " ".join(errors[field]), errors
    assert not Schedule.objects.exists()


def test_adding_in_the_admin_creates_a_schedule_waiting_for_its_first_slot(admin_client):
    response = admin_client.post(reverse("admin:workqueue_schedule_add"), FORM, follow=True)
    assert response.status_code == 200
    s = Schedule.objects.get(name="nightly")
    assert (s.source, s.enabled, s.timezone) == ("admin", True, "Europe/Berlin")
    assert s.next_slot == schedules.timing_of(s).next_after(s.created_at)


def test_pause_resume_and_run_now_actions(admin_client):
    s = schedules.add({"name": "tenner", "queue": "test.noop", "every": 10})
    url = reverse("admin:workqueue_schedule_changelist")
    admin_client.post(url, {"action": "pause", "_selected_action": [s.pk]})
    assert not Schedule.objects.get(pk=s.pk).enabled
    admin_client.post(url, {"action": "resume", "_selected_action": [s.pk]})
    assert Schedule.objects.get(pk=s.pk).enabled
    admin_client.post(url, {"action": "run_now", "_selected_action": [s.pk]})
    assert WorkItem.objects.filter(key__startswith="tenner:manual:").count() == 1
    assert Schedule.objects.get(pk=s.pk).last_slot is None  # a run-now uses no slot


def test_a_settings_schedule_is_read_only_but_can_be_paused(admin_client, settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {"fixed": {"every": 60, "queue": "test.noop"}}}
    schedules.sync_settings()
    s = Schedule.objects.get(name="fixed")
    page = admin_client.get(reverse("admin:workqueue_schedule_change", args=[s.pk])).content.decode()
    assert 'name="every"' not in page and 'name="queue"' not in page
    assert (
        admin_client.post(reverse("admin:workqueue_schedule_delete", args=[s.pk]), {"post": "yes"}).status_code == 403
    )
    admin_client.post(reverse("admin:workqueue_schedule_changelist"), {"action": "pause", "_selected_action": [s.pk]})
    assert not Schedule.objects.get(pk=s.pk).enabled
    assert Schedule.objects.filter(pk=s.pk, next_slot__gt=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)).exists()


def test_the_dashboard_counts_the_active_schedules_feeding_each_queue(admin_client):
    schedules.add({"name": "a", "queue": "test.noop", "every": 10})
    schedules.add({"name": "b", "queue": "test.noop", "every": 20})
    schedules.add({"name": "c", "queue": "test.other", "every": 20})
    schedules.pause(["c"])
    response = admin_client.get(reverse("admin:workqueue_dashboard"))
    queues = {q.name: q for q in response.context["snapshot"].queues}
    assert (queues["test.noop"].schedules, queues["test.other"].schedules) == (2, 0)
    assert response.context["snapshot"].totals.schedules == 2
    assert "2 schedules" in response.content.decode()
