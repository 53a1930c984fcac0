"""Fixtures for the admin tests: users with and without permissions, and items in every state."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.contrib.auth.models import Permission
from django.db.models.functions import Now

from workqueue.models import State, WorkItem


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
