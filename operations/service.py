"""Start, read, list and cancel operations; recover stranded ones and reap old ones.

``start`` writes the operation row and its work item in one transaction, joining the
caller's ``transaction.atomic()`` when there is one: the operation is durable and enqueued
the moment ``start`` returns, and neither exists if the caller's transaction rolls back.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
from collections.abc import Iterator

from django.db import DEFAULT_DB_ALIAS, transaction

from operations import arguments, batches, deps, store
from operations.conf import ops_settings
from operations.exceptions import DuplicateOperation, InvalidRequest, OperationNotFound, UnknownDependency
from operations.ids import check_id, new_id
from operations.models import TERMINAL_STATES, Operation, State
from operations.registry import registry
from workqueue.conf import wq_settings
from workqueue.managers import _aware, _current_trace
from workqueue.models import WorkItem

MAX_PAGE_SIZE = 1000


def start(
    kind: str,
    request=None,
    *,
    id: str | None = None,
    owner: str | None = None,
    delay: float | dt.timedelta | None = None,
    run_after: dt.datetime | None = None,
    priority: int = 0,
    queue: str | None = None,
    max_attempts: int | None = None,
    raise_on_duplicate: bool = False,
    group: str | None = None,
    after=None,
    using: str = DEFAULT_DB_ALIAS,
) -> Operation:
    """Record a pending operation of ``kind`` and enqueue it; return it (``.created`` tells).

    One statement writes the operation and its work item, inside the caller's
    ``transaction.atomic()`` when there is one.

    With ``id=``, a second start with the same id returns the existing operation (or raises
    ``DuplicateOperation`` when ``raise_on_duplicate``); one owned by somebody else, or of
    another kind, always raises ``DuplicateOperation``.

    ``group`` (e.g. a tenant id) is stored on the work item, for the queue's
    ``max_running_per_group`` and ``rate_per_group`` (see the README's "Flow control").

    ``after=[op_a.id, op_b.id]`` (ids of existing operations, or the operations; an empty list
    is none): the operation waits, pending with no work item, until every one of them
    succeeded, and is enqueued in the transaction that ends the last (operations.deps).
    If one fails or is cancelled it ends ``failed`` with code ``dependency_failed``; if one
    already has when this is called, it is recorded ``failed`` ``dependency_failed`` at once
    (returned so, ``created`` true, never run). An unknown id raises ``UnknownDependency`` (an
    ``InvalidRequest``) and writes nothing. ``delay``, ``run_after`` and ``group`` cannot be
    combined with dependencies.
    """
    definition, payload = check_request(kind, request)
    conf = ops_settings()
    queue = arguments.queue(queue)
    op_id = check_id(id) if id is not None else new_id()
    owner = arguments.owner(owner)
    priority = arguments.priority(priority)
    max_attempts = arguments.max_attempts(max_attempts) or definition.max_attempts or conf.max_attempts
    group = arguments.group(group)
    after_ids = deps.check_after(after, using=using)
    # What both statements write: the operation, its work item's queue and priority.
    row = {
        "id": op_id,
        "kind": kind,
        "owner": owner,
        "queue": queue,
        "priority": priority,
        "request": payload,
        "count_label": definition.count_label,
        "max_attempts": max_attempts,
        "queue_channel": wq_settings().notify_channel,
        "trace_context": _current_trace(),
        "workflow": definition.workflow,
    }
    if after_ids:
        if delay is not None or run_after is not None or group is not None:
            raise InvalidRequest(
                "delay, run_after and group cannot be combined with after=: a dependent is enqueued when its "
                "last dependency succeeds; start it without them"
            )
        op = store.start_after(**row, after=after_ids, using=using)
        return _started(op, op_id, kind, owner, raise_on_duplicate, after_ids, using)
    op = store.start(**row, delay=arguments.delay(delay), run_after=_aware(run_after), group=group, using=using)
    return _started(op, op_id, kind, owner, raise_on_duplicate, [], using)


def _started(
    op: Operation | None, op_id: str, kind: str, owner: str, raise_on_duplicate: bool, after: list[str], using: str
) -> Operation:
    """What ``start`` returns once its statement ran: the new operation, or the existing one."""
    if op is not None:
        op.created = True
        return op
    # A duplicate wrote nothing (and left the caller's transaction usable).
    existing = Operation.objects.using(using).filter(pk=op_id).first()
    if existing is None:  # not a duplicate: a dependency went (reaped) after it was checked
        deps.check_after(after, using=using)
        raise UnknownDependency(after)
    if existing.owner != owner or existing.kind != kind:
        raise DuplicateOperation(
            f"operation id {op_id!r} is already used by another operation; choose another id",
        )
    if raise_on_duplicate:
        raise DuplicateOperation(f"operation {op_id!r} already exists", operation=existing)
    existing.created = False
    return existing


def check_request(kind: str, request=None):
    """The checks ``start`` makes on what it is asked to run, and nothing else: the kind is
    registered and the request fits its type (a mapping of a dataclass's fields is built and
    type-checked), is JSON and within the size limit. Returns (definition, stored form);
    raises ``UnknownKind`` / ``InvalidRequest``. Schedules call it when they are saved."""
    definition = registry.get(kind)
    return definition, definition.encode(request)


def get(op_id: str, *, owner: str | None = None, using: str = DEFAULT_DB_ALIAS) -> Operation:
    """Read one operation (scoped to ``owner`` when given); raise OperationNotFound."""
    qs = Operation.objects.using(using).filter(pk=op_id)
    if owner is not None:
        qs = qs.filter(owner=owner)
    op = qs.first()
    if op is None:
        raise OperationNotFound(f"operation {op_id!r} not found")
    return op


def _encode_token(op: Operation) -> str:
    raw = json.dumps([op.created_at.isoformat(), op.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str) -> tuple[dt.datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        created, op_id = json.loads(raw)
        return dt.datetime.fromisoformat(created), check_id(op_id)
    except Exception:
        raise InvalidRequest("page_token is not one this server handed out")


def list_operations(
    *,
    owner: str | None = None,
    kind: str | None = None,
    states=None,
    page_size: int = 50,
    page_token: str | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> tuple[list[Operation], str | None]:
    """List operations newest first; return (page, next_page_token or None)."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidRequest(f"page_size must be an integer from 1 to {MAX_PAGE_SIZE}")
    qs = Operation.objects.using(using).defer("request", "attempt_log").order_by("-created_at", "-id")
    if owner is not None:
        qs = qs.filter(owner=owner)
    if kind:
        qs = qs.filter(kind=kind)
    if states:
        states = [states] if isinstance(states, str) else [str(s) for s in states]
        bad = [s for s in states if s not in State.values]
        if bad:
            raise InvalidRequest(f"unknown state(s) {', '.join(bad)}; use {', '.join(State.values)}")
        qs = qs.filter(state__in=states)
    if page_token:
        created, op_id = _decode_token(page_token)
        from django.db.models import Q

        qs = qs.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=op_id))
    page = [*qs[: page_size + 1]]
    more = len(page) > page_size
    page = page[:page_size]
    return page, (_encode_token(page[-1]) if more and page else None)


def cancel(op_id: str, *, owner: str | None = None, using: str = DEFAULT_DB_ALIAS) -> Operation:
    """Ask an operation to stop and return it as it stands.

    Pending: cancelled outright (its work item too). Running: the flag is set and the run
    decides (a run that never looks finishes, and succeeds); if its runner died, the next
    worker's begin ends it cancelled without running it. Terminal: returned unchanged.
    """
    if batches.is_parent(op_id, using=using):
        return batches.cancel(op_id, owner=owner, using=using)
    with transaction.atomic(using=using, savepoint=False):
        op = store.cancel(op_id, owner=owner, using=using)
        if op is not None:
            if op.state == State.CANCELLED:
                # A dependent still waiting has no work item: cancel_key then stops nothing.
                WorkItem.objects.db_manager(using).cancel_key(op.id, queue=op.queue)
                deps.ended([op], using=using)
            if op.workflow:
                for child in child_ids(op.id, using=using):  # what it started goes with it
                    cancel(child, using=using)
            return op
    # Outside the block, so a missing id does not mark the caller's transaction for rollback.
    return get(op_id, owner=owner, using=using)


def child_ids(op_id: str, *, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """The operations workflow ``op_id`` started with ``wf.start`` (cancelled with it)."""
    from operations.models import OperationStep

    rows = OperationStep.objects.using(using).filter(op_id=op_id, kind="child").values_list("result", flat=True)
    return [result["id"] for result in rows if result]


class _DryRun(Exception):
    """Unwinds a dry run's savepoint once its counts are in."""


@contextlib.contextmanager
def _maybe_dry(dry_run: bool, using: str) -> Iterator[None]:
    """A dry run's writes happen (so its counts are real) in a savepoint that is rolled back."""
    if not dry_run:
        yield
        return
    try:
        with transaction.atomic(using=using):
            yield
            raise _DryRun
    except _DryRun:
        pass


def recover(*, using: str = DEFAULT_DB_ALIAS, now=None, dry_run: bool = False) -> dict[str, int]:
    """Re-offer stranded operations (pending with no live work item, or lapsed with none).

    ``dry_run`` counts them and changes nothing (its writes are rolled back)."""
    conf = ops_settings()
    offered = 0
    with _maybe_dry(dry_run, using), transaction.atomic(using=using, savepoint=False):
        rows = store.stranded(after=conf.recover_after, limit=conf.recover_batch, now=now, using=using)
        for op_id, queue, attempts, max_attempts, priority in rows:
            _item, created = WorkItem.objects.db_manager(using).enqueue(
                queue, op_id, priority=priority, attempts=attempts, max_attempts=max_attempts
            )
            offered += int(created)
    return {"reoffered": offered}


def reap(*, using: str = DEFAULT_DB_ALIAS, now=None, dry_run: bool = False) -> dict[str, int]:
    """Delete terminal operations finished longer than the retention ago (one batch).

    ``dry_run`` counts them and deletes nothing."""
    conf = ops_settings()
    with _maybe_dry(dry_run, using):
        deleted = store.reap(retention=conf.retention, limit=conf.reap_batch, now=now, using=using)
        store.watch_reap(now=now, using=using)
    return {"deleted": deleted}


def is_terminal(state: str) -> bool:
    return state in TERMINAL_STATES
