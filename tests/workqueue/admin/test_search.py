"""The admin's search box: an exact id or key, field=value over metadata (and an operation's
request), error:text over the newest failures; each answered by an index."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.urls import reverse

import operations
from operations.models import Operation
from tests.workqueue.admin.conftest import make_item
from workqueue.admin import search
from workqueue.models import Outcome, State, WorkItem

CHANGELIST = reverse("admin:workqueue_workitem_changelist")
OPS = reverse("admin:operations_operation_changelist")


def listed(response) -> set:
    assert response.status_code == 200
    return {obj.pk for obj in response.context["cl"].result_list}


def test_a_term_is_pairs_an_error_search_or_an_exact_match():
    assert search.parse("account=42").pairs == [(["account"], "42")]
    assert search.parse('customer.region=eu note="a b"').pairs == [(["customer", "region"], "eu"), (["note"], '"a b"')]
    assert search.parse("Error: Timeout talking").error == "Timeout talking"
    assert not search.parse("work_0123").structured
    assert not search.parse("account=42 loose").structured  # one token is not a pair
    assert not search.parse('note="unclosed').structured
    assert not search.parse("=42").structured and not search.parse("9lives=1").structured
    assert not search.parse(".".join(["a"] * 9) + "=1").structured  # eight levels at most
    assert search.parse("export:42*").prefix == "export:42"
    assert not search.parse("ab*").structured and not search.parse("two words*").structured


def test_a_key_prefix_finds_live_and_stopped_keys_that_start_so(admin_client):
    live = make_item("test.noop", "export:42:2026-12")
    done = make_item("test.noop", "export:42:2026-11", State.STOPPED)
    make_item("test.noop", "export:421")  # starts with export:42 too, but not export:42:
    make_item("test.noop", "import:42:2026-12")
    assert listed(admin_client.get(CHANGELIST, {"q": "export:42:*"})) == {live.pk, done.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": "export:42_*"})) == set()  # _ is a character, not a wildcard
    assert listed(admin_client.get(CHANGELIST, {"q": "export:42:2026-12"})) == {live.pk}  # exact as before


def test_pairs_become_one_containment_per_combination_and_contradictions_match_nothing(admin_client):
    assert search.documents(search.parse("customer.region=eu customer.tier=2")) == [
        {"customer": {"region": "eu", "tier": 2}},
        {"customer": {"region": "eu", "tier": "2"}},
    ]
    assert search.documents(search.parse("account=1 account=2")) == []
    make_item("test.noop", "one", metadata={"account": 1})
    assert listed(admin_client.get(CHANGELIST, {"q": "account=1 account=2"})) == set()
    assert listed(admin_client.get(CHANGELIST, {"q": " ".join(f"f{n}=1" for n in range(7))})) == set()  # 7 > MAX_PAIRS


def test_a_value_no_json_can_hold_is_searched_as_text(admin_client):
    found = make_item("test.noop", "inf", metadata={"limit": "1e999"})
    assert listed(admin_client.get(CHANGELIST, {"q": "limit=1e999"})) == {found.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": "limit=NaN"})) == set()


def test_metadata_search_matches_the_number_and_its_string_nested_and_every_pair(admin_client):
    number = make_item("test.noop", "n", metadata={"account": 42, "region": "eu"})
    string = make_item("test.noop", "s", metadata={"account": "42", "region": "us"})
    make_item("test.noop", "other", metadata={"account": 7})
    make_item("test.noop", "none")
    nested = make_item("test.other", "deep", metadata={"customer": {"region": "eu", "tier": 2}})
    spaced = make_item("test.other", "spaced", metadata={"note": "a b", "account": 7})
    keyed = make_item("test.other", "account=42")  # a key with an "=" is still found by its key
    assert listed(admin_client.get(CHANGELIST, {"q": "account=42"})) == {number.pk, string.pk, keyed.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": "account=42 region=eu"})) == {number.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": "customer.region=eu"})) == {nested.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": "customer.tier=2"})) == {nested.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": 'account="7"'})) == set()  # quoted: the string only
    assert listed(admin_client.get(CHANGELIST, {"q": "account=43"})) == set()
    assert listed(admin_client.get(CHANGELIST, {"q": 'note="a b" account=7'})) == {spaced.pk}


def _plan(queryset) -> str:
    return queryset.explain()


def _searched(model, term: str):
    """The queryset the model's admin page runs for a search term."""
    from django.contrib import admin
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    return admin.site.get_model_admin(model).get_search_results(request, model.objects.all(), term)[0]


@pytest.fixture
def history(db):
    """20,000 settled items (a tenth with metadata, 1% failed) and 2,000 finished operations,
    ANALYZEd: enough rows that the planner's choice is the one it makes on a big table."""
    from bench.sections.admin import LOAD_ITEMS, LOAD_OPERATIONS

    with connection.cursor() as cursor:
        cursor.execute(LOAD_ITEMS, {"first": 1, "last": 20_000, "n": 20_000, "span": 86400.0})
        cursor.execute(LOAD_OPERATIONS.format(table='"operations"'), {"n": 2_000, "span": 86400.0})
        cursor.execute("ANALYZE work_items")
        cursor.execute("ANALYZE operations")


@pytest.mark.parametrize(
    ("model", "term", "indexes"),
    [
        (
            WorkItem,
            "work_123",
            ["work_items_public_id_uniq", "work_items_unsettled_keyed_idx", "work_items_stopped_key_idx"],
        ),
        (WorkItem, "account=42 region=eu", ["work_items_metadata_idx", "work_items_stopped_key_idx"]),
        (Operation, "account=42", ["operations_request_idx", "operations_pkey"]),
        (WorkItem, "done-42*", ["work_items_stopped_key_idx"]),
    ],
)
def test_every_arm_of_a_search_goes_through_an_index(history, model, term, indexes):
    """Each arm of the search has its index (the metadata arms carry the partial index's
    predicate): the plan reads no table from end to end."""
    plan = _plan(_searched(model, term))
    assert "Seq Scan" not in plan, plan
    for index in indexes:
        assert index in plan, plan
    if term.endswith("*"):  # the prefix is the index's range, not a filter over all of it
        assert "~>=~ 'done-42'" in plan, plan


def test_the_error_search_reads_the_newest_failures_through_their_index(history):
    failed = WorkItem.objects.filter(state=State.STOPPED, outcome=Outcome.FAILED).order_by("-stopped_at")
    plan = _plan(failed.values_list("pk", "last_error")[: search.RECENT_FAILURES])
    assert "work_items_failed_idx" in plan and "Seq Scan" not in plan, plan


def _failed(key: str, error: str, seconds_ago: int) -> WorkItem:
    import datetime as dt

    return make_item(
        "test.noop",
        key,
        State.STOPPED,
        outcome=Outcome.FAILED,
        last_error=error,
        stopped_at=Now() - dt.timedelta(seconds=seconds_ago),
    )


def test_error_search_reads_only_the_newest_failures(admin_client, monkeypatch):
    old = _failed("old", "TimeoutError: talking to billing", 300)
    new = _failed("new", "TimeoutError: talking to billing", 10)
    _failed("other", "KeyError: 'x'", 5)
    # A succeeded item that once failed keeps its last error: not a failure, not listed.
    make_item("test.noop", "ok", State.STOPPED, last_error="TimeoutError: talking to billing")
    assert listed(admin_client.get(CHANGELIST, {"q": "error:timeouterror"})) == {old.pk, new.pk}
    monkeypatch.setattr(search, "RECENT_FAILURES", 2)
    assert listed(admin_client.get(CHANGELIST, {"q": "error:TimeoutError"})) == {new.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": "error:"})) == set()


def test_the_search_box_says_what_it_takes(admin_client):
    page = admin_client.get(CHANGELIST).content.decode()
    assert "account=42" in page and "error:text" in page and "10,000" in page


def test_operations_are_found_by_request_and_by_error(admin_client):
    wanted = operations.start("test.ops.count", {"account": 42, "items": [1, 2]}, owner="7")
    operations.start("test.ops.count", {"account": 41}, owner="7")
    Operation.objects.filter(pk=wanted.id).update(
        state="failed", error_code="upstream", error_message="Billing API timed out", finished_at=Now()
    )
    assert listed(admin_client.get(OPS, {"q": "account=42"})) == {wanted.id}
    assert listed(admin_client.get(OPS, {"q": "error:timed out"})) == {wanted.id}
    assert listed(admin_client.get(OPS, {"q": "error:nothing like it"})) == set()
    assert listed(admin_client.get(OPS, {"q": wanted.id})) == {wanted.id}  # the exact id as before
