"""`manage.py queues`: list, pause, resume, set and clear runtime queue controls."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from tests.workqueue.test_commands import run_all
from workqueue import controls
from workqueue.exceptions import InvalidInput
from workqueue.models import QueueControl, WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def queues(*args: str) -> str:
    out = StringIO()
    call_command("queues", *args, stdout=out)
    return out.getvalue()


def snapshot() -> list[tuple]:
    return list(QueueControl.objects.order_by("queue").values_list())


def test_bad_values_are_refused_with_a_one_line_error_exit_2_and_change_nothing(spawn_command):
    controls.write("test.flow", limits={"max_running": 4, "rate": "10/s"}, by="setup")
    before = snapshot()
    bad = [
        (["queues", "set", "test.flow", "--rate", "0/s"], "--rate must be a count per period"),
        (["queues", "set", "test.flow", "--rate", "5/fortnight"], "'5/fortnight'"),
        (["queues", "set", "test.flow", "--rate-per-group=-5/s"], "--rate-per-group must be"),
        (["queues", "set", "test.flow", "--max-running", "-1"], "--max-running must be an integer >= 1"),
        (["queues", "set", "test.flow", "--max-running-per-group", "0"], "--max-running-per-group must be"),
        (["queues", "set", "test.flow", "--max-running", "2", "--rate", "9/y"], "--rate must be"),
        (["queues", "set", "no.such.queue", "--max-running", "3"], "unknown queue 'no.such.queue'"),
        (["queues", "pause", "no.such.queue"], "unknown queue 'no.such.queue'"),
        (["queues", "set", "test.flow", "--clear", "priority"], "--clear 'priority'"),
        (["queues", "set", "test.flow"], "nothing to change"),
    ]
    results = run_all(spawn_command, *[args for args, _ in bad])
    for (args, message), result in zip(bad, results, strict=True):
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, result.stderr)
        assert result.stdout == ""
    assert snapshot() == before
    assert not QueueControl.objects.filter(queue="no.such.queue").exists()


def test_the_verbs_refuse_bad_values_in_process_too_and_write_nothing():
    for call in (
        lambda: controls.write("test.flow", limits={"rate": "0/s"}),
        lambda: controls.write("test.flow", limits={"max_running": -2}),
        lambda: controls.write("test.flow", limits={"max_running": True}),
        lambda: controls.write("test.flow", limits={"rate": "5/fortnight"}),
        lambda: controls.write("test.flow", limits={"max_running": 2}, clear=["max_running"]),
        lambda: controls.pause("nope"),
    ):
        with pytest.raises(InvalidInput):
            call()
    assert not QueueControl.objects.exists()


def test_pause_set_clear_and_resume_show_in_list_with_their_source():
    WorkItem.objects.enqueue_many([("test.grouped", f"k{i}") for i in range(3)])
    assert queues("pause", "test.grouped").strip() == "test.grouped: paused, max_running_per_group=2"
    out = queues("set", "test.grouped", "--max-running", "7", "--rate-per-group", "600/m")
    assert out.strip() == (
        "test.grouped: paused, max_running=7 (override), max_running_per_group=2, rate_per_group=600/m (override)"
    )
    row = next(r for r in json.loads(queues("list", "--json"))["queues"] if r["name"] == "test.grouped")
    assert row == {
        "name": "test.grouped",
        "paused": True,
        "depth": 3,
        "max_running": {"value": 7, "source": "override"},
        "max_running_per_group": {"value": 2, "source": "settings"},
        "rate": {"value": None, "source": "settings"},
        "rate_per_group": {"value": "600/m", "source": "override"},
    }
    stored = QueueControl.objects.get(queue="test.grouped")
    assert (stored.rate_per_group_count, stored.rate_per_group_period, stored.updated_by) == (
        10 * 60,
        60.0,
        "manage.py queues",
    )
    # An override of the setting's per-group cap, then cleared back to the setting.
    queues("set", "test.grouped", "--max-running-per-group", "1")
    assert "max_running_per_group=1 (override)" in queues("list")
    queues("set", "test.grouped", "--clear", "max-running-per-group", "--clear", "rate_per_group")
    assert (
        queues("resume", "test.grouped").strip()
        == "test.grouped: running, max_running=7 (override), max_running_per_group=2"
    )
    stored.refresh_from_db()
    assert (stored.paused, stored.max_running, stored.max_running_per_group, stored.rate_per_group_count) == (
        False,
        7,
        None,
        None,
    )
    assert "test.grouped" in queues("list")


def test_enqueue_group_is_stored_and_bad_groups_are_refused():
    call_command("enqueue", "test.grouped", "k1", "--group", "tenant-42", stdout=StringIO())
    WorkItem.objects.enqueue_many([{"queue": "test.grouped", "key": "k2"}], group="tenant-7")
    WorkItem.objects.enqueue("test.grouped", "k3", group="tenant-9")
    assert dict(WorkItem.objects.values_list("key", "group_key")) == {
        "k1": "tenant-42",
        "k2": "tenant-7",
        "k3": "tenant-9",
    }
    for bad in ("", "x" * 201, 42):
        with pytest.raises(InvalidInput):
            WorkItem.objects.enqueue("test.grouped", "bad", group=bad)
    assert not WorkItem.objects.filter(key="bad").exists()
