"""The Reporter: buffered progress, one-statement flushes, lost holds, never raising."""

from __future__ import annotations

import logging

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import operations
from operations import store
from operations.models import Progress
from operations.reporter import MAX_MESSAGE
from tests.operations.conftest import begin, claim_one, op_row, reporter_for
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db


def running(kind: str = "test.ops.count"):
    op = operations.start(kind, {})
    item, began = begin(op.id)
    return item, began, reporter_for(item, began)


def test_a_flush_is_exactly_one_statement_and_writes_progress_lease_and_revision():
    item, began, reporter = running()
    reporter.set_units(4)
    reporter.start_unit("alpha")
    reporter.advance(250)
    reporter.say("halfway through %s", "alpha")
    before = op_row(began.id)
    with CaptureQueriesContext(connection) as queries:
        ack = reporter.flush()
    assert len(queries.captured_queries) == 1, queries.captured_queries
    assert ack.held and not ack.cancel_requested
    after = op_row(began.id)
    assert ack.revision == after.revision == before.revision + 1
    assert (after.units_total, after.units_done, after.unit, after.count, after.message) == (
        4,
        0,
        "alpha",
        250,
        "halfway through alpha",
    )
    # The one statement pushed out both halves of the one lease: the row's and the item's.
    assert after.claimed_until >= before.claimed_until
    work = WorkItem.objects.get(pk=item.id)
    assert work.lease_expires_at == after.claimed_until


def test_a_million_advances_cost_no_statements_beyond_the_flush():
    _item, began, reporter = running()
    with CaptureQueriesContext(connection) as queries:
        for _ in range(1_000_000):
            reporter.advance(1)
    assert queries.captured_queries == []
    with CaptureQueriesContext(connection) as queries:
        reporter.flush()
        reporter.flush()  # nothing changed: still one statement each, never a second kind
    assert len(queries.captured_queries) == 2
    assert op_row(began.id).count == 1_000_000


def test_negative_advances_are_ignored_and_the_count_never_resets_at_unit_boundaries():
    _item, began, reporter = running("test.ops.tiers")
    reporter.set_units(2)
    reporter.start_unit("one")
    reporter.advance(10)
    reporter.advance(-7)
    reporter.advance(0)
    reporter.finish_unit()
    reporter.flush()
    assert op_row(began.id).count == 10
    reporter.start_unit("two")
    reporter.advance(5)
    reporter.finish_unit()
    reporter.flush()
    row = op_row(began.id)
    assert (row.count, row.units_done, row.unit) == (15, 2, "")


def test_fraction_is_none_without_a_declared_total_never_zero_or_one():
    no_total = Progress(units_total=None, units_done=0, unit="", message="", count_label="records", count=4300)
    assert no_total.fraction() is None
    assert no_total.describe() == "4,300 records"
    nothing_yet = Progress(units_total=None, units_done=0, unit="", message="", count_label="", count=0)
    assert nothing_yet.fraction() is None
    three_of_nine = Progress(units_total=9, units_done=3, unit="x", message="", count_label="domains", count=0)
    assert three_of_nine.fraction() == pytest.approx(1 / 3)
    assert three_of_nine.describe() == "3 of 9"
    assert Progress(units_total=9, units_done=0, unit="", message="", count_label="", count=0).fraction() == 0.0


def test_a_running_operation_without_units_reads_fraction_none():
    _item, began, reporter = running()
    reporter.advance(4300)
    reporter.flush()
    progress = op_row(began.id).progress
    assert progress.units_total is None and progress.fraction() is None
    assert progress.describe() == "4,300 records"


def test_say_truncates_to_1024_characters_and_never_raises_on_a_bad_format():
    _item, began, reporter = running()
    reporter.say("x" * 5000)
    reporter.flush()
    message = op_row(began.id).message
    assert len(message) == MAX_MESSAGE == 1024 and message.startswith("xxx")
    reporter.say("%d of %d", "not a number")  # a wrong format is rendered, not raised
    reporter.flush()
    assert "not a number" in op_row(began.id).message


def test_a_flush_after_a_takeover_returns_held_false_and_cancels_the_run():
    item, began, reporter = running()
    reporter.advance(5)
    assert reporter.flush().held
    # The lease lapses and another worker takes the operation over (a new proof).
    WorkItem.objects.filter(pk=item.id).update(lease_expires_at="2000-01-01T00:00:00Z")
    type(began).objects.filter(pk=began.id).update(claimed_until="2000-01-01T00:00:00Z")
    heir_item, heir = begin(began.id, worker_id="heir")
    assert heir_item.id == item.id and heir.attempts == 2
    reporter.advance(1000)
    ack = reporter.flush()
    assert ack is not None and not ack.held
    assert reporter.cancelled.is_set() and not reporter.held
    # Told to stop, but not cancelled: nobody asked for the work to be undone.
    assert reporter.stop_reason == "lease_lost" and not reporter.is_cancelled()
    # The stale holder wrote nothing, and it stops trying: no statement at all from now on.
    assert op_row(began.id).count == 5
    with CaptureQueriesContext(connection) as queries:
        assert reporter.flush() is None
    assert queries.captured_queries == []


def test_a_requested_cancellation_arrives_on_the_next_flush():
    _item, began, reporter = running()
    operations.cancel(began.id)
    assert not reporter.is_cancelled()  # nothing asks the database between flushes
    reporter.advance(1)
    ack = reporter.flush()
    assert ack.held and ack.cancel_requested
    assert reporter.is_cancelled() and reporter.cancelled.observed


def test_is_cancelled_never_blocks_and_records_whether_the_run_looked():
    _item, _began, reporter = running()
    assert reporter.is_cancelled() is False
    assert not reporter.cancelled.observed  # it looked, but nothing was set
    reporter.signal_stop("cancel_requested")
    assert not reporter.cancelled.observed
    assert reporter.is_cancelled() is True
    assert reporter.cancelled.observed


def test_a_closed_reporter_flushes_nothing():
    _item, _began, reporter = running()
    reporter.advance(3)
    reporter.close()
    with CaptureQueriesContext(connection) as queries:
        assert reporter.flush() is None
    assert queries.captured_queries == []


@pytest.mark.django_db(transaction=True)
def test_a_unit_boundary_flushes_at_once_unless_a_flush_just_went_out_or_the_run_is_in_a_transaction():
    from django.db import transaction

    _item, began, reporter = running("test.ops.tiers")
    reporter.last_flush -= 1  # a quiet second since the last flush
    with CaptureQueriesContext(connection) as queries:
        reporter.start_unit("outside")
    assert len(queries.captured_queries) == 1 and not reporter.due
    assert op_row(began.id).unit == "outside"
    # Hard on the heels of that flush, the next boundary is left to the flusher thread.
    with CaptureQueriesContext(connection) as queries:
        reporter.finish_unit()
        reporter.start_unit("next")
    assert queries.captured_queries == [] and reporter.due
    reporter.flush()  # what the flusher thread does within a tick: both boundaries in one
    row = op_row(began.id)
    assert not reporter.due and (row.unit, row.units_done) == ("next", 1)
    reporter.last_flush -= 1
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        reporter.finish_unit()  # the run's own transaction: the flush must not join it
    assert queries.captured_queries == [] and reporter.due
    row = op_row(began.id)
    assert (row.unit, row.units_done) == ("next", 1)
    reporter.flush()
    assert not reporter.due and op_row(began.id).units_done == 2


@pytest.mark.django_db(transaction=True)
def test_flush_errors_are_logged_and_counted_never_raised(caplog):
    _item, began, reporter = running()
    reporter.advance(2**62)
    reporter.advance(2**62)  # past bigint: the database refuses the statement
    with caplog.at_level(logging.WARNING, logger="operations.reporter"):
        assert reporter.flush() is None
        reporter.last_flush -= 1
        reporter.start_unit("still fine")  # a unit boundary flush fails too, silently
    assert reporter.flush_errors == 2
    assert "progress flush of" in caplog.text and "out of range" in caplog.text
    assert reporter.held and not reporter.is_cancelled()
    # The connection is usable again and the next good flush lands.
    reporter._count = 7
    ack = reporter.flush()
    assert ack is not None and ack.held
    assert op_row(began.id).count == 7


def test_begin_is_refused_while_another_worker_holds_the_lease():
    item, began, _reporter = running()
    rows = store.run(
        "op_begin", {"id": began.id, "item_id": item.id, "token": item.lease_token, "lease": 3, "worker_id": "x"}
    )
    assert rows == []
    assert claim_one("other") is None  # the item is held under the same lease
