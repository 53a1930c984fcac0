"""Batches and chains in the HTTP API and the admin: parent links, child counts, paged children."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Q
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import operations
from operations.models import Operation
from tests.operations.conftest import op_row, run_next

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def admin_client():
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("boss", "boss@example.com", "pw"))
    return client


def test_the_api_shows_parent_on_a_child_and_child_counts_on_a_parent(client, user):
    b = operations.batch(
        [("test.ops.batch.child", {"n": 1}), ("test.ops.batch.doomed", {}), ("test.ops.batch.child", {"n": 2})],
        then=("test.ops.batch.then", {}),
        owner=str(user.pk),
    )
    body = client.get(f"/api/operations/{b.id}").json()
    assert body["kind"] == "operations.batch" and body["state"] == "running" and body["parent"] is None
    assert body["children"] == {"total": 3, "open": 3, "succeeded": 0, "failed": 0, "cancelled": 0}
    assert body["progress"]["unitsTotal"] == 3 and body["progress"]["unitsDone"] == 0
    run_next()
    run_next()
    body = client.get(f"/api/operations/{b.id}").json()
    assert body["children"] == {"total": 3, "open": 1, "succeeded": 1, "failed": 1, "cancelled": 0}
    assert body["progress"]["unitsDone"] == 2

    listed = client.get(f"/api/operations/{b.id}/children", {"page_size": 2}).json()
    assert [c["position"] for c in listed["children"]] == [0, 1] and listed["nextAfter"] == 1
    assert all(c["parent"] == b.id and c["children"] is None for c in listed["children"])
    rest = client.get(f"/api/operations/{b.id}/children", {"after": 1}).json()
    assert [c["position"] for c in rest["children"]] == [2] and rest["nextAfter"] is None
    child = client.get(f"/api/operations/{listed['children'][0]['id']}").json()
    assert child["parent"] == b.id and child["follows"] is None

    run_next()
    then = Operation.objects.get(follows_id=b.id)
    assert client.get(f"/api/operations/{then.id}").json()["follows"] == b.id
    done = client.get(f"/api/operations/{b.id}").json()
    assert done["state"] == "failed" and done["error"]["code"] == "children_failed"


def test_another_owners_batch_and_children_are_404(client, user):
    b = operations.batch("test.ops.batch.child", [{"n": 1}], owner="someone-else")
    child = Operation.objects.get(parent_id=b.id)
    for path in (f"/api/operations/{b.id}", f"/api/operations/{b.id}/children", f"/api/operations/{child.id}"):
        assert client.get(path).status_code == 404
    assert client.post(f"/api/operations/{b.id}:cancel").status_code == 404
    assert op_row(b.id).state == "running" and not op_row(child.id).cancel_requested


def test_cancelling_a_batch_over_the_api_cancels_its_pending_children(client, user):
    b = operations.batch("test.ops.batch.child", [{"n": 1}] * 3, owner=str(user.pk))
    body = client.post(f"/api/operations/{b.id}/cancel").json()
    assert body["state"] == "cancelled" and body["children"]["cancelled"] == 3


def test_the_batch_page_shows_progress_and_a_page_of_children_each_linking_to_the_parent(admin_client):
    b = operations.batch("test.ops.batch.child", [{"n": i} for i in range(150)], then=("test.ops.batch.then", {}))
    for _ in range(3):
        run_next()
    url = reverse("admin:operations_operation_change", args=[b.id])
    html = admin_client.get(url).content.decode()
    assert "3 of 150" in html  # the aggregated progress bar
    assert "Children (150: 147 open, 3 succeeded, 0 failed, 0 cancelled)" in html
    assert "test.ops.batch.then" in html and "not started" in html
    assert html.count('href="/admin/operations/operation/op_') >= 100
    assert "?after=99" in html
    second = admin_client.get(url, {"after": 99}).content.decode()
    kids = list(Operation.objects.children_of(b.id))
    assert kids[100].id in second and kids[99].id not in second.split("op-children")[1]
    child_page = admin_client.get(reverse("admin:operations_operation_change", args=[kids[0].id])).content.decode()
    assert f'child #1 of <a href="/admin/operations/operation/{b.id}/change/">{b.id}</a>' in child_page
    # The list (fitted to 1280 px) shows a batch's aggregated progress; the counts are on its page.
    listing = admin_client.get(reverse("admin:operations_operation_changelist"), {"kind": "operations.batch"})
    assert b.id[:12] in listing.content.decode() and "3 of 150" in listing.content.decode()


def _page_queries(admin_client, op_id: str) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        response = admin_client.get(reverse("admin:operations_operation_change", args=[op_id]))
    assert response.status_code == 200
    return [q["sql"] for q in ctx.captured_queries]


@pytest.mark.slow
def test_a_batch_of_100000_children_renders_with_the_same_bounded_queries_as_a_small_one(admin_client):
    small = operations.batch("test.ops.batch.child", [{"n": 1}] * 3)
    big = operations.batch("test.ops.batch.child", [{"n": 1}] * 100_000)
    assert op_row(big.id).children_total == 100_000
    with connection.cursor() as cur:
        cur.execute(f"ANALYZE {Operation._meta.db_table}")
    _page_queries(admin_client, small.id)  # warm the per-process caches (content types...)
    small_queries = _page_queries(admin_client, small.id)
    big_queries = _page_queries(admin_client, big.id)
    # The same statements, however many children: no COUNT over them, every read LIMITed.
    assert len(big_queries) == len(small_queries)
    assert not [q for q in big_queries if "COUNT(" in q.upper() and "parent_id" in q]
    children_reads = [q for q in big_queries if '"parent_id" =' in q]
    assert children_reads and all("LIMIT" in q for q in children_reads)
    # And the children page is one index range scan on the children index.
    page, _ = operations.children(big.id, after=50_000, limit=100)
    assert [c.position for c in page] == list(range(50_001, 50_101))
    with connection.cursor() as cur:
        cur.execute(
            f"EXPLAIN SELECT id FROM {Operation._meta.db_table} WHERE parent_id = %s AND position > %s "
            "ORDER BY position LIMIT 101",
            [big.id, 50_000],
        )
        plan = "\n".join(row[0] for row in cur.fetchall())
    assert "operations_children_idx" in plan, plan


def test_the_admin_offers_no_delete_and_reap_deletes_a_finished_batch_with_its_children(admin_client):
    """Only reap deletes operations (past OPERATIONS["RETENTION"]): a batch goes with its children."""
    b = operations.batch("test.ops.batch.child", [{"n": 1}] * 2)
    operations.cancel(b.id)
    other = operations.start("test.ops.count", {})
    response = admin_client.post(
        reverse("admin:operations_operation_changelist"),
        {"action": "delete_selected", "_selected_action": [b.id], "post": "yes"},
    )
    assert response.status_code == 302  # back to the list: Django knows no such action here
    listing = admin_client.get(reverse("admin:operations_operation_changelist")).content.decode()
    assert 'value="cancel_operations"' in listing and 'value="delete_selected"' not in listing
    assert Operation.objects.filter(pk=b.id).exists() and Operation.objects.filter(parent_id=b.id).count() == 2
    Operation.objects.filter(Q(pk=b.id) | Q(parent_id=b.id)).update(finished_at=timezone.now() - dt.timedelta(days=400))
    assert operations.reap()["deleted"] == 3
    assert not Operation.objects.filter(pk=b.id).exists() and not Operation.objects.filter(parent_id=b.id).exists()
    assert Operation.objects.filter(pk=other.id).exists()


def test_the_demo_feed_starts_a_batch_of_exports_with_a_then_and_a_chain(run_command):
    done = run_command("demo_feed", "--rounds", "4", "--every", "0", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    [batch] = Operation.objects.filter(kind="operations.batch")
    assert batch.children_total == 4 and {c.kind for c in Operation.objects.children_of(batch.id)} == {"demo.export"}
    assert batch.request["then"]["kind"] == "demo.bundle"
    [chain] = Operation.objects.filter(kind="operations.chain")
    assert chain.children_total == 3 and [s["kind"] for s in chain.request["steps"]] == ["demo.step"] * 3
    assert f"started batch {batch.id}" in done.stdout and f"started chain {chain.id}" in done.stdout
