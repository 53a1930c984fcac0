"""Dependencies: ``operations.start(kind, request, after=[op_a.id, op_b.id])``.

An operation started ``after`` others waits, pending and not claimable (it has no work item),
until every one of them succeeded; its work item is written in the transaction that ends the
last of them. When one fails or is cancelled, the dependent ends ``failed`` with error code
``dependency_failed`` (its message names the dependency and how it ended), and so, in the same
transaction, do the operations that depend on it, and theirs. A dependency that already ended
when the dependent starts is counted at once: succeeded, it is not waited for; failed or
cancelled, the dependent is recorded ``failed`` ``dependency_failed`` by ``start`` itself. A
cycle cannot be made: the dependencies must exist when the dependent starts.

The one hook: every write that ends an operation (the runner's finish, a cancel, a queue
rule's settlement, an attempt that could not begin, a batch or chain settled by its fan-in) is
followed, in the same transaction, by ``ended(...)``, which runs the batches' fan-in
(``op_fan_in``) and the dependency decision (``op_deps_settle``). Each edge is counted once
(its ``decided`` flag is set by the statement that counts it), so a dependent's work item is
written once. The runner skips both statements for an operation with no parent and no
dependents (the hot path stays one statement); one that gained a dependent while it ran
(``has_dependents`` on the row its end returned) is decided right after, in a second
transaction, and ``recover`` decides any end whose decision was lost between the two.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import DEFAULT_DB_ALIAS, transaction

from operations import store
from operations.conf import ops_settings
from operations.exceptions import InvalidRequest, OperationNotFound, UnknownDependency
from operations.ids import check_id
from operations.models import TERMINAL_STATES, Operation, OperationDependency
from workqueue.conf import wq_settings

__all__ = ["check_after", "dependencies", "dependents", "ended", "recover"]

#: An operation may wait for at most this many others (one statement locks them all).
MAX_DEPENDENCIES = 1000


def check_after(after: object, *, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """``after=`` as ``start`` writes it: distinct ids (order kept, duplicates collapsed), each
    of an operation that exists in ``using``; ``[]`` for none. Raises ``InvalidRequest`` (an
    unknown id: ``UnknownDependency``) before anything is written."""
    if after is None:
        return []
    if isinstance(after, str | bytes) or not isinstance(after, Iterable):
        raise InvalidRequest("after must be a list of operation ids (e.g. after=[op_a.id, op_b.id])")
    ids: list[str] = []
    for value in after:
        op_id = value.id if isinstance(value, Operation) else value
        if not isinstance(op_id, str):
            raise InvalidRequest(f"after must hold operation ids (strings), not {type(op_id).__name__}")
        op_id = check_id(op_id)
        if op_id not in ids:
            ids.append(op_id)
    if len(ids) > MAX_DEPENDENCIES:
        raise InvalidRequest(f"an operation may wait for at most {MAX_DEPENDENCIES} others, not {len(ids)}")
    if ids:
        found = set(Operation.objects.using(using).filter(pk__in=ids).values_list("pk", flat=True))
        missing = [i for i in ids if i not in found]
        if missing:
            raise UnknownDependency(missing)
    return ids


def ended(ops: Iterable[str | Operation], *, using: str = DEFAULT_DB_ALIAS) -> list[tuple]:
    """An operation ended: count its end on its parent (the fan-in) and on its dependents.

    Call it in the transaction of the write that ended ``ops``, right after it, with what that
    write returned: ids, or the ``Operation`` rows it returned (whose ``parent_id`` and
    ``has_dependents`` then spare the statement one of them does not need). Ids of operations
    that are unfinished, have no parent and no dependents, or were already counted do nothing.
    A batch or chain its fan-in settled, and a dependent failed here, are ended in turn.
    Returns the fan-in's rows (one per parent touched: id, state, ids started or None, ...).
    """
    ids, deps, rows = [], [], []
    for op in ops:
        if isinstance(op, Operation):
            if op.parent_id:
                ids.append(op.id)
            if op.has_dependents:
                deps.append(op.id)
        elif op:
            ids.append(op)
            deps.append(op)
    channel = wq_settings().notify_channel
    if ids:
        rows = store.fan_in(ids, queue_channel=channel, using=using)  # the batches' fan-in (operations.batches)
        deps += [row[0] for row in rows if row[1] in TERMINAL_STATES]
    while deps:
        # A dependent failed here ends its own dependents (they have no parent: no fan-in).
        decided = store.deps_settle(deps, queue_channel=channel, using=using)
        deps = [row[0] for row in decided if row[1] in TERMINAL_STATES]
    return rows


def recover(*, using: str = DEFAULT_DB_ALIAS, dry_run: bool = False) -> dict[str, int]:
    """Decide the dependents of ended operations whose decision was lost.

    The decision runs in the transaction that ends an operation, except for a run that gained
    a dependent while it ran: its runner decides right after its end, in a second
    transaction, and a crash in between leaves the dependents waiting. This decides them, once.
    """
    with transaction.atomic(using=using, savepoint=False):
        due = store.deps_due(limit=ops_settings().recover_batch, using=using)
        if not dry_run and due:
            ended(due, using=using)
    return {"dependencies_decided": len(due)}


def dependencies(op_id: str, *, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """The ids of the operations ``op_id`` was started after (waits, or waited, for), sorted.
    Raises OperationNotFound for an unknown id."""
    _exists(op_id, using)
    return sorted(OperationDependency.objects.using(using).filter(op_id=op_id).values_list("after_id", flat=True))


def dependents(op_id: str, *, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """The ids of the operations started after ``op_id``, sorted. Raises OperationNotFound."""
    _exists(op_id, using)
    return sorted(OperationDependency.objects.using(using).filter(after_id=op_id).values_list("op_id", flat=True))


def _exists(op_id: str, using: str) -> None:
    if not Operation.objects.using(using).filter(pk=op_id).exists():
        raise OperationNotFound(f"operation {op_id!r} not found")
