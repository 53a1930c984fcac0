"""Schedules admin: the list says what runs and when, actions pause/resume/run-now, the form refuses bad input."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse

from workqueue import schedules
from workqueue.models import Schedule, WorkItem
from workqueue.templatetags.workqueue_admin import DASH

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


def test_the_form_reports_a_field_error_alone_and_writes_nothing(admin_client):
    response = admin_client.post(reverse("admin:workqueue_schedule_add"), {**FORM, "priority": "high"})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["priority"], errors
    assert not Schedule.objects.exists()


def test_the_form_puts_a_problem_without_a_field_on_the_whole_form(admin_client):
    response = admin_client.post(reverse("admin:workqueue_schedule_add"), {**FORM, "name": "bad name!"})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["__all__"], errors
    assert "bad schedule name 'bad name!'" in " ".join(errors.get("__all__", [])), errors
    assert not Schedule.objects.exists()


def test_the_changelist_columns_for_operations_tasks_paused_removed_and_reaped(admin_client, settings):
    schedules.add({"name": "ops", "every": 3600, "kind": "test.ops.count", "request": {"steps": 1}})
    schedules.add({"name": "tasks", "every": 86400, "task": "tests.testapp.tasks.add", "args": [1, 2]})
    schedules.add({"name": "reaped", "every": 60, "queue": "test.noop", "enabled": False})
    schedules.add({"name": "failing", "every": 60, "queue": "test.noop"})
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {"gone": {"every": 60, "queue": "test.noop"}}}
    schedules.sync_settings()
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {}}
    schedules.sync_settings()
    reaped_key = schedules.run_now("reaped").key
    WorkItem.objects.filter(key=reaped_key).delete()
    failing_key = schedules.run_now("failing").key
    Schedule.objects.filter(name="failing").update(last_error="RuntimeError: boom at slot")

    admin = _admin()
    rows = {s.name: s for s in admin.get_queryset(None)}
    assert admin.runs_display(rows["ops"]) == "operation test.ops.count"
    assert admin.runs_display(rows["tasks"]) == "task tests.testapp.tasks.add"
    assert admin.next_display(rows["reaped"]) == DASH and admin.next_display(rows["gone"]) == DASH
    shown = str(admin.next_display(rows["ops"]))
    assert shown.startswith('<time class="wq-countdown"') and "data-wait=" in shown and "in " in shown
    assert admin.last_display(rows["reaped"]) == f"{reaped_key} (reaped)"
    failing = str(admin.last_display(rows["failing"]))
    assert failing_key in failing and "RuntimeError: boom at slot" in failing
    assert "removed" in str(admin.status_display(rows["gone"]))
    assert "No longer in WORKQUEUE" in str(admin.status_display(rows["gone"]))
    assert "paused" in str(admin.status_display(rows["reaped"]))
    assert "enabled" in str(admin.status_display(rows["ops"]))

    page = admin_client.get(reverse("admin:workqueue_schedule_changelist")).content.decode()
    assert "operation test.ops.count" in page and "task tests.testapp.tasks.add" in page
    assert f"{reaped_key} (reaped)" in page and "boom at slot" in page


def test_the_run_now_action_reports_a_schedule_that_cannot_run_and_still_runs_the_others(admin_client):
    good = schedules.add({"name": "good", "every": 60, "queue": "test.noop"})
    bad = schedules.add({"name": "bad", "every": 60, "kind": "test.ops.count", "request": {"steps": 1}})
    Schedule.objects.filter(pk=bad.pk).update(kind="no.such.kind")
    response = admin_client.post(
        reverse("admin:workqueue_schedule_changelist"),
        {"action": "run_now", "_selected_action": [good.pk, bad.pk]},
        follow=True,
    )
    texts = [str(m) for m in response.context["messages"]]
    assert any(t.startswith("bad: ") and "no.such.kind" in t for t in texts), texts
    assert any(t.startswith("Enqueued good:manual:") for t in texts), texts
    assert WorkItem.objects.filter(key__startswith="good:manual:").count() == 1
    assert Schedule.objects.get(pk=bad.pk).fired == 0


def _admin():
    from django.contrib import admin

    return admin.site._registry[Schedule]
