"""What the README and docs/performance.md promise about the queue, each proven (see docs/promises.md)."""

from __future__ import annotations

import datetime as dt
import re
import signal
import threading
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.db.models.functions import Now
from django.test import Client, override_settings
from prometheus_client import CollectorRegistry, generate_latest

from tests.conftest import wait_until
from tests.testapp.models import Sample
from tests.workqueue.conftest import row
from workqueue import Permanent, Retry, handlers, metrics, sql
from workqueue.checks import check_maintenance
from workqueue.environments import create_environment
from workqueue.listener import Listener, connection_kwargs
from workqueue.models import ApiKey, MaintenanceRun, Worker, WorkItem
from workqueue.sweeps import reap as reaper
from workqueue.sweeps import recover as recovery
from workqueue.testing import database_url
from workqueue.wire import keys
from workqueue.worker import Worker as ClaimLoop
from workqueue.worker import WorkerOptions

pytestmark = pytest.mark.django_db(transaction=True)


def db_now() -> dt.datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        return cur.fetchone()[0]


def with_queues(**queues) -> dict:
    """The test settings' WORKQUEUE with some queues added (or changed)."""
    from django.conf import settings

    base = settings.WORKQUEUE
    return {**base, "QUEUES": {**base["QUEUES"], **queues}}


# -- the first handler example: Retry(delay=...), Permanent, ctx.requeue() ------------------

RUNS: list[tuple[str, int]] = []


def retry_later(item, ctx):
    RUNS.append((item.key, ctx.attempt))
    raise Retry(delay=60)


def give_up(item, ctx):
    RUNS.append((item.key, ctx.attempt))
    raise Permanent("the address bounced")


def follow_on(item, ctx):
    """The README's merge-then-requeue: a request that arrives mid-run is seen by a second run."""
    RUNS.append((item.key, ctx.attempt))
    if sum(1 for key, _ in RUNS if key == item.key) == 1:
        _same, created = WorkItem.objects.enqueue(item.queue, item.key)
        assert not created  # merged into the running item
        ctx.requeue()


@pytest.fixture
def claim_loop():
    """Run a real claim loop (a Worker on its own thread) over the README example's queues."""
    RUNS.clear()
    for queue, fn in (("promise.retry", retry_later), ("promise.permanent", give_up), ("promise.requeue", follow_on)):
        handlers.register(queue, fn)
    loop = ClaimLoop(
        WorkerOptions(
            queues=["promise.retry", "promise.permanent", "promise.requeue"],
            poll=0.2,
            worker_id="promises",
            install_signals=False,
        )
    )

    def run():
        try:
            loop.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="promise-claim-loop", daemon=True)
    thread.start()
    yield loop
    loop.request_stop()
    thread.join(30)
    for queue in ("promise.retry", "promise.permanent", "promise.requeue"):
        handlers.unregister(queue)
    assert not thread.is_alive()


def test_retry_with_a_delay_permanent_and_requeue_from_the_first_handler_example(claim_loop):
    WorkItem.objects.enqueue("promise.retry", "later")
    WorkItem.objects.enqueue("promise.permanent", "bounced")
    WorkItem.objects.enqueue("promise.requeue", "merged")
    wait_until(lambda: claim_loop.processed >= 4, timeout=30, message="the three items' runs")

    later = row("later")
    assert (later.state, later.attempts, later.last_error) == ("queued", 1, "retry requested")
    # Retry(delay=60): back in the queue, not before 60 s from the failure by the database's clock.
    assert dt.timedelta(seconds=50) < later.run_after - db_now() <= dt.timedelta(seconds=60)

    bounced = row("bounced")
    assert (bounced.state, bounced.outcome, bounced.attempts) == ("stopped", "failed", 1)
    assert bounced.last_error == "Permanent: the address bounced"

    merged = row("merged")
    assert (merged.state, merged.outcome) == ("stopped", "succeeded")
    assert [key for key, _ in RUNS if key == "merged"] == ["merged", "merged"]
    assert RUNS.count(("later", 1)) == 1 and RUNS.count(("bounced", 1)) == 1


# -- retry backoff ----------------------------------------------------------------------------


def test_retry_delay_grows_by_retry_backoff_and_is_capped_by_max_retry_delay():
    queue = {"retry_delay": 10, "retry_backoff": 3, "max_retry_delay": 50, "max_attempts": 6}
    with override_settings(WORKQUEUE=with_queues(**{"promise.backoff": queue})):
        WorkItem.objects.enqueue("promise.backoff", "k")
        delays = []
        for attempt in range(1, 5):
            WorkItem.objects.filter(key="k").update(run_after=Now())
            (item,) = WorkItem.objects.claim(["promise.backoff"], limit=1, worker_id="w").items
            assert item.attempts == attempt
            assert WorkItem.objects.fail(item, "boom") == "retried"
            delays.append((row("k").run_after - db_now()).total_seconds())
    # 10 × 3^(attempt-1): 10, 30, then 90 and 270 capped at 50.
    expected = [10, 30, 50, 50]
    assert all(want - 5 < got <= want for got, want in zip(delays, expected, strict=True)), delays


# -- runworker with no --queue ------------------------------------------------------------------


def test_runworker_without_queue_serves_every_queue_with_a_handler(start_ready_worker):
    proc = start_ready_worker("everything")
    assert Worker.objects.get(pk="everything").queues == handlers.queues()
    WorkItem.objects.enqueue_many([("test.noop", "a"), ("test.other", "b"), ("test.record", "c")])
    wait_until(lambda: WorkItem.objects.succeeded().count() == 3, timeout=30, message="items on three queues")
    assert set(WorkItem.objects.values_list("claimed_by", flat=True)) == {"everything"}
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()[-3000:]


# -- SHUTDOWN_GRACE -----------------------------------------------------------------------------


def test_shutdown_grace_setting_applies_when_no_grace_option_is_given(start_ready_worker):
    from workqueue.conf import wq_settings

    grace = wq_settings().shutdown_grace
    assert grace == 5.0  # tests/settings.py: not the default (30 s) and not a --grace
    proc = start_ready_worker("graceful-default", "--queue", "test.short")
    WorkItem.objects.enqueue("test.short", "long", metadata={"seconds": "120"})
    wait_until(lambda: Sample.objects.filter(name="started:long").exists(), timeout=20, message="the item to start")
    signalled = time.monotonic()
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0, proc.output()[-3000:]
    assert time.monotonic() - signalled >= grace
    out = proc.output()
    assert "SIGTERM received: finishing running items (grace 5s)" in out, out[-3000:]
    assert "grace period over: releasing 1 running item" in out
    assert row("long").state == "queued"


# -- LISTEN_DATABASE_URL, PREPARED_STATEMENTS -----------------------------------------------------


def test_listen_database_url_is_the_connection_the_listener_uses():
    url = database_url()
    url += ("&" if "?" in url else "?") + "application_name=wq-listen-promise"
    heard: list[str | None] = []
    with override_settings(WORKQUEUE={**with_queues(), "LISTEN_DATABASE_URL": url}):
        assert connection_kwargs() == {"conninfo": url}
        listener = Listener(name="promise-listener")
        listener.subscribe("promise_channel", heard.append)
        try:
            assert listener.wait_connected(10)

            def listening() -> bool:
                with connection.cursor() as cur:
                    cur.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'wq-listen-promise' "
                        "AND query LIKE 'LISTEN%%'"
                    )
                    return cur.fetchone()[0] == 1

            wait_until(listening, timeout=10, message="the LISTEN on the configured connection")
            with connection.cursor() as cur:
                cur.execute("SELECT pg_notify('promise_channel', 'hello')")
            wait_until(lambda: heard == ["hello"], timeout=10, message="the notification")
        finally:
            listener.stop()


@pytest.mark.parametrize("prepared", [True, False])
def test_prepared_statements_setting_decides_whether_the_hot_statements_are_prepared(prepared):
    counts = []

    def on_a_fresh_connection():
        try:
            WorkItem.objects.enqueue("test.noop", "k")
            WorkItem.objects.claim(["test.noop"], limit=1, worker_id="w")
            with connection.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_prepared_statements")
                counts.append(cur.fetchone()[0])
        finally:
            connections.close_all()

    with override_settings(WORKQUEUE={**with_queues(), "PREPARED_STATEMENTS": prepared}):
        thread = threading.Thread(target=on_a_fresh_connection)
        thread.start()
        thread.join(30)
    assert len(counts) == 1
    assert (counts[0] > 0) is prepared, counts


# -- the sweeps' settings ---------------------------------------------------------------------------


def stopped_long_ago(queue: str, key: str, minutes: float) -> None:
    WorkItem.objects.enqueue(queue, key)
    WorkItem.objects.filter(queue=queue, key=key).update(
        state="stopped", outcome="succeeded", stopped_at=Now() - dt.timedelta(minutes=minutes)
    )


def test_reap_deletes_stopped_items_by_their_own_queue_retention():
    with override_settings(WORKQUEUE=with_queues(**{"promise.brief": {"retention": 60}})):
        stopped_long_ago("promise.brief", "old", 2)
        stopped_long_ago("promise.brief", "young", 0.5)
        stopped_long_ago("test.noop", "old", 2)  # the default retention: 7 days
        assert reaper.delete_stopped() == 1
    assert sorted(WorkItem.objects.values_list("queue", "key")) == [("promise.brief", "young"), ("test.noop", "old")]


def test_reap_batch_and_recover_batch_bound_each_sweep():
    for i in range(3):
        stopped_long_ago("promise.brief", f"old-{i}", 60 * 24 * 8)
        WorkItem.objects.enqueue("test.noop", f"winding-{i}")
    WorkItem.objects.filter(key__startswith="winding-").update(
        state="stopping",
        lease_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at=Now() - dt.timedelta(seconds=5),
    )
    with override_settings(WORKQUEUE={**with_queues(), "REAP_BATCH": 2, "RECOVER_BATCH": 2}):
        assert [reaper.delete_stopped(), reaper.delete_stopped()] == [2, 1]
        assert [recovery.finalize_stopping(), recovery.finalize_stopping()] == [2, 1]
    assert not WorkItem.objects.filter(state="stopping").exists()


def test_stuck_after_decides_when_a_queued_item_counts_as_stuck():
    WorkItem.objects.enqueue("test.noop", "late")
    WorkItem.objects.filter(key="late").update(run_after=Now() - dt.timedelta(minutes=2))
    assert not WorkItem.objects.stuck().exists()  # the default: 300 s
    with override_settings(WORKQUEUE={**with_queues(), "STUCK_AFTER": 60}):
        assert list(WorkItem.objects.stuck().values_list("key", flat=True)) == ["late"]


def test_maintenance_warn_after_decides_when_the_check_warns():
    Worker.objects.create(id="w", host="h", pid=1, queues=["test.noop"])
    MaintenanceRun.objects.create(name="reap", host="h", started_at=db_now() - dt.timedelta(minutes=2), ok=True)
    assert check_maintenance(databases=["default"]) == []  # the default: 600 s
    with override_settings(WORKQUEUE={**with_queues(), "MAINTENANCE_WARN_AFTER": 60}):
        (warning,) = check_maintenance(databases=["default"])
    assert warning.id == "workqueue.W001" and "in the last 1 minutes" in warning.msg


# -- operator commands, metrics ----------------------------------------------------------------------


def test_apikeys_create_list_and_revoke_and_a_revoked_key_is_refused():
    env, _env_key = create_environment("promise-env", "self_hosted")
    out = StringIO()
    call_command("apikeys", "create", "ci", stdout=out)
    key = re.search(r"created API key 'ci': (\S+)", out.getvalue()).group(1)
    assert key.startswith(keys.API_KEY_PREFIX)
    stored = ApiKey.objects.get(name="ci")
    assert stored.key_hash == keys.digest(key) and key not in (stored.key_hash, stored.key_hint)

    stats = f"/v1/environments/{env.id}/work/stats"
    client = Client()
    assert client.get(stats, headers={"authorization": f"Bearer {key}"}).status_code == 200

    listing = StringIO()
    call_command("apikeys", "list", stdout=listing)
    line = listing.getvalue().strip()
    assert line == f"ci  {stored.key_hint}…  active  all environments" and key not in listing.getvalue()

    call_command("apikeys", "revoke", "ci", stdout=StringIO())
    listing = StringIO()
    call_command("apikeys", "list", stdout=listing)
    assert listing.getvalue().strip() == f"ci  {stored.key_hint}…  revoked  all environments"
    assert client.get(stats, headers={"authorization": f"Bearer {key}"}).status_code == 401
    with pytest.raises(CommandError, match="no API key named 'nobody'"):
        call_command("apikeys", "revoke", "nobody")


def test_metrics_register_adds_the_queue_gauges_to_a_registry_of_yours():
    mine = CollectorRegistry()
    metrics.register(mine)
    WorkItem.objects.enqueue_many([("test.noop", "a"), ("test.noop", "b")])
    text = generate_latest(mine).decode()
    assert 'workqueue_queue_depth{queue="test.noop"} 2.0' in text


# -- docs/performance.md: what the catalog can show ------------------------------------------------------


def index_definitions(table: str) -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return [r[0] for r in cur.fetchall()]


def test_no_index_covers_the_lease_column_so_renewals_are_hot_updates():
    definitions = index_definitions("work_items")
    assert len(definitions) > 3
    assert [d for d in definitions if "lease_expires_at" in d] == []


def test_operations_indexes_leave_the_progress_columns_out():
    from operations.models import Operation

    definitions = index_definitions(Operation._meta.db_table)
    assert len(definitions) > 2
    flushed = ("units_total", "units_done", "unit", "message", "count", "claimed_until", "revision", "updated_at")
    assert [d for d in definitions for c in flushed if re.search(rf"\b{c}\b", d)] == []


def test_work_items_has_fillfactor_80_and_no_pattern_ops_twins():
    with connection.cursor() as cur:
        cur.execute("SELECT reloptions FROM pg_class WHERE relname = 'work_items'")
        (options,) = cur.fetchone()
    assert "fillfactor=80" in options
    definitions = index_definitions("work_items")
    # No twin: Django's implicit <index>_like copies are dropped. The one pattern_ops index is
    # the stopped keys' own (it answers = and the admin's prefix search), with no plain twin.
    assert [d for d in definitions if "_like " in d] == []
    assert [d.split()[2] for d in definitions if "pattern_ops" in d] == ["work_items_stopped_key_idx"]
    assert [d for d in definitions if "(key)" in d and "'stopped'" in d] == []


def test_synchronous_commit_is_turned_off_only_inside_the_soft_transition_statements():
    from operations.store import QUERIES as OPERATION_QUERIES

    relaxed = set()
    for statements in (sql.QUERIES, OPERATION_QUERIES):
        for name in statements.names():
            text = statements[name]
            if "synchronous_commit" in text:
                relaxed.add(name)
                # Only when the caller asks, and only for the statement's own transaction.
                assert "%(relaxed)s::bool" in text and "'off', true)" in text, name
    assert relaxed == {
        "item_claim",
        "item_claim_capped",
        "item_claim_flow",
        "item_claim_one",
        "item_extend_many",
        "op_begin",
        "op_flush",
        "wire_record_poll",
    }
