"""The service: start (atomic with the caller, idempotent by id, refusing bad input), get,
list (owner scope, keyset pages) and cancel of pending and terminal operations."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

import operations
from operations.exceptions import (
    DuplicateOperation,
    InvalidRequest,
    OperationNotFound,
    RequestTooLarge,
    RequestTypeMismatch,
    UnknownKind,
)
from operations.models import Operation
from tests.operations.conftest import items_for, op_row
from tests.testapp.kinds import TypedRequest
from tests.testapp.models import Sample
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db


def nothing_written():
    return not Operation.objects.exists() and not WorkItem.objects.exists()


def test_start_records_a_pending_operation_and_its_work_item_together():
    op = operations.start("test.ops.count", {"steps": 2}, owner=42, priority=5)
    assert op.created and op.id.startswith("op_") and op.state == "pending" and not op.done
    row = op_row(op.id)
    assert (row.kind, row.owner, row.request, row.count_label, row.max_attempts, row.attempts, row.revision) == (
        "test.ops.count",
        "42",
        {"steps": 2},
        "records",
        5,
        0,
        1,
    )
    (item,) = items_for(op.id)
    assert (item.queue, item.state, item.priority, item.attempts, item.max_attempts) == (
        "operations",
        "queued",
        5,
        0,
        5,
    )


def test_a_kind_max_attempts_is_carried_onto_the_row_and_the_item():
    op = operations.start("test.ops.fail", {})
    assert op_row(op.id).max_attempts == 3
    assert items_for(op.id).get().max_attempts == 3


def test_ids_are_unique_and_time_ordered():
    ids = [operations.start("test.ops.count", {}).id for _ in range(5)]
    assert len(set(ids)) == 5 and ids == sorted(ids)


@pytest.mark.django_db(transaction=True)
def test_start_inside_a_rolled_back_transaction_leaves_neither_operation_nor_work_item():
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        Sample.objects.create(name="caller's own write", value=1)
        op = operations.start("test.ops.count", {})
        assert Operation.objects.filter(pk=op.id).exists()
        raise Boom
    assert nothing_written()
    assert not Sample.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_start_inside_a_committed_transaction_commits_with_the_callers_writes():
    with transaction.atomic():
        Sample.objects.create(name="caller's own write", value=1)
        op = operations.start("test.ops.count", {})
    assert op_row(op.id).state == "pending" and items_for(op.id).get().state == "queued"


def test_a_duplicate_id_returns_the_first_operation_and_writes_nothing_more():
    first = operations.start("test.ops.count", {"steps": 1}, id="export-2026-10", owner="7")
    again = operations.start("test.ops.count", {"steps": 99}, id="export-2026-10", owner="7")
    assert first.created and not again.created
    assert again.id == first.id and again.request == {"steps": 1}
    assert Operation.objects.count() == 1 and WorkItem.objects.count() == 1
    with pytest.raises(DuplicateOperation) as caught:
        operations.start("test.ops.count", {}, id="export-2026-10", owner="7", raise_on_duplicate=True)
    assert caught.value.operation.id == first.id


@pytest.mark.parametrize(
    "change",
    [{"owner": "8"}, {"kind": "test.ops.tiers"}],
    ids=["another owner", "another kind"],
)
def test_a_duplicate_id_of_another_owner_or_kind_raises_and_never_returns_it(change):
    operations.start("test.ops.count", {}, id="shared-id", owner="7")
    args = {"kind": "test.ops.count", "owner": "7", **change}
    with pytest.raises(DuplicateOperation, match="already used by another operation") as caught:
        operations.start(args["kind"], {}, id="shared-id", owner=args["owner"])
    assert caught.value.operation is None
    assert Operation.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_does_not_abort_the_callers_transaction():
    operations.start("test.ops.count", {}, id="shared-id", owner="7")
    with transaction.atomic():
        with pytest.raises(DuplicateOperation):
            operations.start("test.ops.count", {}, id="shared-id", owner="8")
        again = operations.start("test.ops.count", {}, id="shared-id", owner="7")
        Sample.objects.create(name="after the duplicate", value=1)  # the transaction still works
    assert not again.created
    assert Sample.objects.filter(name="after the duplicate").exists()


@pytest.mark.parametrize(
    ("kind", "request_", "error", "match"),
    [
        ("test.ops.typed", ["x"], RequestTypeMismatch, "takes a TypedRequest request or a mapping of its fields"),
        ("test.ops.typed", {"nme": "x"}, InvalidRequest, "unknown field 'nme'"),
        ("test.ops.typed", {"name": "x", "size": "3"}, InvalidRequest, "'size' must be int, not str"),
        ("test.ops.count", {"blob": "x" * 70_000}, RequestTooLarge, "over the 65,536-byte limit"),
        ("test.ops.count", {"when": object()}, InvalidRequest, "not JSON-serialisable"),
        ("test.ops.nobody", {}, UnknownKind, "unknown operation kind 'test.ops.nobody'"),
    ],
    ids=["wrong type", "unknown field", "wrong field type", "too large", "not json", "unknown kind"],
)
def test_start_refuses_bad_requests_with_clear_errors_and_writes_nothing(kind, request_, error, match):
    with pytest.raises(error, match=match):
        operations.start(kind, request_)
    assert nothing_written()


@pytest.mark.parametrize(
    "options",
    [
        {"id": ""},
        {"id": 12},
        {"id": "x" * 201},
        {"owner": "o" * 201},
        {"priority": 2**31},
        {"priority": "high"},
        {"queue": "not served"},
        {"queue": "test.noop"},
    ],
)
def test_start_refuses_bad_options_and_writes_nothing(options):
    with pytest.raises(InvalidRequest):
        operations.start("test.ops.count", {}, **options)
    assert nothing_written()


def test_a_typed_request_round_trips():
    op = operations.start("test.ops.typed", TypedRequest(name="subject-1", size=3))
    assert op_row(op.id).request == {"name": "subject-1", "size": 3}


def test_a_typed_kind_accepts_a_mapping_of_its_fields():
    # What a shell, a cron line or a JSON body has: a dict, built into the kind's dataclass.
    op = operations.start("demo.export", {"units": 3})
    assert op_row(op.id).request == {"units": 3, "records_per_unit": 1000, "seconds_per_unit": 1.0}
    op = operations.start("test.ops.typed", {"name": "subject-1", "size": 3})
    assert op_row(op.id).request == {"name": "subject-1", "size": 3}


def test_a_delayed_start_schedules_its_item():
    op = operations.start("test.ops.count", {}, delay=3600)
    item = items_for(op.id).get()
    with connection.cursor() as cur:
        cur.execute("SELECT %s::timestamptz - now() > interval '59 minutes'", [item.run_after])
        assert cur.fetchone()[0]


def test_get_scopes_by_owner():
    op = operations.start("test.ops.count", {}, owner="7")
    assert operations.get(op.id).id == op.id
    assert operations.get(op.id, owner="7").id == op.id
    with pytest.raises(OperationNotFound):
        operations.get(op.id, owner="8")
    with pytest.raises(OperationNotFound):
        operations.get("op_missing")


def test_list_pages_newest_first_by_keyset_and_scopes_by_owner_kind_and_state():
    mine = [operations.start("test.ops.count", {}, owner="7").id for _ in range(7)]
    operations.start("test.ops.tiers", {}, owner="7")
    operations.start("test.ops.count", {}, owner="8")
    operations.cancel(mine[0])
    seen, token, pages = [], None, 0
    while True:
        page, token = operations.list_operations(owner="7", kind="test.ops.count", page_size=3, page_token=token)
        seen += [op.id for op in page]
        pages += 1
        if token is None:
            break
    assert pages == 3 and seen == list(reversed(mine))
    cancelled, token = operations.list_operations(owner="7", states=["cancelled"])
    assert [op.id for op in cancelled] == [mine[0]] and token is None
    pending, _ = operations.list_operations(owner="7", states="pending")
    assert len(pending) == 7
    everyone, _ = operations.list_operations()
    assert len(everyone) == 9


def test_list_pages_stay_correct_when_rows_share_a_created_at():
    # Everything in one transaction shares now(): the id breaks the tie.
    ids = sorted(operations.start("test.ops.count", {}, owner="7").id for _ in range(5))
    assert Operation.objects.values("created_at").distinct().count() == 1
    seen, token = [], None
    for _ in range(5):
        page, token = operations.list_operations(owner="7", page_size=2, page_token=token)
        seen += [op.id for op in page]
        if token is None:
            break
    assert seen == list(reversed(ids))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"page_size": 0}, "page_size"),
        ({"page_size": 1001}, "page_size"),
        ({"page_size": "10"}, "page_size"),
        ({"states": ["bogus"]}, "unknown state"),
        ({"page_token": "not-a-token"}, "page_token"),
    ],
)
def test_list_refuses_bad_arguments(args, match):
    with pytest.raises(InvalidRequest, match=match):
        operations.list_operations(**args)


def test_list_never_loads_the_request():
    operations.start("test.ops.count", {"secret": "s3cr3t"}, owner="7")
    with_request = Operation.objects.first()
    page, _ = operations.list_operations(owner="7")
    assert "request" in with_request.__dict__
    assert "request" not in page[0].__dict__


def test_cancel_of_a_pending_operation_cancels_it_and_stops_its_work_item():
    op = operations.start("test.ops.count", {})
    cancelled = operations.cancel(op.id)
    assert (cancelled.state, cancelled.cancel_requested, cancelled.done) == ("cancelled", True, True)
    assert cancelled.finished_at is not None and cancelled.revision == 2
    item = items_for(op.id).get()
    assert (item.state, item.outcome) == ("stopped", "cancelled")


def test_cancel_of_a_terminal_operation_returns_it_unchanged():
    op = operations.start("test.ops.count", {})
    first = operations.cancel(op.id)
    again = operations.cancel(op.id)
    assert (again.state, again.revision, again.finished_at) == ("cancelled", first.revision, first.finished_at)
    Operation.objects.filter(pk=op.id).update(state="succeeded", cancel_requested=False)
    unchanged = operations.cancel(op.id)
    assert (unchanged.state, unchanged.cancel_requested) == ("succeeded", False)


def test_cancel_is_owner_scoped_and_a_missing_id_is_not_found():
    op = operations.start("test.ops.count", {}, owner="7")
    with pytest.raises(OperationNotFound):
        operations.cancel(op.id, owner="8")
    assert op_row(op.id).state == "pending"
    with pytest.raises(OperationNotFound):
        operations.cancel("op_missing")


@pytest.mark.django_db(transaction=True)
def test_cancel_of_a_missing_id_does_not_abort_the_callers_transaction():
    with transaction.atomic():
        with pytest.raises(OperationNotFound):
            operations.cancel("op_missing")
        Sample.objects.create(name="after", value=1)
    assert Sample.objects.filter(name="after").exists()


@pytest.mark.django_db(transaction=True)
def test_start_works_from_manage_py_shell(run_command):
    code = (
        "import operations; "
        "op = operations.start('test.ops.count', {'steps': 1}, owner='shell'); "
        "print('started', op.id, op.state)"
    )
    done = run_command("shell", "-c", code)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("started ")]
    _, op_id, state = line.split()
    assert state == "pending"
    assert op_row(op_id).owner == "shell"
    assert items_for(op_id).get().state == "queued"


def test_start_passes_the_group_to_its_work_item_and_refuses_a_bad_one():
    op = operations.start("test.ops.count", {"steps": 1}, group="tenant-42")
    assert items_for(op.id).get().group_key == "tenant-42"
    plain = operations.start("test.ops.count", {"steps": 1})
    assert items_for(plain.id).get().group_key is None
    before = (Operation.objects.count(), WorkItem.objects.count())
    for bad in ("", "x" * 201, 7):
        with pytest.raises(InvalidRequest, match="group"):
            operations.start("test.ops.count", {"steps": 1}, group=bad)
    assert (Operation.objects.count(), WorkItem.objects.count()) == before
