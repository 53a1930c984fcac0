"""WorkItem.objects verbs against a real PostgreSQL: enqueue, claim, proofs, settling."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import OperationalError, connection, transaction
from django.db.models.functions import Now

from tests.workqueue.conftest import load_item, row, run_threads, side_connection
from workqueue.conf import wq_settings
from workqueue.exceptions import InvalidInput, InvalidMetadata, LeaseLost, UnknownEnvironment
from workqueue.models import WorkItem
from workqueue.testing import EnvironmentFactory

pytestmark = pytest.mark.django_db(transaction=True)


def db_now() -> dt.datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT now()")
        return cur.fetchone()[0]


def claim(queue: str, limit: int = 10, worker: str = "w1", lease: float | None = None):
    return WorkItem.objects.claim([queue], limit=limit, worker_id=worker, lease=lease).items


def lapse(*items) -> None:
    """Make the items' leases lapse now, as if their holder died long ago."""
    WorkItem.objects.filter(pk__in=[i.id for i in items]).update(lease_expires_at=Now() - dt.timedelta(seconds=1))


# -- enqueue --------------------------------------------------------------------------------


def test_enqueue_is_idempotent_per_live_key_and_only_raises_priority_and_pulls_run_after_earlier():
    first, created = WorkItem.objects.enqueue("test.noop", "k", priority=1, delay=60)
    assert created and first.state == "queued" and first.public_id.startswith("work_")

    again, created = WorkItem.objects.enqueue("test.noop", "k", priority=0, delay=600)
    assert not created and again.id == first.id
    assert again.priority == 1 and again.run_after == first.run_after

    raised, created = WorkItem.objects.enqueue("test.noop", "k", priority=5, delay=0)
    assert not created and raised.priority == 5 and raised.run_after < first.run_after
    assert WorkItem.objects.filter(key="k").count() == 1

    # Another queue is another slot; a settled item frees the slot.
    _other, created = WorkItem.objects.enqueue("test.other", "k")
    assert created
    held = claim("test.noop")
    assert [i.id for i in held] == [first.id]
    _again, created = WorkItem.objects.enqueue("test.noop", "k")
    assert not created, "a held item absorbs the repeat"
    WorkItem.objects.complete(held[0])
    fresh, created = WorkItem.objects.enqueue("test.noop", "k")
    assert created and fresh.id != first.id


def test_concurrent_enqueue_of_one_key_from_8_threads_makes_exactly_one_live_item():
    def enqueue(i):
        item, created = WorkItem.objects.enqueue("test.noop", "same-key", priority=i)
        return item.id, created

    results = run_threads(enqueue, 8)
    assert sum(created for _, created in results) == 1
    assert len({pk for pk, _ in results}) == 1
    assert WorkItem.objects.filter(queue="test.noop", key="same-key").live().count() == 1
    assert WorkItem.objects.filter(queue="test.noop", key="same-key").count() == 1
    assert row("same-key").priority == 7, "every repeat may raise the priority"


def test_enqueue_in_a_rolled_back_transaction_leaves_nothing_and_notifies_nobody():
    channel = wq_settings().notify_channel
    with side_connection() as listener:
        listener.execute(f"LISTEN {channel}")

        with pytest.raises(RuntimeError, match="roll back"), transaction.atomic():
            WorkItem.objects.enqueue("test.noop", "rolled-back")
            WorkItem.objects.enqueue_many([("test.noop", "rolled-back-2")])
            raise RuntimeError("roll back")
        assert WorkItem.objects.count() == 0
        assert list(listener.notifies(timeout=1.0)) == []

        with transaction.atomic():
            WorkItem.objects.enqueue("test.noop", "committed")
            # Nothing is delivered before commit.
            assert list(listener.notifies(timeout=0.3)) == []
        notes = list(listener.notifies(timeout=5.0, stop_after=1))
        assert [(n.channel, n.payload) for n in notes] == [(channel, "test.noop")]

        WorkItem.objects.enqueue_many([("test.other", "a"), ("test.other", "b")])
        notes = list(listener.notifies(timeout=5.0, stop_after=1))
        assert [n.payload for n in notes] == ["test.other"]


def test_enqueue_many_inserts_a_batch_and_merges_duplicates():
    rows = WorkItem.objects.enqueue_many(
        [("test.noop", "a"), {"queue": "test.noop", "key": "b", "priority": 3, "metadata": {"x": "1"}}]
    )
    assert sorted((q, k, c) for _, q, k, c in rows) == [("test.noop", "a", True), ("test.noop", "b", True)]
    again = WorkItem.objects.enqueue_many([("test.noop", "a"), ("test.noop", "c"), ("test.noop", "c")])
    assert sorted((k, c) for _, _, k, c in again) == [("a", False), ("c", True)]
    assert WorkItem.objects.count() == 3
    assert row("b").metadata == {"x": "1"} and row("b").priority == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metadata": {"n": 1}}, "value of 'n' must be a string, not int"),
        ({"metadata": {"n": None}}, "value of 'n' must be a string, not NoneType"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "at most 16 keys"),
        ({"metadata": {"k" * 65: "v"}}, "longer than 64"),
        ({"metadata": ["a"]}, "metadata must be an object"),
        ({"delay": -1}, "delay must be 0 or more, not -1"),
        ({"priority": 2**31}, "priority must be a 32-bit integer"),
        ({"priority": "high"}, "priority must be a 32-bit integer, not 'high'"),
        ({"max_attempts": 0}, "max_attempts must be an integer >= 1"),
    ],
)
def test_enqueue_refuses_bad_input_and_writes_nothing(kwargs, message):
    with pytest.raises(InvalidInput) as info:
        WorkItem.objects.enqueue("test.noop", "bad", **kwargs)
    assert message in str(info.value)
    with pytest.raises(InvalidInput) as info:
        WorkItem.objects.enqueue_many([{"queue": "test.noop", "key": "bad", **kwargs}])
    assert message in str(info.value)
    assert WorkItem.objects.count() == 0


def test_non_string_metadata_raises_invalid_metadata_naming_each_problem():
    with pytest.raises(InvalidMetadata) as info:
        WorkItem.objects.enqueue("test.noop", "bad", metadata={"a": 1, "b": ["x"], "ok": "fine"})
    assert info.value.problems == ["value of 'a' must be a string, not int", "value of 'b' must be a string, not list"]
    assert WorkItem.objects.count() == 0


@pytest.mark.parametrize(("queue", "key"), [("bad queue!", "k"), ("", "k"), ("q" * 129, "k"), ("test.noop", "")])
def test_bad_queue_names_and_keys_are_refused(queue, key):
    with pytest.raises(InvalidInput) as info:
        WorkItem.objects.enqueue(queue, key)
    assert repr(queue if queue != "test.noop" else key)[:30] in str(info.value)
    assert WorkItem.objects.count() == 0


def test_unknown_environment_id_is_refused_by_name_and_the_callers_transaction_survives():
    with transaction.atomic():
        WorkItem.objects.enqueue("test.noop", "before")
        with pytest.raises(UnknownEnvironment) as info:
            WorkItem.objects.enqueue("test.noop", "k", environment="env_nope")
        assert "'env_nope'" in str(info.value) and "environments create" in str(info.value)
        # The failed enqueue did not poison the transaction.
        WorkItem.objects.enqueue("test.noop", "after")
    with pytest.raises(UnknownEnvironment) as info:
        WorkItem.objects.enqueue_many([("test.noop", "x")], environment="env_missing")
    assert "'env_missing'" in str(info.value)
    assert sorted(WorkItem.objects.values_list("key", flat=True)) == ["after", "before"]


def test_wire_flag_follows_environment_kind_and_queue_over_wire():
    cloud, hosted = EnvironmentFactory(kind="cloud"), EnvironmentFactory(kind="self_hosted")
    for env in (None, cloud, hosted):
        for queue in ("test.wire", "test.noop"):
            WorkItem.objects.enqueue(queue, f"{queue}-{env and env.kind}", environment=env)
    wire = set(WorkItem.objects.filter(wire=True).values_list("key", flat=True))
    assert wire == {"test.wire-self_hosted"}
    # The claim never hands out a wire item.
    got = WorkItem.objects.claim(["test.wire"], limit=10, worker_id="w").items
    assert sorted(i.key for i in got) == ["test.wire-None", "test.wire-cloud"]


# -- claim, proofs and settling ------------------------------------------------------------------


def test_claim_takes_priority_then_run_after_then_age_and_charges_an_attempt():
    WorkItem.objects.enqueue("test.noop", "old-low")
    WorkItem.objects.enqueue("test.noop", "new-low")
    WorkItem.objects.enqueue("test.noop", "high", priority=5)
    WorkItem.objects.enqueue("test.noop", "later", delay=3600, priority=100)
    items = claim("test.noop", limit=2)
    assert [i.key for i in items] == ["high", "old-low"]
    assert all(i.state == "active" and i.attempts == 1 and i.lease_token and not i.reclaimed for i in items)
    assert all(i.claimed_by == "w1" for i in items)
    assert [i.key for i in claim("test.noop")] == ["new-low"]
    assert claim("test.noop") == [], "a delayed item is not due, and an empty claim is no error"
    assert row("later").attempts == 0


def test_claimed_rows_are_skipped_by_a_claim_on_another_connection():
    WorkItem.objects.enqueue_many([("test.noop", f"k{i}") for i in range(6)])
    with transaction.atomic():
        mine = claim("test.noop", limit=3, worker="a")
        theirs = run_threads(lambda _i: [i.key for i in claim("test.noop", limit=10, worker="b")], 1)[0]
    assert len(mine) == 3 and len(theirs) == 3
    assert not {i.key for i in mine} & set(theirs)


# Each claim statement: item_claim (test.noop), item_claim_capped (test.capped: max_running 3),
# item_claim_flow (test.grouped: a per-group cap puts it under flow control).
@pytest.mark.parametrize("queue", ["test.noop", "test.capped", "test.grouped"])
@pytest.mark.parametrize("walk", ["ready", "lapsed"])
def test_a_claim_skips_a_row_another_transaction_holds_locked_and_takes_the_others_at_once(queue, walk):
    keys = ["k0", "k1", "k2"]
    WorkItem.objects.enqueue_many([(queue, k) for k in keys])
    if walk == "lapsed":
        dead = WorkItem.objects.claim([queue], limit=3, worker_id="dead").items
        assert len(dead) == 3
        lapse(*dead)
    with side_connection(autocommit=False) as side:
        # Another transaction (a worker's own claim or settle, an operator's action) has k1.
        side.execute("SELECT id FROM work_items WHERE queue = %s AND key = 'k1' FOR UPDATE", [queue])
        with transaction.atomic():
            with connection.cursor() as cur:
                # A claim that waited for the lock would hang until the holder commits: bound
                # the wait, generously, so such a claim fails here instead of hanging the test.
                cur.execute("SET LOCAL lock_timeout = '5s'")
            try:
                got = WorkItem.objects.claim([queue], limit=10, worker_id="live").items
            except OperationalError as exc:  # lock_timeout
                pytest.fail(f"the claim waited for the row another transaction holds: {exc}")
        assert sorted(i.key for i in got) == ["k0", "k2"]
        assert all(i.reclaimed == (walk == "lapsed") for i in got)
        side.rollback()
    (k1,) = WorkItem.objects.claim([queue], limit=10, worker_id="live").items
    assert k1.key == "k1"


def test_extend_moves_the_expiry_and_keeps_the_proof():
    WorkItem.objects.enqueue("test.noop", "k")
    (item,) = claim("test.noop", lease=5)
    token, before = item.lease_token, item.lease_expires_at
    expiry = WorkItem.objects.extend(item, 120)
    assert expiry > before + dt.timedelta(seconds=100)
    fresh = row("k")
    assert fresh.lease_token == token and fresh.lease_expires_at == expiry


def test_a_stale_proof_gets_lease_lost_from_every_holder_write_and_changes_nothing():
    WorkItem.objects.enqueue("test.noop", "k")
    (mine,) = claim("test.noop", worker="a")
    lapse(mine)
    (theirs,) = claim("test.noop", worker="b")
    assert theirs.id == mine.id and theirs.reclaimed and theirs.attempts == 2
    assert theirs.lease_token != mine.lease_token
    before = load_item(mine.id)

    with pytest.raises(LeaseLost):
        WorkItem.objects.extend(mine, 60)
    with pytest.raises(LeaseLost):
        WorkItem.objects.complete(mine)
    with pytest.raises(LeaseLost):
        WorkItem.objects.fail(mine, "boom")
    with pytest.raises(LeaseLost):
        WorkItem.objects.requeue(mine)
    with pytest.raises(LeaseLost), transaction.atomic():
        WorkItem.objects.assert_held(mine)
    assert WorkItem.objects.release_many([mine]) == []

    after = load_item(mine.id)
    assert (after.state, after.lease_token, after.lease_expires_at, after.claimed_by, after.attempts) == (
        before.state,
        before.lease_token,
        before.lease_expires_at,
        "b",
        2,
    )
    WorkItem.objects.complete(theirs)
    assert row("k").outcome == "succeeded"


def test_batched_completion_settles_the_others_and_refuses_the_one_whose_lease_was_taken_over():
    WorkItem.objects.enqueue_many([("test.noop", f"k{i}") for i in range(5)])
    batch = claim("test.noop", worker="a")
    assert len(batch) == 5
    taken = batch[2]
    lapse(taken)
    (new,) = claim("test.noop", worker="b")
    assert new.id == taken.id and new.reclaimed

    settled, lost = WorkItem.objects.complete_many(batch)
    assert [i.id for i in lost] == [taken.id]
    assert sorted(i.id for i in settled) == sorted(i.id for i in batch if i is not taken)
    assert WorkItem.objects.succeeded().count() == 4

    # Nothing of the new holder's was overwritten, and it can still settle.
    now_row = row(taken.key)
    assert (now_row.state, now_row.outcome, now_row.lease_token, now_row.claimed_by) == (
        "active",
        None,
        new.lease_token,
        "b",
    )
    assert WorkItem.objects.extend(new, 30)
    WorkItem.objects.complete(new)
    assert WorkItem.objects.succeeded().count() == 5


def test_fail_retries_with_backoff_until_max_attempts_then_fails_with_the_last_error():
    conf = wq_settings().queue("test.record")
    assert (conf.retry_delay, conf.retry_backoff) == (10.0, 2.0)
    WorkItem.objects.enqueue("test.record", "k", max_attempts=3)
    delays = []
    for attempt in (1, 2):
        WorkItem.objects.filter(key="k").update(run_after=Now())
        (item,) = claim("test.record")
        assert item.attempts == attempt and not item.final
        assert WorkItem.objects.fail(item, f"boom {attempt}") == "retried"
        fresh = row("k")
        assert fresh.state == "queued" and fresh.lease_token is None and fresh.last_error == f"boom {attempt}"
        delays.append((fresh.run_after - db_now()).total_seconds())
    assert 9 < delays[0] <= 10 and 19 < delays[1] <= 20, delays
    WorkItem.objects.filter(key="k").update(run_after=Now())
    (item,) = claim("test.record")
    assert item.final
    assert WorkItem.objects.fail(item, "boom 3") == "failed"
    fresh = row("k")
    assert (fresh.state, fresh.outcome, fresh.last_error, fresh.attempts) == ("stopped", "failed", "boom 3", 3)


def test_permanent_failure_and_explicit_retry_delay():
    WorkItem.objects.enqueue_many([("test.record", "perm"), ("test.record", "soon")])
    perm, soon = sorted(claim("test.record"), key=lambda i: i.key)
    assert WorkItem.objects.fail(perm, "nope", permanent=True) == "failed"
    assert WorkItem.objects.fail(soon, "later", delay=0) == "retried"
    assert row("perm").outcome == "failed" and row("perm").attempts == 1
    assert [i.key for i in claim("test.record")] == ["soon"]


def test_requeue_hands_the_item_back_under_its_live_slot():
    WorkItem.objects.enqueue("test.noop", "k")
    (item,) = claim("test.noop")
    WorkItem.objects.requeue(item)
    fresh = row("k")
    assert (fresh.state, fresh.lease_token, fresh.attempts) == ("queued", None, 0)
    _again, created = WorkItem.objects.enqueue("test.noop", "k")
    assert not created
    assert [i.id for i in claim("test.noop")] == [item.id]


def test_release_refunds_the_attempt_and_keeps_run_after():
    WorkItem.objects.enqueue("test.noop", "k")
    run_after = row("k").run_after
    (item,) = claim("test.noop")
    assert WorkItem.objects.release_many([item]) == [item.id]
    fresh = row("k")
    assert (fresh.state, fresh.attempts, fresh.lease_token, fresh.run_after) == ("queued", 0, None, run_after)


def test_assert_held_locks_inside_atomic_and_refuses_outside():
    WorkItem.objects.enqueue("test.noop", "k")
    (item,) = claim("test.noop")
    with pytest.raises(transaction.TransactionManagementError):
        WorkItem.objects.assert_held(item)
    with transaction.atomic():
        WorkItem.objects.assert_held(item)
        with side_connection() as other:
            other.execute("SET lock_timeout = '200ms'")
            with pytest.raises(Exception, match="lock timeout"):
                other.execute("UPDATE work_items SET priority = 1 WHERE id = %s", [item.id])


def test_cancel_key_stops_live_items_so_a_reenqueue_in_the_same_transaction_is_new():
    WorkItem.objects.enqueue("test.noop", "k")
    WorkItem.objects.enqueue("test.other", "k")
    (held,) = claim("test.noop")
    with transaction.atomic():
        cancelled = WorkItem.objects.cancel_key("k")
        fresh, created = WorkItem.objects.enqueue("test.noop", "k")
    assert sorted(i.queue for i in cancelled) == ["test.noop", "test.other"]
    assert created and fresh.id != held.id
    assert WorkItem.objects.filter(key="k", outcome="cancelled").count() == 2
    with pytest.raises(LeaseLost):
        WorkItem.objects.complete(held)


def test_an_unknown_proof_is_refused():
    WorkItem.objects.enqueue("test.noop", "k")
    (item,) = claim("test.noop")
    item.lease_token = uuid.uuid4()
    with pytest.raises(LeaseLost):
        WorkItem.objects.complete(item)
    assert row("k").state == "active"


@pytest.mark.parametrize("keys", [[""], ["ok", ""]])
def test_an_empty_key_is_refused_so_every_unsettled_item_is_in_the_key_index(keys):
    """work_items_unsettled_keyed_idx leaves out rows whose key is '' (its predicate says key <> '',
    so that claims cannot read it): it holds every unsettled item only because no item has one."""
    with pytest.raises(InvalidInput, match="non-empty"):
        if len(keys) == 1:
            WorkItem.objects.enqueue("test.noop", keys[0])
        else:
            WorkItem.objects.enqueue_many([("test.noop", k) for k in keys])
    assert not WorkItem.objects.exists()


def test_a_renewal_skips_a_row_another_transaction_holds_and_reports_it_still_held():
    """item_extend_many: a locked row comes back with no expiry (retry soon), a renewed one with
    its new expiry, a stale proof not at all; the old and the new claim of one item apart."""
    WorkItem.objects.enqueue_many([("test.noop", k) for k in ("locked", "free", "again")])
    items = {i.key: i for i in WorkItem.objects.claim(["test.noop"], limit=3, worker_id="w").items}
    old = items["again"]
    WorkItem.objects.requeue_now([old.id])
    (new,) = WorkItem.objects.claim(["test.noop"], limit=1, worker_id="w").items
    with side_connection(autocommit=False) as side:
        side.execute("SELECT 1 FROM work_items WHERE id = %s FOR UPDATE", [items["locked"].id])
        renewed = WorkItem.objects.extend_many([items["locked"], items["free"], old, new], [60.0] * 4)
        side.rollback()
    assert set(renewed) == {(i.id, i.lease_token) for i in (items["locked"], items["free"], new)}
    assert renewed[(items["locked"].id, items["locked"].lease_token)] is None
    assert renewed[(items["free"].id, items["free"].lease_token)] is not None
    assert renewed[(new.id, new.lease_token)] is not None
