"""Flow control in the admin: the dashboard's controls (shown, changed, logged), paused items on
the work-item list, and the capped bulk actions "retry now" and "run now"."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db.models.functions import Now
from django.urls import reverse

from tests.workqueue.admin.conftest import make_item
from workqueue import controls
from workqueue.admin import items as wq_admin
from workqueue.models import QueueControl, State, WorkItem

DASHBOARD = reverse("admin:workqueue_dashboard")
CONTROLS = reverse("admin:workqueue_dashboard_controls")
CHANGELIST = reverse("admin:workqueue_workitem_changelist")

pytestmark = pytest.mark.django_db


def flow_section(client) -> str:
    return flow_section_of(client.get(DASHBOARD))


def flow_section_of(response) -> str:
    page = response.content.decode()
    return page[page.index('id="flow-control"') :]


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_the_dashboard_shows_paused_and_each_limit_with_its_source(admin_client):
    make_item("test.grouped", "waiting")
    controls.write("test.grouped", paused=True, limits={"rate": "50/s"}, by="ops")
    section = flow_section(admin_client)
    row = section[section.index('<th scope="row">test.grouped</th>') :].split("</tr>")[0]
    assert "paused" in row
    assert "2 <span" in row and ">settings<" in row  # max_running_per_group from the settings
    assert "50/s <span" in row and ">override<" in row
    assert 'value="resume"' in row and 'type="text"' not in row  # no inputs until Edit
    assert "by ops, " in row and "/history/" in row
    editing = flow_section_of(admin_client.get(DASHBOARD, {"edit": "test.grouped"}))
    row = editing[editing.index('<th scope="row">test.grouped</th>') :].split("</tr>")[0]
    assert 'name="rate" value="50/s"' in row and 'form="wq-flow-edit"' in row and 'value="save"' in row
    # Only that row has inputs, and the table is left out of the live updates meanwhile.
    assert editing.count('form="wq-flow-edit"') == 4
    assert (
        "#flow-control"
        not in admin_client.get(DASHBOARD, {"edit": "test.grouped"})
        .content.decode()
        .split('id="wq-live"')[1]
        .split(">")[0]
    )
    page = admin_client.get(DASHBOARD).content.decode()
    queues_table = page[: page.index('id="flow-control"')]
    assert "paused</span>" in queues_table.split("test.grouped", 1)[1].split("</th>")[0]


def test_a_viewer_sees_the_limits_but_no_form_and_cannot_post(viewer_client):
    make_item("test.grouped", "waiting")
    section = flow_section(viewer_client)
    assert "test.grouped" in section and "<form" not in section
    assert viewer_client.post(CONTROLS, {"queue": "test.grouped", "action": "pause"}).status_code == 403
    assert not QueueControl.objects.exists()


def test_an_operator_pauses_resumes_and_edits_overrides_each_change_logged_with_who(client, django_user_model):
    user = django_user_model.objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="workqueue", codename__in=["view_workitem", "change_workitem"]
        )
    )
    client.force_login(user)
    response = client.post(CONTROLS, {"queue": "test.flow", "action": "pause"}, follow=True)
    assert messages_of(response) == ["test.flow: paused the queue."]
    # Shown as written: the admin's own template would capitalise the queue's name.
    assert '<li class="success">test.flow: paused the queue.</li>' in response.content.decode()
    assert QueueControl.objects.get(pk="test.flow").paused

    response = client.post(
        CONTROLS,
        {"queue": "test.flow", "action": "save", "max_running": "3", "rate_per_group": "10/m"},
        follow=True,
    )
    assert "max_running=3 (override)" in messages_of(response)[0]
    row = QueueControl.objects.get(pk="test.flow")
    assert (row.max_running, row.rate_per_group_count, row.rate_per_group_period, row.updated_by) == (
        3,
        10,
        60.0,
        "operator",
    )
    # An emptied field clears its override.
    client.post(CONTROLS, {"queue": "test.flow", "action": "save", "max_running": "", "rate_per_group": "10/m"})
    assert QueueControl.objects.get(pk="test.flow").max_running is None
    client.post(CONTROLS, {"queue": "test.flow", "action": "resume"})
    assert not QueueControl.objects.get(pk="test.flow").paused

    entries = LogEntry.objects.filter(object_id="test.flow").order_by("id")
    assert [e.user.username for e in entries] == ["operator"] * 4
    assert entries[0].change_message == "Paused the queue." and entries[3].change_message == "Resumed the queue."
    assert "max_running=none (settings)" in entries[2].change_message
    history = client.get(reverse("admin:workqueue_queuecontrol_history", args=["test.flow"]))
    assert history.status_code == 200 and "Paused the queue." in history.content.decode()


def test_a_bad_value_in_the_form_is_refused_and_nothing_is_written(admin_client):
    controls.write("test.flow", limits={"max_running": 4}, by="setup")
    before = list(QueueControl.objects.values_list())
    for bad in ({"max_running": "-1"}, {"rate": "0/s"}, {"rate": "5/fortnight"}, {"max_running_per_group": "x"}):
        response = admin_client.post(CONTROLS, {"queue": "test.flow", "action": "save", **bad}, follow=True)
        (message,) = messages_of(response)
        assert "Nothing was changed" in message, message
        # Back on the row being edited, to fix the value.
        assert response.redirect_chain[-1][0] == f"{DASHBOARD}?edit=test.flow#flow-control"
    response = admin_client.post(CONTROLS, {"queue": "no.such.queue", "action": "pause"}, follow=True)
    assert "unknown queue" in messages_of(response)[0]
    assert list(QueueControl.objects.values_list()) == before
    assert not LogEntry.objects.exists()


def test_the_work_item_list_shows_a_paused_queues_waiting_items_as_paused(admin_client):
    make_item("test.flow", "waiting")
    make_item("test.flow", "running", State.ACTIVE)
    make_item("test.other", "elsewhere")
    controls.pause("test.flow")
    page = admin_client.get(CHANGELIST).content.decode()
    rows = {key: page.split(key, 1)[1].split("</tr>")[0] for key in ("waiting", "running", "elsewhere")}
    assert ">paused<" in rows["waiting"]
    assert ">paused<" not in rows["running"] and ">paused<" not in rows["elsewhere"]


def bulk(client, action: str, **filters):
    response = client.post(
        CHANGELIST + "?" + "&".join(f"{k}={v}" for k, v in filters.items()),
        {"action": action, "select_across": 1, "index": 0, "_selected_action": ["0"]},
        follow=True,
    )
    assert response.status_code == 200
    return messages_of(response)


def test_bulk_retry_now_over_a_filtered_set_larger_than_the_cap_changes_exactly_the_cap_and_says_so(admin_client):
    cap = wq_admin.BULK_ACTION_CAP
    assert cap == 5_000
    WorkItem.objects.enqueue_many([("test.fail", f"f{i}") for i in range(cap + 50)])
    WorkItem.objects.enqueue_many([("test.other", f"o{i}") for i in range(10)])
    WorkItem.objects.update(state=State.STOPPED, outcome="failed", stopped_at=Now(), attempts=3, last_error="boom")
    (message,) = bulk(admin_client, "retry_now", queue="test.fail", situation="failed")
    assert message.startswith(f"Retried {cap:,} failed items.")
    assert f"at most {cap:,}" in message and "run the action again" in message
    retried = WorkItem.objects.filter(queue="test.fail", state=State.QUEUED)
    assert retried.count() == cap
    assert set(retried.values_list("attempts", flat=True)) == {0}
    assert retried.filter(outcome__isnull=True, run_after__lte=Now()).count() == cap
    assert retried.first().last_error.endswith("previous error was:\nboom")
    assert WorkItem.objects.filter(queue="test.fail").failed().count() == 50  # the newest, left for a rerun
    assert WorkItem.objects.filter(queue="test.other").failed().count() == 10  # outside the filter
    # The rest on a second run, which says nothing of a cap.
    (again,) = bulk(admin_client, "retry_now", queue="test.fail", situation="failed")
    assert again == "Retried 50 failed items."


def test_retry_now_leaves_a_key_with_a_live_item_alone_and_run_now_makes_scheduled_items_due(admin_client):
    old = make_item("test.fail", "k", State.STOPPED, outcome="failed")
    make_item("test.fail", "k")  # a newer live item for the same key
    later = make_item("test.noop", "later", run_after=Now() + dt.timedelta(hours=2))
    (message,) = bulk(admin_client, "retry_now", queue="test.fail")
    assert message == "Retried 0 failed items."
    assert WorkItem.objects.get(pk=old.pk).state == State.STOPPED
    (message,) = bulk(admin_client, "run_now", queue="test.noop")
    assert message == "Made due 1 scheduled item."
    assert WorkItem.objects.filter(pk=later.pk, run_after__lte=Now()).exists()
