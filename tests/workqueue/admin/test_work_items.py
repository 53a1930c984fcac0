"""The work item change list: badges and filters cover every state, actions call the verbs, counts stay bounded."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.urls import reverse

from tests.conftest import statements_run
from tests.workqueue.admin.conftest import make_item
from workqueue.admin import OUTCOME_TONES, STATE_TONES, EstimatedCountPaginator, SituationFilter, state_badge
from workqueue.admin import items as wq_admin
from workqueue.models import Outcome, State, WorkItem

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:workqueue_workitem_changelist")


def listed(response) -> set[int]:
    return {obj.pk for obj in response.context["cl"].result_list}


def test_every_state_and_outcome_has_a_badge():
    assert set(STATE_TONES) == set(State.values)
    assert set(OUTCOME_TONES) == set(Outcome.values)
    for state in State.values:
        assert f">{state}<" in state_badge(state)
    for outcome in Outcome.values:
        shown = state_badge(State.STOPPED, outcome)
        assert f">{outcome}<" in shown and f'title="stopped · {outcome}"' in shown


def test_every_state_is_a_filter_choice_and_shows_its_badge(admin_client, one_of_each_state):
    response = admin_client.get(CHANGELIST)
    cl = response.context["cl"]
    spec = next(s for s in cl.filter_specs if getattr(s, "field_path", None) == "state")
    choices = {c["display"] for c in spec.choices(cl)}
    assert {State(s).label for s in State.values} <= choices
    page = response.content.decode()
    for state, item in one_of_each_state.items():
        assert state_badge(state, item.outcome) in page
        filtered = admin_client.get(CHANGELIST, {"state__exact": state})
        assert listed(filtered) == {item.pk}


def test_situation_filter_is_the_queryset_scopes(admin_client):
    make_item("test.noop", "ready")
    make_item("test.noop", "scheduled", run_after=Now() + dt.timedelta(minutes=10))
    make_item("test.noop", "pending", lease_expires_at=Now() + dt.timedelta(seconds=30))
    make_item("test.noop", "active", State.ACTIVE)
    make_item("test.noop", "starting", State.STARTING)
    make_item("test.noop", "stopping", State.STOPPING)
    make_item("test.noop", "ok", State.STOPPED)
    make_item("test.noop", "bad", State.STOPPED, outcome="failed")
    for name in SituationFilter.SCOPES:
        expected = set(getattr(WorkItem.objects, name)().values_list("pk", flat=True))
        assert expected, name
        assert listed(admin_client.get(CHANGELIST, {"situation": name})) == expected, name


def test_stuck_filter_lists_exactly_the_stuck_scope(admin_client):
    lapsed = make_item("test.noop", "lapsed", State.ACTIVE, lease_expires_at=Now() - dt.timedelta(minutes=3))
    winding = make_item("test.noop", "winding", State.STOPPING, lease_expires_at=Now() - dt.timedelta(seconds=5))
    late = make_item("test.noop", "late", run_after=Now() - dt.timedelta(hours=1))
    make_item("test.noop", "fresh")
    make_item("test.noop", "held", State.ACTIVE)
    make_item("test.noop", "old-but-done", State.STOPPED, run_after=Now() - dt.timedelta(hours=1))
    stuck = listed(admin_client.get(CHANGELIST, {"stuck": "yes"}))
    assert stuck == {lapsed.pk, winding.pk, late.pk}
    assert stuck == set(WorkItem.objects.stuck().values_list("pk", flat=True))
    assert listed(admin_client.get(CHANGELIST, {"stuck": "lapsed"})) == {lapsed.pk, winding.pk}


def test_queue_filter_and_exact_search(admin_client):
    a = make_item("test.noop", "shared-key")
    b = make_item("test.other", "shared-key")
    make_item("test.other", "another")
    assert listed(admin_client.get(CHANGELIST, {"queue": "test.noop"})) == {a.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": "shared-key"})) == {a.pk, b.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": b.public_id})) == {b.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": "shared"})) == set()


def test_lease_and_age_are_relative_to_the_database_clock(admin_client):
    make_item("test.noop", "running", State.ACTIVE, lease_expires_at=Now() + dt.timedelta(seconds=42.5))
    make_item("test.noop", "lapsed", State.ACTIVE, lease_expires_at=Now() - dt.timedelta(minutes=3, seconds=10))
    make_item("test.noop", "later", run_after=Now() + dt.timedelta(minutes=5, seconds=30))
    page = admin_client.get(CHANGELIST).content.decode()
    assert re.search(r">in 4[12] s<", page)
    assert "lapsed 3 min ago" in page
    assert re.search(r">in 5 min<", page)
    assert "1 / 5" in page


def post_action(client, action: str, items) -> list[str]:
    response = client.post(
        CHANGELIST, {"action": action, "_selected_action": [i.pk for i in items], "index": 0}, follow=True
    )
    assert response.status_code == 200
    return [str(m) for m in response.context["messages"]]


def test_requeue_now_moves_the_live_items_and_says_how_many(admin_client):
    held = make_item("test.noop", "held", State.ACTIVE)
    later = make_item("test.noop", "later", run_after=Now() + dt.timedelta(hours=1))
    done = make_item("test.noop", "done", State.STOPPED)
    untouched = make_item("test.noop", "untouched", State.ACTIVE)
    messages = post_action(admin_client, "requeue_now", [held, later, done])
    assert messages == [
        "Requeued 2 work items. 1 of the 3 selected were stopping or stopped and were left as they were."
    ]
    assert set(WorkItem.objects.ready().values_list("pk", flat=True)) == {held.pk, later.pk}
    held.refresh_from_db()
    assert held.lease_token is None and held.lease_expires_at is None
    assert WorkItem.objects.get(pk=done.pk).state == State.STOPPED
    assert WorkItem.objects.get(pk=untouched.pk).state == State.ACTIVE


def test_force_stop_settles_the_unsettled_items_and_says_how_many(admin_client):
    queued = make_item("test.noop", "queued")
    held = make_item("test.noop", "held", State.ACTIVE)
    done = make_item("test.noop", "done", State.STOPPED)
    other = make_item("test.noop", "other")
    messages = post_action(admin_client, "force_stop", [queued, held, done])
    assert messages == [
        "Force-stopped 2 work items. 1 of the 3 selected were already stopped and were left as they were."
    ]
    for item in (queued, held):
        item.refresh_from_db()
        assert (item.state, item.outcome, item.lease_token) == (State.STOPPED, Outcome.CANCELLED, None)
    done.refresh_from_db()
    assert done.outcome == Outcome.SUCCEEDED
    assert WorkItem.objects.get(pk=other.pk).state == State.QUEUED


def test_the_change_page_buttons_run_the_actions(admin_client):
    """The page's buttons lead to a confirmation page; its POST runs the verb (see
    test_object_actions.py for every action and its guards)."""
    held = make_item("test.noop", "from-the-page", State.ACTIVE)
    page = admin_client.get(reverse("admin:workqueue_workitem_change", args=[held.pk])).content.decode()
    action_url = re.search(r'<a class="button" href="([^"]+/do/force_stop/)"', page).group(1)
    assert "/do/requeue_now/" in page
    response = admin_client.post(action_url, follow=True)
    assert [str(m) for m in response.context["messages"]] == ["test.noop: force-stopped from-the-page."]
    assert WorkItem.objects.get(pk=held.pk).state == State.STOPPED


def test_a_selection_too_large_is_refused_and_changes_nothing(admin_client, monkeypatch):
    monkeypatch.setattr(wq_admin, "MAX_ACTION_ITEMS", 2)
    items = [make_item("test.noop", f"k{i}") for i in range(3)]
    messages = post_action(admin_client, "force_stop", items)
    assert "narrow the filters" in messages[0]
    assert WorkItem.objects.stopped().count() == 0


def counts_over_work_items(texts: list[str]) -> list[str]:
    assert texts, "no statement was recorded"
    return [sql for sql in texts if "COUNT(" in sql.upper() and "work_items" in sql]


def test_the_unfiltered_list_reads_the_planner_estimate_instead_of_counting(admin_client, monkeypatch):
    for i in range(5):
        make_item("test.noop", f"k{i}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE work_items")
    monkeypatch.setattr(EstimatedCountPaginator, "exact_up_to", 3)
    with statements_run() as texts:
        response = admin_client.get(CHANGELIST)
    assert counts_over_work_items(texts) == []
    assert response.context["cl"].result_count == 5
    assert "about 5" in response.content.decode()


def test_no_list_counts_more_rows_than_its_bound(admin_client, monkeypatch):
    monkeypatch.setattr(EstimatedCountPaginator, "exact_up_to", 3)
    for i in range(5):
        make_item("test.noop", f"k{i}")
    for params in ({}, {"state__exact": "queued"}, {"stuck": "yes"}, {"q": "k1"}):
        with statements_run() as texts:
            response = admin_client.get(CHANGELIST, params)
        assert response.status_code == 200
        counted = counts_over_work_items(texts)
        assert counted or not params, f"a filtered list counts its rows (up to the bound): {params}"
        for sql in counted:
            assert re.search(r"LIMIT 4\)", sql), sql
    # Filtered past the bound, the count is the planner's estimate, never below what was counted.
    cl = admin_client.get(CHANGELIST, {"state__exact": "queued"}).context["cl"]
    assert cl.paginator.estimated and cl.result_count >= 4
    # Within the bound the count is exact.
    cl = admin_client.get(CHANGELIST, {"q": "k1"}).context["cl"]
    assert not cl.paginator.estimated and cl.result_count == 1


def test_environments_are_joined_not_fetched_per_row(admin_client):
    from workqueue.environments import create_environment

    for i in range(3):
        env, _key = create_environment(f"env-{i}", "cloud")
        WorkItem.objects.enqueue("test.noop", f"k{i}", environment=env)
    with statements_run() as texts:
        page = admin_client.get(CHANGELIST).content.decode()
    assert all(f"env-{i} (cloud)" in page for i in range(3))
    assert [sql for sql in texts if 'FROM "work_items"' in sql], "the list's own read was not recorded"
    assert [sql for sql in texts if 'WHERE "work_environments"."id" =' in sql] == []


def test_the_list_reads_no_large_column_and_nothing_per_row(admin_client):
    for i in range(3):
        WorkItem.objects.enqueue("test.noop", f"big{i}", metadata={"note": "x" * 500})
    with statements_run() as texts:
        page = admin_client.get(CHANGELIST).content.decode()
    assert all(f"big{i}" in page for i in range(3))
    reads = [sql for sql in texts if 'FROM "work_items"' in sql]
    assert reads
    for column in ("last_error", "metadata", "trace_context"):
        assert not [sql for sql in reads if f'"work_items"."{column}"' in sql], column
    assert not [sql for sql in reads if 'WHERE "work_items"."id" =' in sql]
