"""One way to say things on every admin page: one timestamp format (seconds and zone), one
empty marker, False as nothing, plurals, names as written, units, read-only where it is."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from operations.admin import progress_bar
from operations.models import Operation, State
from operations.testing import OperationFactory
from tests.workqueue.admin.conftest import make_item
from workqueue import schedules
from workqueue.models import Schedule
from workqueue.models import State as ItemState

STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]{2,5}")


def test_a_work_items_page_writes_instants_one_way_and_false_as_nothing(admin_client):
    item = make_item("test.noop", "stamped", ItemState.ACTIVE)
    html = admin_client.get(reverse("admin:workqueue_workitem_change", args=[item.pk])).content.decode()
    assert STAMP.search(html), "no timestamp with seconds and zone"
    assert " a.m." not in html and " p.m." not in html  # Django's own format is gone
    assert "icon-no.svg" not in html and "icon-yes.svg" not in html  # reclaimed, wire, handed out
    assert '<div class="readonly">-</div>' not in html  # one empty marker: —


def test_the_flow_control_list_shows_a_paused_queue_as_yes_and_its_time_with_seconds(admin_client):
    from workqueue import controls

    controls.pause("test.noop", by="tests")
    html = admin_client.get(reverse("admin:workqueue_queuecontrol_changelist")).content.decode()
    assert "icon-yes.svg" not in html and ">yes<" in html
    assert STAMP.search(html)


def test_a_failed_operations_progress_is_not_done(db):
    failed = OperationFactory(kind="test.ops.count", state=State.FAILED)
    succeeded = OperationFactory(kind="test.ops.count", state=State.SUCCEEDED)
    bare = {"units_total": None, "count": 0, "count_label": ""}  # no progress to describe
    Operation.objects.filter(pk__in=[failed.pk, succeeded.pk]).update(**bare)
    failed, succeeded = Operation.objects.get(pk=failed.pk), Operation.objects.get(pk=succeeded.pk)
    assert failed.progress.describe() == ""
    assert "done" not in progress_bar(failed)
    assert "done" in progress_bar(succeeded)


@pytest.mark.django_db
def test_a_cancelled_attempt_reads_cancelled_and_operations_offer_no_delete(admin_client):
    op = OperationFactory(kind="test.ops.count", state=State.CANCELLED)
    log = [{"number": 1, "outcome": "failed", "error_code": "cancelled", "started_at": "2026-01-02T03:04:05+00:00"}]
    Operation.objects.filter(pk=op.pk).update(attempt_log=log)
    html = admin_client.get(reverse("admin:operations_operation_change", args=[op.pk])).content.decode()
    assert "<td>cancelled</td>" in html and "<td>failed</td>" not in html
    assert "2026-01-02 03:04:05 UTC" in html
    assert "deletelink" not in html
    listing = admin_client.get(reverse("admin:operations_operation_changelist")).content.decode()
    assert "delete_selected" not in listing
    assert (
        admin_client.post(reverse("admin:operations_operation_delete", args=[op.pk]), {"post": "yes"}).status_code
        == 403
    )
    assert Operation.objects.filter(pk=op.pk).exists()


def test_a_settings_schedule_opens_as_a_view_with_its_interval_in_seconds(admin_client, settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {"fixed": {"every": 10, "queue": "test.noop"}}}
    schedules.sync_settings()
    s = Schedule.objects.get(name="fixed")
    html = admin_client.get(reverse("admin:workqueue_schedule_change", args=[s.pk])).content.decode()
    assert "Change schedule" not in html and "View schedule" in html
    assert 'name="_save"' not in html and 'name="_continue"' not in html and 'name="_addanother"' not in html
    assert re.search(r'<div class="readonly">10 s</div>', html)
    assert "10.0" not in html


def test_an_admin_schedules_form_shows_its_interval_with_a_unit(admin_client):
    schedules.add({"name": "tenner", "queue": "test.noop", "every": 10})
    s = Schedule.objects.get(name="tenner")
    html = admin_client.get(reverse("admin:workqueue_schedule_change", args=[s.pk])).content.decode()
    assert 'name="every" value="10s"' in html


def test_the_schedule_actions_say_their_plurals(admin_client):
    schedules.add({"name": "one", "queue": "test.noop", "every": 10})
    schedules.add({"name": "two", "queue": "test.noop", "every": 10})
    ids = list(Schedule.objects.values_list("pk", flat=True))
    r = admin_client.post(
        reverse("admin:workqueue_schedule_changelist"), {"action": "pause", "_selected_action": ids}, follow=True
    )
    assert [str(m) for m in r.context["messages"]] == ["Paused 2 schedules."]
    r = admin_client.post(
        reverse("admin:workqueue_schedule_changelist"), {"action": "resume", "_selected_action": ids[:1]}, follow=True
    )
    assert [str(m) for m in r.context["messages"]] == ["Resumed 1 schedule."]
