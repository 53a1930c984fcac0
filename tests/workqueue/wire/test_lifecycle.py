"""Reservations, leases and id rotation over HTTP, driven with the SDK; short leases throughout."""

from __future__ import annotations

import anthropic
import pytest

from tests.conftest import wait_until
from tests.workqueue.wire.helpers import by_key, enqueue, row
from workqueue import hooks
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def short_leases(settings):
    """A 1 s heartbeat lease floor and a 0.5 s startup lease, for the live server too."""
    settings.WORKQUEUE = {**settings.WORKQUEUE, "HEARTBEAT_TTL_MIN": 1, "STARTUP_LEASE": 0.5}


@pytest.fixture
def settled_calls():
    calls: list[tuple[list[str], str]] = []

    def record(items, reason):
        calls.append(([i.key for i in items], reason))

    hooks.on_items_moved(record)
    yield calls
    hooks.off_items_moved(record)


def poll_until(work, env_id, **kwargs):
    return wait_until(lambda: work.poll(env_id, **kwargs), timeout=10, interval=0.05, message="a poll to hand out")


def test_a_worker_that_polls_and_dies_loses_the_item_to_a_new_id(sdk, env):
    (enqueued,) = enqueue(env, 1)
    dead = sdk(env.key).beta.environments.work
    alive = sdk(env.key).beta.environments.work

    first = dead.poll(env.id, reclaim_older_than_ms=300, anthropic_worker_id="dead")
    assert first.id == enqueued.public_id  # the first hand-out keeps the enqueue id
    assert alive.poll(env.id, reclaim_older_than_ms=300) is None  # reserved meanwhile

    second = poll_until(alive, env.id, reclaim_older_than_ms=60_000, anthropic_worker_id="alive")
    assert second.id != first.id and second.data.id == first.data.id and second.state == "queued"
    assert WorkItem.objects.filter(key="sess_0").count() == 1  # the same row, renamed

    for call in (
        lambda: dead.ack(first.id, environment_id=env.id),
        lambda: dead.heartbeat(first.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT"),
        lambda: dead.stop(first.id, environment_id=env.id, force=True),
    ):
        with pytest.raises(anthropic.NotFoundError) as caught:
            call()
        assert caught.value.response.headers["x-should-retry"] == "false"

    assert alive.ack(second.id, environment_id=env.id).state == "starting"
    assert row(second.id).attempts == 1  # the dead worker never acked, so it was never charged


def test_an_acked_item_whose_worker_stops_heartbeating_is_reclaimed_fresh(sdk, env, short_leases):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    work.ack(item.id, environment_id=env.id)
    beat = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT", desired_ttl_seconds=1)
    assert beat.ttl_seconds == 1
    work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat=beat.last_heartbeat, desired_ttl_seconds=1)
    assert work.poll(env.id) is None  # held under a live lease

    again = poll_until(work, env.id)
    assert again.id != item.id and again.data.id == "sess_0"
    assert again.state == "queued"
    assert (again.acknowledged_at, again.started_at, again.latest_heartbeat_at) == (None, None, None)
    fresh = row(again.id)
    assert fresh.reclaimed and fresh.attempts == 1 and fresh.lease_token is None
    with pytest.raises(anthropic.NotFoundError):
        work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat=beat.last_heartbeat)


def test_an_acked_item_that_never_beats_is_reclaimed_after_the_startup_lease(sdk, env, short_leases):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    work.ack(item.id, environment_id=env.id)
    again = poll_until(work, env.id)
    assert again.id != item.id and again.acknowledged_at is None


def test_graceful_stop_of_an_active_item_is_finalized_by_the_next_poll_after_its_lease(sdk, env, short_leases):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    work.ack(item.id, environment_id=env.id)
    work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT", desired_ttl_seconds=1)

    stopping = work.stop(item.id, environment_id=env.id)
    assert stopping.state == "stopping" and stopping.stopped_at is None
    told = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="whatever")
    assert (told.state, told.lease_extended) == ("stopping", False)
    assert work.poll(env.id) is None
    assert row(item.id).state == "stopping"  # its lease is still live: the worker may finish

    # The worker never finishes. Once the lease lapses, any poll of the environment settles it.
    wait_until(lambda: work.poll(env.id) is None and row(item.id).state == "stopped", timeout=10)
    done = row(item.id)
    assert done.stopped_at is not None and done.outcome == "stopped" and done.lease_expires_at is None
    with pytest.raises(anthropic.ConflictError):
        work.stop(item.id, environment_id=env.id)


def test_a_lapsed_item_out_of_attempts_is_failed_not_handed_out(sdk, env, short_leases, settled_calls):
    enqueue(env, 1, queue="test.wire.once")
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    work.ack(item.id, environment_id=env.id)
    wait_until(lambda: work.poll(env.id) is None and row(item.id).state == "stopped", timeout=10)
    failed = row(item.id)
    assert failed.outcome == "failed" and "attempt 1 of 1" in failed.last_error
    assert settled_calls == [(["sess_0"], "attempts_exhausted")]


def test_ack_is_idempotent_until_the_item_stops(sdk, env):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    acked = work.ack(item.id, environment_id=env.id)
    again = work.ack(item.id, environment_id=env.id)
    assert again.state == "starting" and again.acknowledged_at == acked.acknowledged_at
    work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT")
    assert work.ack(item.id, environment_id=env.id).state == "active"
    assert row(item.id).attempts == 1
    work.stop(item.id, environment_id=env.id)
    with pytest.raises(anthropic.ConflictError):
        work.ack(item.id, environment_id=env.id)


def test_stop_rules_by_state(sdk, env, api_key):
    enqueue(env, 4)
    work = sdk(env.key).beta.environments.work
    control = sdk(api_key).beta.environments.work
    queued = by_key("sess_0").public_id
    assert control.stop(queued, environment_id=env.id).state == "stopped"  # nothing to wind down

    starting = work.poll(env.id)
    work.ack(starting.id, environment_id=env.id)
    assert work.stop(starting.id, environment_id=env.id).state == "stopped"

    active = work.poll(env.id)
    work.ack(active.id, environment_id=env.id)
    work.heartbeat(active.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT")
    assert work.stop(active.id, environment_id=env.id).state == "stopping"
    with pytest.raises(anthropic.ConflictError):
        work.stop(active.id, environment_id=env.id)  # graceful twice
    forced = control.stop(active.id, environment_id=env.id, force=True)
    assert forced.state == "stopped" and forced.stopped_at is not None and forced.stop_requested_at is not None

    fourth = by_key("sess_3")
    assert work.stop(fourth.public_id, environment_id=env.id, force=True).state == "stopped"
    assert WorkItem.objects.live().count() == 0


def test_heartbeat_preconditions(sdk, env):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    with pytest.raises(anthropic.PreconditionFailedError) as caught:  # not acked yet
        work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT")
    assert caught.value.details.current_state.state == "queued"
    assert caught.value.details.current_state.last_heartbeat is None
    work.ack(item.id, environment_id=env.id)
    first = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT")
    with pytest.raises(anthropic.PreconditionFailedError):  # the lease is already claimed
        work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT")
    with pytest.raises(anthropic.PreconditionFailedError):
        work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="2020-01-01T00:00:00.000000Z")
    assert row(item.id).last_heartbeat_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ") == first.last_heartbeat


def test_desired_ttl_is_clamped_and_reported(sdk, env):
    enqueue(env, 1)
    work = sdk(env.key).beta.environments.work
    item = work.poll(env.id)
    work.ack(item.id, environment_id=env.id)
    low = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT", desired_ttl_seconds=1)
    assert low.ttl_seconds == 10  # HEARTBEAT_TTL_MIN
    high = work.heartbeat(
        item.id, environment_id=env.id, expected_last_heartbeat=low.last_heartbeat, desired_ttl_seconds=86_400
    )
    assert high.ttl_seconds == 600  # HEARTBEAT_TTL_MAX
    default = work.heartbeat(item.id, environment_id=env.id, expected_last_heartbeat=high.last_heartbeat)
    assert default.ttl_seconds == 60


def test_poll_order_and_schedule(sdk, env):
    WorkItem.objects.enqueue("test.wire", "low", environment=env.id, priority=0)
    WorkItem.objects.enqueue("test.wire", "high", environment=env.id, priority=5)
    WorkItem.objects.enqueue("test.wire", "later", environment=env.id, priority=9, delay=3600)
    WorkItem.objects.enqueue("test.wire", "low2", environment=env.id, priority=0)
    work = sdk(env.key).beta.environments.work
    order = [work.poll(env.id, reclaim_older_than_ms=60_000) for _ in range(4)]
    assert [w.data.id if w else None for w in order] == ["high", "low", "low2", None]


def test_max_running_is_respected_by_poll(sdk, env):
    enqueue(env, 3, queue="test.wire.capped")
    work = sdk(env.key).beta.environments.work
    a = work.poll(env.id, reclaim_older_than_ms=60_000)
    b = work.poll(env.id, reclaim_older_than_ms=60_000)
    assert a and b and work.poll(env.id) is None  # two reservations fill the cap of 2
    work.ack(a.id, environment_id=env.id)
    work.ack(b.id, environment_id=env.id)
    assert work.poll(env.id) is None
    c_row = by_key("sess_2")
    assert (c_row.state, c_row.lease_expires_at, c_row.handed_out) == ("queued", None, False)  # left untouched
    work.stop(a.id, environment_id=env.id)
    c = work.poll(env.id)
    assert c is not None and c.data.id == "sess_2"


def _poll_in_transaction(env) -> list[bool]:
    """Whether wire_poll ran inside a transaction, for one poll of ``env``."""
    from django.db import connection

    states = []

    def spy(execute, sql, params, many, context):
        if isinstance(params, dict) and "reserve_s" in params:
            states.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    enqueue(env, 1)
    with connection.execute_wrapper(spy):
        assert WorkItem.objects.poll(env.id).item is not None
    return states


def test_a_poll_no_hook_could_want_is_a_statement_of_its_own(env, settings):
    # operations' hook names the operations queues, which are never served over the wire; and
    # with no capped wire queue there is no lock to take first.
    queues = settings.WORKQUEUE["QUEUES"]
    settings.WORKQUEUE = {
        **settings.WORKQUEUE,
        "QUEUES": {name: q for name, q in queues.items() if not (q.get("over_wire") and q.get("max_running"))},
    }
    assert _poll_in_transaction(env) == [False]


def test_a_poll_runs_in_a_transaction_when_a_hook_may_want_the_spent_items_it_settles(env, settled_calls):
    assert _poll_in_transaction(env) == [True]
