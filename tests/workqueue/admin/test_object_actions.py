"""Actions on a row's own page: a work item's Retry now / Run now / Requeue now / Force stop, a
schedule's Run now / Pause / Resume. Each is a link to a confirmation page (GET changes
nothing), then a POST with its CSRF token; each needs the change permission (a viewer sees no
button, and a forged GET or POST is a 403); a state that does not admit it changes nothing."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import Permission
from django.db.models.functions import Now
from django.test import Client
from django.urls import reverse

from tests.workqueue.admin.conftest import make_item
from workqueue import schedules
from workqueue.models import Outcome, Schedule, State, WorkItem


def buttons(client, url_name, pk) -> dict[str, str]:
    page = client.get(reverse(url_name, args=[pk])).content.decode()
    found = re.findall(r'<li><a class="button" href="([^"]+)"[^>]*>([^<]+)</a></li>', page)
    return {label: href for href, label in found}


def do(url_name, pk, action):
    return reverse(url_name, args=[pk, action])


ITEM = "admin:workqueue_workitem_change"
ITEM_DO = "admin:workqueue_workitem_do"
SCHEDULE = "admin:workqueue_schedule_change"
SCHEDULE_DO = "admin:workqueue_schedule_do"


@pytest.fixture
def schedule_viewer(client, django_user_model):
    user = django_user_model.objects.create_user("sviewer", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_schedule", "view_workitem"]))
    client.force_login(user)
    return client


def test_each_state_offers_the_actions_it_admits(admin_client):
    failed = make_item("test.noop", "failed", State.STOPPED, outcome=Outcome.FAILED, last_error="boom")
    done = make_item("test.noop", "done", State.STOPPED)
    running = make_item("test.noop", "running", State.ACTIVE)
    later = make_item("test.noop", "later", run_after=Now() + dt.timedelta(hours=1))
    assert list(buttons(admin_client, ITEM, failed.pk)) == ["Retry now"]
    assert list(buttons(admin_client, ITEM, done.pk)) == []
    assert list(buttons(admin_client, ITEM, running.pk)) == ["Requeue now", "Force stop"]
    assert list(buttons(admin_client, ITEM, later.pk)) == ["Run now", "Requeue now", "Force stop"]


def test_retry_now_confirms_on_a_get_and_retries_on_the_post(admin_client):
    failed = make_item("test.noop", "failed", State.STOPPED, outcome=Outcome.FAILED, last_error="boom")
    url = buttons(admin_client, ITEM, failed.pk)["Retry now"]
    assert url == do(ITEM_DO, failed.pk, "retry_now")
    confirm = admin_client.get(url)
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert 'method="post"' in page and "csrfmiddlewaretoken" in page and "<script" not in page.split("</head>")[1]
    assert WorkItem.objects.get(pk=failed.pk).state == State.STOPPED  # the GET changed nothing
    response = admin_client.post(url, follow=True)
    assert response.redirect_chain[-1][0] == reverse(ITEM, args=[failed.pk])
    assert [str(m) for m in response.context["messages"]] == ["test.noop: retried failed."]
    item = WorkItem.objects.get(pk=failed.pk)
    assert (item.state, item.attempts) == (State.QUEUED, 0) and item.last_error.endswith("boom")


def test_the_post_needs_the_csrf_token(db):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_superuser("csrf", "c@example.com", "pw")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    held = make_item("test.noop", "held", State.ACTIVE)
    assert strict.post(do(ITEM_DO, held.pk, "force_stop")).status_code == 403
    assert WorkItem.objects.get(pk=held.pk).state == State.ACTIVE


def test_force_stop_and_run_now_from_the_page(admin_client):
    held = make_item("test.noop", "held", State.ACTIVE)
    admin_client.post(do(ITEM_DO, held.pk, "force_stop"))
    item = WorkItem.objects.get(pk=held.pk)
    assert (item.state, item.outcome) == (State.STOPPED, Outcome.CANCELLED)
    later = make_item("test.noop", "later", run_after=Now() + dt.timedelta(hours=1))
    admin_client.post(do(ITEM_DO, later.pk, "run_now"))
    assert WorkItem.objects.ready().filter(pk=later.pk).exists()


def test_an_action_the_state_does_not_admit_changes_nothing(admin_client):
    done = make_item("test.noop", "done", State.STOPPED)
    response = admin_client.post(do(ITEM_DO, done.pk, "retry_now"), follow=True)
    assert "not possible in its state" in str(next(iter(response.context["messages"])))
    assert WorkItem.objects.get(pk=done.pk).state == State.STOPPED
    assert admin_client.post(do(ITEM_DO, done.pk, "no_such_action")).status_code == 404


def test_a_viewer_sees_no_button_and_a_forged_request_is_403(viewer_client):
    failed = make_item("test.noop", "failed", State.STOPPED, outcome=Outcome.FAILED)
    assert buttons(viewer_client, ITEM, failed.pk) == {}
    assert viewer_client.get(do(ITEM_DO, failed.pk, "retry_now")).status_code == 403
    assert viewer_client.post(do(ITEM_DO, failed.pk, "retry_now")).status_code == 403
    assert WorkItem.objects.get(pk=failed.pk).state == State.STOPPED


def test_a_schedule_page_runs_pauses_and_resumes(admin_client):
    schedules.add({"name": "tenner", "queue": "test.noop", "every": 10})
    row = Schedule.objects.get(name="tenner")
    assert list(buttons(admin_client, SCHEDULE, row.pk)) == ["Run now", "Pause"]
    response = admin_client.post(do(SCHEDULE_DO, row.pk, "run_now"), follow=True)
    assert str(next(iter(response.context["messages"]))).startswith("tenner: enqueued tenner:manual:")
    assert WorkItem.objects.filter(queue="test.noop", key__startswith="tenner:manual:").count() == 1
    admin_client.post(do(SCHEDULE_DO, row.pk, "pause"))
    assert not Schedule.objects.get(pk=row.pk).enabled
    assert list(buttons(admin_client, SCHEDULE, row.pk)) == ["Run now", "Resume"]
    admin_client.post(do(SCHEDULE_DO, row.pk, "resume"))
    assert Schedule.objects.get(pk=row.pk).enabled


def test_a_schedule_viewer_sees_no_button_and_a_forged_post_is_403(schedule_viewer):
    schedules.add({"name": "tenner", "queue": "test.noop", "every": 10})
    row = Schedule.objects.get(name="tenner")
    assert buttons(schedule_viewer, SCHEDULE, row.pk) == {}
    assert schedule_viewer.post(do(SCHEDULE_DO, row.pk, "pause")).status_code == 403
    assert Schedule.objects.get(pk=row.pk).enabled
