"""What a schedule runs is checked as the thing itself checks it (issue 25, items 5 and 9).

An operation schedule's request is validated exactly as ``operations.start`` validates it, when
the schedule is saved — by the admin, the settings sync or the command — not at every run; a
task schedule resolves only registered ``django.tasks`` tasks and imports nothing an editor
types.
"""

from __future__ import annotations

import sys
from io import StringIO

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.urls import reverse

import operations
from workqueue import schedules
from workqueue.exceptions import InvalidSchedule
from workqueue.models import Schedule, WorkItem

pytestmark = pytest.mark.django_db

BAD_REQUEST = {"units": "not-a-number"}
FORM = {
    "name": "export",
    "cron": "",
    "every": "60",
    "timezone": "UTC",
    "misfire": "latest",
    "queue": "",
    "key_prefix": "",
    "metadata": "{}",
    "priority": "0",
    "kind": "demo.export",
    "request": '{"units": "not-a-number"}',
    "task": "",
    "args": "[]",
    "enabled": "on",
}


def start_refusal() -> str:
    with pytest.raises(operations.InvalidRequest) as caught:
        operations.start("demo.export", BAD_REQUEST)
    return str(caught.value)


def test_an_operation_schedule_with_a_request_start_refuses_is_refused_by_add_with_starts_reason():
    reason = start_refusal()
    with pytest.raises(InvalidSchedule) as caught:
        schedules.add({"name": "export", "every": 60, "kind": "demo.export", "request": BAD_REQUEST})
    assert reason in str(caught.value)
    assert not Schedule.objects.exists() and not WorkItem.objects.exists()


def test_the_admin_form_refuses_it_on_the_request_field(admin_client):
    reason = start_refusal()
    response = admin_client.post(reverse("admin:workqueue_schedule_add"), FORM)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "request" in errors and reason in " ".join(errors["request"]), errors
    assert not Schedule.objects.exists()


def test_the_command_refuses_it():
    with pytest.raises(CommandError, match="units"):
        call_command(
            "schedules", "add", "export", "--every", "60", "--operation", "demo.export",
            "--request", '{"units": "not-a-number"}', stdout=StringIO(),
        )  # fmt: skip
    assert not Schedule.objects.exists()


def test_the_settings_sync_and_the_system_check_refuse_it(settings):
    from workqueue.checks import check_schedules

    settings.WORKQUEUE = {
        **settings.WORKQUEUE,
        "SCHEDULES": {"export": {"every": 60, "operation": "demo.export", "request": BAD_REQUEST}},
    }
    with pytest.raises(InvalidSchedule, match="units"):
        schedules.sync_settings()
    assert not Schedule.objects.exists()
    found = [e for e in check_schedules(None) if isinstance(e, checks.Error)]
    assert found and "units" in found[0].msg and found[0].id == "workqueue.E002"


def test_a_good_request_still_passes_as_a_mapping_or_none_for_an_untyped_kind():
    schedules.add({"name": "export", "every": 60, "kind": "demo.export", "request": {"units": 2}})
    schedules.add({"name": "count", "every": 60, "kind": "test.ops.count", "request": None})
    assert Schedule.objects.count() == 2


# -- item 9: tasks ----------------------------------------------------------------------------


def test_a_task_path_that_is_not_a_registered_task_is_refused_and_never_imported():
    module = "tests.testapp.imported_on_sight"
    sys.modules.pop(module, None)
    for path in (f"{module}.not_a_task", "os.system", "builtins.print", "tests.testapp.tasks.nope"):
        with pytest.raises(InvalidSchedule, match=r"no django\.tasks task"):
            schedules.add({"name": "t", "every": 60, "task": path})
    assert module not in sys.modules
    assert not Schedule.objects.exists()


def test_a_registered_task_is_found_without_the_path_being_imported_again():
    schedules.add({"name": "t", "every": 60, "task": "tests.testapp.tasks.add", "args": [2, 3]})
    assert Schedule.objects.get(name="t").task == "tests.testapp.tasks.add"
