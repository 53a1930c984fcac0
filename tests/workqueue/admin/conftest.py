"""Fixtures for the admin tests: users with and without permissions, and items in every state."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.contrib.auth.models import Permission
from django.db.models.functions import Now

import operations
from workqueue import controls, schedules
from workqueue.environments import create_api_key, create_environment
from workqueue.models import MaintenanceRun, Outcome, State, Worker, WorkItem


@pytest.fixture
def staff_client(client, django_user_model):
    """A logged-in staff user with no permissions at all."""
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(user)
    return client


@pytest.fixture
def viewer_client(client, django_user_model):
    """A logged-in staff user who may view work items (and environments), but change nothing."""
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="workqueue", codename__in=["view_workitem", "view_environment"]
        )
    )
    client.force_login(user)
    return client


def make_item(queue: str, key: str, state: str = State.QUEUED, **fields) -> WorkItem:
    """Enqueue through the manager, then move the row where a test needs it (ORM update)."""
    item, _ = WorkItem.objects.enqueue(queue, key)
    if state != State.QUEUED:
        fields.setdefault("lease_token", uuid.uuid4() if state != State.STOPPED else None)
        if state in (State.STARTING, State.ACTIVE, State.STOPPING):
            fields.setdefault("lease_expires_at", Now() + dt.timedelta(seconds=60))
            fields.setdefault("started_at", Now())
            fields.setdefault("attempts", 1)
        if state == State.STOPPED:
            fields.setdefault("outcome", "succeeded")
            fields.setdefault("stopped_at", Now())
    if state != State.QUEUED or fields:
        WorkItem.objects.filter(pk=item.id).update(state=state, **fields)
    return WorkItem.objects.get(pk=item.id)


@pytest.fixture
def one_of_each_state(db):
    """One work item in every State, on test.noop."""
    return {state: make_item("test.noop", f"state-{state}", state) for state in State.values}


@pytest.fixture
def every_kind_of_row(db):
    """Something for every action to act on: items queued, running, failed and scheduled; an
    environment with no items (deletable); an active API key; an enabled and a paused
    schedule; a pending and a finished operation; and a row in every other table the admin
    lists (an environment with an item, a worker, a sweep run, a paused queue's control)."""
    make_item("test.noop", "queued")
    make_item("test.noop", "running", State.ACTIVE)
    make_item("test.noop", "failed", State.STOPPED, outcome=Outcome.FAILED, last_error="boom")
    make_item("test.noop", "scheduled", run_after=Now() + dt.timedelta(hours=1))
    create_environment("spare", "self_hosted")
    create_api_key("ci")
    schedules.add({"name": "tenner", "queue": "test.noop", "every": 10})
    schedules.add({"name": "resting", "queue": "test.noop", "every": 60})
    schedules.pause(["resting"])
    operations.start("test.ops.count", {}, owner="7")
    operations.cancel(operations.start("test.ops.count", {}, owner="7").id)
    edge, _key = create_environment("edge", "self_hosted")
    WorkItem.objects.enqueue("test.wire", "on-the-wire", environment=edge)
    Worker.objects.create(id="w-1", host="h", pid=1, queues=["test.noop"])
    MaintenanceRun.objects.create(name="reap", started_at=Now(), finished_at=Now(), counts={"deleted": 0})
    controls.pause("test.noop", by="tests")
