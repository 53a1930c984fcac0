"""A workflow's admin page: its steps as a timeline, what it waits for, its signals, and
"Fork from this step" for users with the change permission only (operations.admin_workflows)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

import operations
from operations.models import Operation
from tests.operations.conftest import run_next, run_to_end

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def viewer(django_user_model) -> Client:
    """Staff who may view operations and change nothing."""
    user = django_user_model.objects.create_user("op-viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="operations", codename="view_operation"))
    client = Client()
    client.force_login(user)
    return client


def page(client, op_id: str) -> str:
    response = client.get(reverse("admin:operations_operation_change", args=[op_id]))
    assert response.status_code == 200
    return response.content.decode()


def waiting_onboard() -> Operation:
    op = operations.start("test.wf.onboard", {"sleep": 0, "timeout": 600})
    for _ in range(5):
        run_next()
    return op


def test_the_page_shows_the_steps_the_wait_and_the_signals(admin_client):
    op = waiting_onboard()
    operations.signal(op.id, "other", {"note": "not what it waits for"})
    html = page(admin_client, op.id)
    assert 'id="op-steps"' in html
    assert "<code>create</code>" in html and "succeeded" in html
    assert "<small>sleep</small>" in html
    assert 'id="op-waiting"' in html and "the signal <code>approved</code>" in html
    assert 'id="op-signals"' in html and "<code>other</code>" in html and "not yet" in html
    assert html.count("Fork from this step") == 3  # create, sleep, the wait


def test_a_view_only_user_sees_the_timeline_but_cannot_fork(viewer):
    op = waiting_onboard()
    html = page(viewer, op.id)
    assert 'id="op-steps"' in html and "Fork from this step" not in html
    url = reverse("admin:operations_operation_do", args=[op.id, "fork"])
    assert viewer.get(url, {"from_step": 1}).status_code == 403
    assert viewer.post(url, {"from_step": 1}).status_code == 403
    assert not Operation.objects.filter(forked_from_id=op.id).exists()


def test_fork_from_a_step_confirms_then_starts_the_new_run(admin_client):
    op = operations.start("test.wf.four", {})
    run_to_end(op.id)
    url = reverse("admin:operations_operation_do", args=[op.id, "fork"])
    confirm = admin_client.get(url, {"from_step": 2})
    assert confirm.status_code == 200 and b"every step from 2 on runs again" in confirm.content
    assert b"0: step0, 1: step1" in confirm.content and b'name="from_step" value="2"' in confirm.content
    assert not Operation.objects.filter(forked_from_id=op.id).exists(), "a GET changes nothing"
    response = admin_client.post(url, {"from_step": 2})
    [fork] = Operation.objects.filter(forked_from_id=op.id)
    assert response.status_code == 302 and response["Location"].endswith(f"/{fork.id}/change/")
    assert [s.position for s in operations.steps(fork.id)] == [0, 1]
    assert "Forked from <a" in page(admin_client, fork.id)


def test_the_list_filters_workflows_and_waiting_ones(admin_client):
    waiting = waiting_onboard()
    done = operations.start("test.wf.four", {})
    run_to_end(done.id)
    plain = operations.start("test.ops.count", {"steps": 1})
    url = reverse("admin:operations_operation_changelist")
    workflows = admin_client.get(url, {"workflow": "all"}).content.decode()
    assert waiting.id in workflows and done.id in workflows and plain.id not in workflows
    now_waiting = admin_client.get(url, {"workflow": "waiting"}).content.decode()
    assert waiting.id in now_waiting and done.id not in now_waiting


def test_an_operations_page_draws_what_it_waits_on_and_what_waits_on_it(admin_client, viewer):
    a = operations.start("test.ops.count", {"steps": 1})
    b = operations.start("test.ops.count", {"steps": 1}, after=[a.id])
    c = operations.start("test.ops.count", {"steps": 1}, after=[a.id])
    d = operations.start("test.ops.count", {"steps": 1}, after=[b.id, c.id])
    html = page(admin_client, b.id)
    assert 'id="op-dependencies"' in html and "<svg" in html
    links = html[html.index('id="op-dependency-links"') :]
    assert f'after <a href="/admin/operations/operation/{a.id}/change/">{a.id}</a>' in links
    assert f'before <a href="/admin/operations/operation/{d.id}/change/">{d.id}</a>' in links
    assert "(1 not yet succeeded)" in html
    d_page = page(viewer, d.id)  # view-only staff see it too
    assert d_page.count("after <a") == 2 and "before <a" not in d_page
    assert 'id="op-dependencies"' not in page(admin_client, operations.start("test.ops.count", {}).id)
