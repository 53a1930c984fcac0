"""The factory-boy factories shipped in workqueue.testing and operations.testing.

Each trait's row is checked the way the app would read it (a claim, a lease that lapsed, a
settled outcome), and the factories are imported only when asked for, with an error naming the
``testing`` extra when factory-boy is missing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from django.db.models.functions import Now

from operations.models import Operation
from operations.testing import OperationFactory
from project.demo.kinds import ExportRequest
from tests.conftest import ROOT
from workqueue.models import Schedule, WorkItem
from workqueue.testing import EnvironmentFactory, ScheduleFactory, WorkItemFactory
from workqueue.wire import keys

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_queued_item_is_the_enqueue_of_the_manager():
    item = WorkItemFactory(queue="test.noop", key="q", priority=5, metadata={"a": "1"})
    assert (item.state, item.priority, item.metadata, item.attempts) == ("queued", 5, {"a": "1"}, 0)
    assert WorkItemFactory(queue="test.noop").key != WorkItemFactory(queue="test.noop").key


def test_a_held_item_is_claimed_ahead_of_its_queues_better_items():
    better = WorkItemFactory(queue="test.noop", key="better", priority=100)
    held = WorkItemFactory(queue="test.noop", key="mine", held=True)
    assert held.state == "active" and held.attempts == 1 and held.lease_token is not None
    assert WorkItem.objects.filter(pk=held.pk, lease_expires_at__gt=Now()).exists()  # a live lease
    assert WorkItem.objects.get(pk=better.pk).state == "queued"
    # the next claim of the queue takes the better item, not the held one
    assert [i.key for i in WorkItem.objects.claim(["test.noop"], limit=5, worker_id="w").items] == ["better"]


def test_a_lapsed_item_is_reclaimed_by_the_next_claim():
    lapsed = WorkItemFactory(queue="test.noop", key="lapsed", lapsed=True)
    assert lapsed.state == "active"
    assert WorkItem.objects.filter(pk=lapsed.pk, lease_expires_at__lt=Now()).exists()
    [again] = WorkItem.objects.claim(["test.noop"], limit=5, worker_id="w").items
    assert (again.key, again.reclaimed, again.attempts) == ("lapsed", True, 2)


def test_stopped_items_carry_their_outcome():
    done = WorkItemFactory(queue="test.noop", succeeded=True)
    failed = WorkItemFactory(queue="test.noop", failed=True, error="boom")
    assert (done.state, done.outcome, done.lease_token) == ("stopped", "succeeded", None)
    assert (failed.state, failed.outcome) == ("stopped", "failed")
    assert "boom" in failed.last_error


def test_build_is_refused_since_it_would_skip_the_statements():
    with pytest.raises(TypeError, match="create"):
        WorkItemFactory.build()
    with pytest.raises(TypeError, match="create"):
        OperationFactory.build(kind="demo.export")


def test_schedules_and_environments():
    hourly = ScheduleFactory(queue="test.noop")
    paused = ScheduleFactory(queue="test.noop", paused=True, every=60)
    assert (hourly.every, hourly.enabled, hourly.target) == (3600, True, "item") and hourly.next_slot is not None
    assert set(Schedule.objects.paused()) == {paused}
    env = EnvironmentFactory()
    assert env.kind == "self_hosted" and keys.digest(env.key) == env.key_hash
    assert env.key_hash != EnvironmentFactory(kind="cloud").key_hash


def _item(op: Operation) -> WorkItem:
    return WorkItem.objects.filter(key=op.id).order_by("-id").first()


def test_operations_in_each_state_agree_with_their_work_items():
    request = ExportRequest(units=3)
    pending = OperationFactory(kind="demo.export", request=request)
    assert pending.state == "pending" and _item(pending).state == "queued"

    running = OperationFactory(kind="demo.export", request=request, running=True)
    item = _item(running)
    assert running.state == "running" and running.attempts == 1 and running.worker_id == "testing.factory"
    assert item.state == "active" and item.lease_token == running.lease_token

    halfway = OperationFactory(kind="demo.export", request=request, halfway=True)
    assert (halfway.units_total, halfway.units_done, halfway.message) == (10, 5, "halfway")
    counted = OperationFactory(kind="demo.export", request=request, count=4300)  # progress: running
    assert (counted.state, counted.count) == ("running", 4300)

    done = OperationFactory(kind="demo.export", request=request, succeeded=True, result_detail={"rows": 3})
    assert (done.state, done.result_detail, done.finished_at is not None) == ("succeeded", {"rows": 3}, True)
    assert _item(done).state == "stopped"
    failed = OperationFactory(kind="demo.export", request=request, failed=True, error_code="no_data")
    assert (failed.state, failed.error_code, failed.attempt_log[-1]["outcome"]) == ("failed", "no_data", "failed")
    cancelled = OperationFactory(kind="demo.export", request=request, cancelled=True)
    assert cancelled.state == "cancelled" and _item(cancelled).state == "stopped"


def test_an_operation_needs_its_kind():
    with pytest.raises(ValueError, match="kind="):
        OperationFactory()


def test_without_factory_boy_the_testing_modules_import_and_a_factory_names_the_extra():
    script = textwrap.dedent(
        """
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "factory" or name.startswith("factory."):
                    raise ImportError("No module named 'factory' (blocked)")

        sys.meta_path.insert(0, Block())
        import django
        django.setup()
        from operations import testing as ops_testing
        from workqueue import testing
        assert "factory" not in sys.modules
        for module, name in ((testing, "WorkItemFactory"), (ops_testing, "OperationFactory")):
            try:
                getattr(module, name)
            except ImportError as exc:
                print(exc)
            else:
                raise SystemExit(name + " imported without factory-boy")
        """
    )
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all("django-workqueue-operations[testing]" in line for line in lines), lines
