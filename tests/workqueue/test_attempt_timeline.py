"""A work item's attempt timeline: the bounded attempt_log the ending statements write, and
the row's own attempt beside it (workqueue.attempts)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models.functions import Now

from tests.workqueue.conftest import row
from workqueue import attempts
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def claim(queue: str, worker: str):
    return WorkItem.objects.claim([queue], limit=10, worker_id=worker).items


def due_now(key: str) -> None:
    WorkItem.objects.filter(key=key).update(run_after=Now())


def lapse(key: str) -> None:
    WorkItem.objects.filter(key=key).update(lease_expires_at=Now() - dt.timedelta(seconds=1))


def story(key: str) -> list[tuple]:
    return [(a.number, a.worker, a.outcome, a.error) for a in attempts.timeline(row(key))]


def test_three_attempts_a_retry_a_lapsed_lease_and_a_success_read_as_three_rows():
    WorkItem.objects.enqueue("test.record", "k", max_attempts=5)
    (first,) = claim("test.record", "w1")
    assert WorkItem.objects.fail(first, "boom 1") == "retried"
    due_now("k")
    (_second,) = claim("test.record", "w2")
    lapse("k")
    (third,) = claim("test.record", "w3")  # the claim takes the lapsed item back
    assert third.reclaimed and third.attempts == 3
    WorkItem.objects.complete(third)

    assert story("k") == [
        (1, "w1", "retried", "boom 1"),
        (2, "w2", "lease lapsed", ""),
        (3, "w3", "succeeded", ""),
    ]
    timeline = attempts.timeline(row("k"))
    assert all(a.started_at and a.ended_at and a.seconds >= 0 for a in timeline)
    assert timeline[0].started_at < timeline[1].started_at < timeline[2].started_at


def test_a_success_writes_no_log_entry_the_row_is_its_record():
    WorkItem.objects.enqueue("test.noop", "k")
    (item,) = claim("test.noop", "w1")
    assert story("k") == [(1, "w1", "active", "")]
    WorkItem.objects.complete(item)
    assert row("k").attempt_log == []
    assert story("k") == [(1, "w1", "succeeded", "")]


def test_the_last_failure_is_logged_once_and_not_repeated_from_the_row():
    WorkItem.objects.enqueue("test.record", "k", max_attempts=2)
    (item,) = claim("test.record", "w1")
    WorkItem.objects.fail(item, "boom 1")
    due_now("k")
    (item,) = claim("test.record", "w1")
    assert WorkItem.objects.fail(item, "boom 2") == "failed"
    assert story("k") == [(1, "w1", "retried", "boom 1"), (2, "w1", "failed", "boom 2")]


def test_the_log_keeps_the_newest_twenty_however_often_an_item_is_retried():
    WorkItem.objects.enqueue("test.record", "k", max_attempts=100)
    for n in range(1, 26):
        due_now("k")
        (item,) = claim("test.record", f"w{n}")
        WorkItem.objects.fail(item, f"boom {n}")
    log = row("k").attempt_log
    assert len(log) == 20
    assert [e["attempt"] for e in log] == list(range(6, 26))
    assert log[-1]["worker"] == "w25" and log[-1]["error"] == "boom 25"


def test_force_stop_logs_the_held_attempt_it_ends_and_nothing_for_a_queued_item():
    WorkItem.objects.enqueue_many([("test.noop", "held"), ("test.noop", "waiting")])
    held = next(i for i in claim("test.noop", "w1") if i.key == "held")
    WorkItem.objects.filter(key="waiting").update(state="queued", lease_token=None, lease_expires_at=None)
    WorkItem.objects.force_stop([held.id, row("waiting").id])
    assert story("held") == [(1, "w1", "force stopped", "")]
    assert row("waiting").attempt_log == []


def test_a_graceful_release_and_a_lapse_found_by_recover_are_logged():
    from workqueue.sweeps import run_sweep

    WorkItem.objects.enqueue("test.noop", "k")
    (item,) = claim("test.noop", "w1")
    WorkItem.objects.release_many([item])
    (item,) = claim("test.noop", "w2")
    assert item.attempts == 1  # the release refunded the first claim's attempt
    lapse("k")
    WorkItem.objects.filter(key="k").update(wire=True)  # recover requeues lapsed wire items
    run_sweep("recover")
    assert [(n, w, o) for n, w, o, _ in story("k")] == [(1, "w1", "released"), (1, "w2", "lease lapsed")]
