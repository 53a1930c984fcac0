"""``QUEUES: []``: Django's "any queue name", served by runworker as a queue family.

A backend with an empty QUEUES takes a task on any queue name (Django's contract), stores it
on the workqueue queue QUEUE_PREFIX + that name, and ``runworker`` finds such queues as their
items arrive (workqueue.worker.families): by the NOTIFY each enqueue sends, and by a look in
the table at start and once per poll interval (``queue_names_in_families``).
"""

from __future__ import annotations

import pytest
from django.core import checks
from django.test import override_settings

from operations.tasks.compat import TaskResultStatus
from tests.anyqueue_settings import ANYWHERE
from tests.anyqueue_settings import TASKS as ANY_TASKS
from tests.operations.tasks.conftest import wait_finished
from tests.testapp import tasks
from workqueue import handlers, store
from workqueue.models import WorkItem
from workqueue.worker.families import Families, split_patterns
from workqueue.worker.process import _served

db = pytest.mark.django_db(transaction=True)


@pytest.fixture
def anywhere():
    """This process with the ``anywhere`` backend (its workers get tests.anyqueue_settings)."""
    with override_settings(TASKS=ANY_TASKS):
        yield


@db
def test_a_task_on_never_configured_queues_runs_under_a_real_runworker(anywhere, start_ready_worker):
    before = tasks.add.using(backend="anywhere", queue_name="never-configured").enqueue(1, 2)
    assert WorkItem.objects.get(key=before.id).queue == "anywhere.never-configured"
    # A poll far longer than the wait below: the queue named after the worker started is found
    # by the NOTIFY its enqueue sent, not by the next look in the table.
    env = {"DJANGO_SETTINGS_MODULE": "tests.anyqueue_settings"}
    worker = start_ready_worker("any-queue", "--poll", "300", "--no-schedules", env=env)
    wait_finished(before, timeout=60)  # found by the look at start
    after = tasks.add.using(backend="anywhere", queue_name="named-later").enqueue(20, 22)
    wait_finished(after, timeout=60)
    assert worker.alive(), worker.output()[-3000:]
    for result, value in ((before, 3), (after, 42)):
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
        assert result.return_value == value
        assert result.worker_ids == ["any-queue"]
    assert "anywhere.*" in worker.output()  # the log line names the family it serves


@db
def test_the_family_look_finds_queues_with_ready_or_held_items_under_its_prefixes():
    manager = WorkItem.objects
    manager.enqueue("anywhere.ready", key="a")
    manager.enqueue("anywhere.held", key="b")
    manager.enqueue("anywhere.done", key="c")
    manager.enqueue("elsewhere.ready", key="d")
    [held] = manager.claim(["anywhere.held"], limit=1, worker_id="t").items
    [done] = manager.claim(["anywhere.done"], limit=1, worker_id="t").items
    manager.complete(done)
    found = [name for (name,) in store.queue_names_in_families(prefixes=["anywhere."])]
    assert found == ["anywhere.held", "anywhere.ready"]
    both = [name for (name,) in store.queue_names_in_families(prefixes=["anywhere.", "elsewhere."])]
    assert both == ["anywhere.held", "anywhere.ready", "elsewhere.ready"]
    assert store.queue_names_in_families(prefixes=["nowhere."]) == []
    assert held.queue == "anywhere.held"


@db
def test_families_hand_out_each_name_once_heard_or_found():
    WorkItem.objects.enqueue("anywhere.found", key="a")
    families = Families(["anywhere."], using="default", every=3600)
    families.heard("anywhere.heard")
    families.heard("elsewhere.ignored")  # not under its prefix
    assert families.new_names(set()) == ["anywhere.found", "anywhere.heard"]
    assert families.new_names({"anywhere.found"}) == []  # the next look is an hour away
    families.heard("anywhere.found")
    assert families.new_names({"anywhere.found", "anywhere.heard"}) == []  # served already


def test_queue_patterns_and_the_served_set():
    assert split_patterns(["a", "tasks.*", "b"]) == (["a", "b"], ["tasks."])
    with override_settings(TASKS=ANY_TASKS):
        handlers.register_family("anywhere.", handlers.get("tasks.default").fn, renews_lease=True)
        try:
            queues, prefixes = _served([])
            assert "anywhere." in prefixes and "tasks.default" in queues
            assert handlers.get("anywhere.x").fn is handlers.get("tasks.default").fn
            assert _served(["anywhere.sub.*"]) == ([], ["anywhere.sub."])
            with pytest.raises(ValueError, match=r"nowhere\.\*"):
                _served(["nowhere.*"])
        finally:
            handlers.unregister_family("anywhere.")


def test_empty_queues_pass_the_checks_unless_the_prefix_is_empty():
    with override_settings(TASKS={"default": {**ANYWHERE}}):
        assert [m for m in checks.run_checks() if m.id.startswith("operations.E10")] == []
    no_prefix = {**ANYWHERE, "OPTIONS": {"QUEUE_PREFIX": ""}}
    with override_settings(TASKS={"default": no_prefix}):
        [message] = [m for m in checks.run_checks() if m.id == "operations.E103"]
        assert "every queue of the site" in message.msg
