"""Batches and chains: many operations started as one, fanned in exactly once.

    batch = operations.batch("reports.export", [{"month": m} for m in months],
                             then=("reports.bundle", {"name": "2026"}), owner=str(user.pk))
    chain = operations.chain([("media.fetch", {"url": u}), ("media.resize", {}), ("media.publish", {})])

A batch or a chain is itself an operation (kind ``operations.batch`` / ``operations.chain``)
that no worker runs: it is recorded ``running``, with no work item, together with its
children (a chain: its first step) and their work items, in one statement in the caller's
transaction. Its progress is its children's: units are children ("37 of 200"), its count is
their counts summed.

The fan-in: every write that ends an operation (the runner's finish, a cancel, a queue rule's
settlement, an attempt that could not begin) is followed, in the same transaction, by one
statement (``op_fan_in``) that counts the children among the ended operations on their
parent's row, under that row's lock, and when the last open child ended settles the parent and
starts its ``then`` (a chain: its next step) in that same statement. A child is counted once
(its ``fanned_in`` flag is set by the statement that counts it), so the parent ends once and
its ``then`` starts once; retries never end a child, so ``then`` never starts before every
child is terminal. ``recover`` counts children whose fan-in was lost (see ``recover``).

How a parent ends: a batch is ``cancelled`` when its cancel was asked, else ``failed`` when
any child failed (error ``children_failed``, saying how many and the first failure), else
``cancelled`` when a child was cancelled on its own, else ``succeeded`` (result
``{"children": n, "succeeded": n}``). A chain runs its steps one after another, each only once
the previous one succeeded; it ends ``succeeded`` with its last step's result, ``failed``
with the failed step's error code, or ``cancelled``.

``then`` runs, by default, when the parent ends ``succeeded`` or ``failed`` (the callback
reads ``reporter.parent.state``); ``then_on="succeeded"`` runs it on success only and
``then_on="always"`` on cancellation too. Its run reads the batch with ``reporter.parent``
and the children with ``operations.children(reporter.parent.id)``; a chain step reads the
previous step (and its result) with ``reporter.previous``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from django.db import DEFAULT_DB_ALIAS, transaction

from operations import arguments, deps, store
from operations.conf import ops_settings
from operations.exceptions import DuplicateOperation, InvalidRequest, OperationNotFound
from operations.ids import check_id, new_id
from operations.models import BATCH_KIND, CHAIN_KIND, PARENT_KINDS, TERMINAL_STATES, Operation, State
from operations.registry import registry
from workqueue.conf import wq_settings

#: ``then`` runs when its parent ends in one of these states (the default).
THEN_ON_FINISHED = ("succeeded", "failed")
_THEN_ON = {
    "finished": THEN_ON_FINISHED,
    "succeeded": ("succeeded",),
    "always": ("succeeded", "failed", "cancelled"),
}
#: A batch may hold at most this many children (one statement inserts them all).
MAX_CHILDREN = 100_000
MAX_PAGE = 1000

__all__ = ["batch", "cancel", "chain", "children", "fan_in", "parent_of", "previous_of", "recover"]


def _spec(kind: object, request, *, queue: str, priority: int, group: str | None) -> dict:
    """What starting ``kind`` with ``request`` will write, checked now (unknown kind, wrong type)."""
    if not isinstance(kind, str):
        raise InvalidRequest(f"a kind must be a string, not {type(kind).__name__}")
    if kind in PARENT_KINDS:
        raise InvalidRequest(f"{kind!r} cannot be a child: nest work by starting a batch from a run instead")
    definition = registry.get(kind)
    spec = {
        "id": new_id(),
        "kind": kind,
        "request": definition.encode(request),
        "queue": queue,
        "priority": priority,
        "count_label": definition.count_label,
        "max_attempts": definition.max_attempts or ops_settings().max_attempts,
    }
    if group is not None:
        spec["group"] = group
    return spec


def _pairs(steps: object, what: str) -> list[tuple[str, object]]:
    if isinstance(steps, str | bytes) or not isinstance(steps, Iterable):
        raise InvalidRequest(f"{what} must be a list of (kind, request) pairs")
    pairs = []
    for n, step in enumerate(steps):
        if not isinstance(step, tuple | list) or len(step) != 2:
            raise InvalidRequest(f"{what}[{n}] must be a (kind, request) pair, not {step!r:.80}")
        pairs.append((step[0], step[1]))
    return pairs


def _then(then, then_on, *, queue: str, priority: int, group: str | None) -> dict | None:
    if then is None:
        return None
    (kind, request) = _pairs([then], "then")[0]
    spec = _spec(kind, request, queue=queue, priority=priority, group=group)
    if isinstance(then_on, str):
        if then_on not in _THEN_ON:
            raise InvalidRequest(f"then_on must be one of {', '.join(sorted(_THEN_ON))} or a list of end states")
        states = _THEN_ON[then_on]
    else:
        states = tuple(then_on)
        bad = [s for s in states if s not in TERMINAL_STATES]
        if bad or not states:
            raise InvalidRequest(f"then_on states must be among succeeded, failed, cancelled (not {bad or 'none'})")
    spec["on"] = list(states)
    return spec


def _start_parent(
    kind: str,
    pairs: list[tuple[str, object]],
    then,
    then_on: str | Sequence[str],
    owner: object,
    id: str | None,
    group: object,
    queue: str | None,
    priority: object,
    using: str,
) -> Operation:
    """``batch`` and ``chain`` alike: check everything, then write the parent with its first
    children (a batch: all of them; a chain: its first step, the others kept in its request)."""
    queue, priority, group = arguments.queue(queue), arguments.priority(priority), arguments.group(group)
    owner = arguments.owner(owner)
    specs = [_spec(k, r, queue=queue, priority=priority, group=group) for k, r in pairs]
    request: dict = {"then": _then(then, then_on, queue=queue, priority=priority, group=group)}
    if kind == CHAIN_KIND:
        request["steps"] = specs
    first, total = (specs[:1] if kind == CHAIN_KIND else specs), len(specs)
    op_id = check_id(id) if id is not None else new_id()
    labels = {spec["count_label"] for spec in specs}
    op = store.parent_start(
        id=op_id,
        kind=kind,
        owner=owner,
        queue=queue,
        priority=priority,
        request=request,
        count_label=labels.pop() if len(labels) == 1 else "",
        total=total,
        children=first,
        queue_channel=wq_settings().notify_channel,
        using=using,
    )
    if op is not None:
        op.created = True
        return op
    existing = Operation.objects.using(using).get(pk=op_id)
    if existing.owner != owner or existing.kind != kind:
        raise DuplicateOperation(f"operation id {op_id!r} is already used by another operation; choose another id")
    existing.created = False
    return existing


def batch(
    kind,
    requests: Iterable | None = None,
    *,
    then: tuple | None = None,
    then_on: str | Sequence[str] = "finished",
    owner: str | None = None,
    id: str | None = None,
    group: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    using: str = DEFAULT_DB_ALIAS,
) -> Operation:
    """Start one child operation per request and the batch operation that is their parent.

    ``batch(kind, requests)`` or, for mixed kinds, ``batch([(kind, request), ...])``. All of
    it is written in one statement, in the caller's ``transaction.atomic()`` when there is
    one. ``then=(kind, request)`` is started exactly once when the batch ends in a state of
    ``then_on`` (``"finished"``: succeeded or failed; ``"succeeded"``; ``"always"``; or a
    list of states). ``id=`` is the idempotency seam, as for ``start``; the batch's owner owns
    its children. Every request is checked now: nothing is written if one is bad.
    """
    if requests is None:
        pairs = _pairs(kind, "batch")
    else:
        if isinstance(requests, str | bytes | dict) or not isinstance(requests, Iterable):
            raise InvalidRequest("requests must be a list of requests (one child each)")
        pairs = [(kind, request) for request in requests]
    if not pairs:
        raise InvalidRequest("a batch needs at least one request")
    if len(pairs) > MAX_CHILDREN:
        raise InvalidRequest(f"a batch may have at most {MAX_CHILDREN:,} children, not {len(pairs):,}")
    return _start_parent(BATCH_KIND, pairs, then, then_on, owner, id, group, queue, priority, using)


def chain(
    steps: Iterable,
    *,
    then: tuple | None = None,
    then_on: str | Sequence[str] = "finished",
    owner: str | None = None,
    id: str | None = None,
    group: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    using: str = DEFAULT_DB_ALIAS,
) -> Operation:
    """Start a chain: its steps ``[(kind, request), ...]`` run one after another.

    A step starts only once the previous one succeeded (``reporter.previous`` is that step,
    with its result); a failed step fails the chain with its error; a cancel stops the
    current step and starts no more. Written like ``batch``, with the same options.
    """
    pairs = _pairs(steps, "steps")
    if not pairs:
        raise InvalidRequest("a chain needs at least one step")
    return _start_parent(CHAIN_KIND, pairs, then, then_on, owner, id, group, queue, priority, using)


def children(
    op_id: str,
    *,
    owner: str | None = None,
    after: int | None = None,
    limit: int = 100,
    using: str = DEFAULT_DB_ALIAS,
) -> tuple[list[Operation], int | None]:
    """A page of a batch's or chain's children in order; return (page, ``after`` for the next page or None).

    Keyset-paged on the children's position, so any page of 100,000 children is one short
    index scan. Raises OperationNotFound for an unknown parent (or another owner's).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_PAGE}")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
        raise InvalidRequest("after must be an integer position")
    parents = Operation.objects.using(using).filter(pk=op_id)
    if owner is not None:
        parents = parents.filter(owner=owner)
    if not parents.exists():
        raise OperationNotFound(f"operation {op_id!r} not found")
    qs = Operation.objects.using(using).children_of(op_id).defer("request", "attempt_log")
    if after is not None:
        qs = qs.filter(position__gt=after)
    page = [*qs[: limit + 1]]
    more = len(page) > limit
    page = page[:limit]
    return page, (page[-1].position if more else None)


def parent_of(op: Operation | None, *, using: str = DEFAULT_DB_ALIAS) -> Operation | None:
    """The batch or chain ``op`` is a child of, or whose end started it (its ``then``)."""
    parent_id = op and (op.parent_id or op.follows_id)
    if not parent_id:
        return None
    return Operation.objects.using(using).defer("request", "attempt_log").filter(pk=parent_id).first()


def previous_of(op: Operation | None, *, using: str = DEFAULT_DB_ALIAS) -> Operation | None:
    """The chain step before ``op`` (with its result), or None for a first step or a non-step."""
    if op is None or not op.parent_id or not op.position:
        return None
    return (
        Operation.objects.using(using)
        .defer("request", "attempt_log")
        .filter(parent_id=op.parent_id, position=op.position - 1)
        .first()
    )


def fan_in(ids: Iterable[str], *, using: str = DEFAULT_DB_ALIAS) -> list[tuple]:
    """Count the operations ``ids`` (just ended, in this transaction) on their parents.

    Call it in the transaction of the write that ended them, right after it, with the ids
    that write returned. Ids of operations without a parent, or already counted, do nothing.
    Returns a row per parent touched: (id, state, ids started or None, ...).
    """
    ids = [i for i in ids if i]
    if not ids:
        return []
    return store.fan_in(ids, queue_channel=wq_settings().notify_channel, using=using)


def cancel(op_id: str, *, owner: str | None = None, using: str = DEFAULT_DB_ALIAS) -> Operation:
    """Cancel a batch or chain: pending children at once, running ones asked to stop.

    The parent ends ``cancelled`` when its last open child has ended (at once when none was
    running). Cancelling one child instead cancels only that child.
    """
    with transaction.atomic(using=using, savepoint=False):
        parent = _get(op_id, owner=owner, using=using)
        if parent.done:
            return parent
        rows = store.cancel_children(op_id, using=using)
        store.cancel(op_id, owner=owner, using=using)
        deps.ended([child for child, state in rows if state == State.CANCELLED], using=using)
    return _get(op_id, owner=owner, using=using)


def _get(op_id: str, *, owner: str | None, using: str) -> Operation:
    qs = Operation.objects.using(using).filter(pk=op_id)
    if owner is not None:
        qs = qs.filter(owner=owner)
    op = qs.first()
    if op is None:
        raise OperationNotFound(f"operation {op_id!r} not found")
    return op


def is_parent(op_id: str, *, using: str = DEFAULT_DB_ALIAS) -> bool:
    return Operation.objects.using(using).filter(pk=op_id, kind__in=PARENT_KINDS).exists()


def recover(*, using: str = DEFAULT_DB_ALIAS, dry_run: bool = False) -> dict[str, int]:
    """Count children whose end was never counted on their parent, settling parents they leave done.

    The fan-in runs in the transaction that ends a child, so only a write made without it (a
    bug, a hand edit, a crash between two statements of a caller that did not use one
    transaction) leaves such a child; this repairs it, and starts the parent's ``then`` once.
    """
    with transaction.atomic(using=using, savepoint=False):
        due = store.fan_in_due(limit=ops_settings().recover_batch, using=using)
        if dry_run or not due:
            return {"fanned_in": len(due), "parents_settled": 0}
        # The one hook: the fan-in, then the decision of the settled parents' dependents.
        rows = deps.ended(due, using=using)
    return {"fanned_in": len(due), "parents_settled": sum(1 for row in rows if row[1] in TERMINAL_STATES)}


def describe_then(op: Operation) -> dict | None:
    """The ``then`` a batch or chain will start (kind, id, on), for the admin; None without one."""
    request = op.request if isinstance(op.request, dict) else json.loads(op.request or "null") or {}
    then = request.get("then") if isinstance(request, dict) else None
    if not then:
        return None
    return {"kind": then.get("kind"), "id": then.get("id"), "on": then.get("on", [])}
