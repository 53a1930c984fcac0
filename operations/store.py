"""The operations statements, one function per statement in ``sql/queries.sql``.

Each function is one round trip on Django's connection, so it joins the caller's
transaction; it takes the statement's parameters as keyword arguments and returns what its
callers need (an ``Operation``, a state, whether a row matched). ``run`` is the primitive they
share (the notify channel is filled in); the rest of the app calls the named functions.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypedDict

from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models.base import ModelState
from psycopg.types.json import Jsonb

from operations.conf import configured_table, ops_settings
from operations.models import Operation
from workqueue import sql

OP_COLUMNS = [f.attname for f in Operation._meta.concrete_fields]
LIGHT_COLUMNS = [c for c in OP_COLUMNS if c not in ("request", "attempt_log")]
RUN_COLUMNS = [c for c in OP_COLUMNS if c != "attempt_log"]  # what begin hands the runner
_JSON = {"request", "result_detail", "attempt_log"}

WATCHES_TABLE = f"{configured_table()}_watches"
STEPS_TABLE = f"{configured_table()}_steps"
SIGNALS_TABLE = f"{configured_table()}_signals"
DEPS_TABLE = f"{configured_table()}_dependencies"


def generated_fragments() -> dict[str, str]:
    """The operations fragments computed from Python, all of them: the tables' names (from
    OPERATIONS TABLE_PREFIX) and the model's column lists; the rest are in ``sql/*.sql``."""
    return {
        "table": configured_table(),
        "watches": WATCHES_TABLE,
        "steps": STEPS_TABLE,
        "signals": SIGNALS_TABLE,
        "deps": DEPS_TABLE,
        "op": sql.column_list(f"o.{c}" for c in OP_COLUMNS),
        "op_light": sql.column_list(f"o.{c}" for c in LIGHT_COLUMNS),
        "op_run": sql.column_list(f"o.{c}" for c in RUN_COLUMNS),
    }


# Every operations statement, on top of workqueue's fragments: every work_items write is theirs.
QUERIES = sql.load_app("operations", Path(__file__).with_name("sql"), generated=generated_fragments())


Row = tuple[Any, ...]


class Proof(TypedDict):
    """Whose write it is: the operation, its work item and the lease proof the item is held under."""

    id: str
    item_id: int
    token: Any


def run(name: str, params: dict[str, Any], *, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """Run an operations statement by name (the notify channel is filled in)."""
    params.setdefault("channel", ops_settings().notify_channel)
    return sql.execute(QUERIES[name], params, using=using)


def to_operation(row: Sequence[Any], columns: list[str] = OP_COLUMNS, *, using: str = DEFAULT_DB_ALIAS) -> Operation:
    """Build an Operation from a statement's row (extra trailing columns are ignored).

    What ``Model.from_db`` makes of a queryset's row (the columns the row lacks are deferred,
    read on first access; the instance is saved, from ``using``), without going through
    ``Model.__init__``: no per-field defaults to look up and no pre/post_init signals, which
    cost a runner ~45 us per operation, twice per run (``begin`` and ``finish``).
    """
    op = Operation.__new__(Operation)
    fields = op.__dict__
    for name, value in zip(columns, row, strict=False):
        fields[name] = json.loads(value) if name in _JSON and isinstance(value, str) else value
    state = op._state = ModelState()
    state.adding = False
    state.db = using
    return op


def first_operation(rows: list[Row], *, using: str = DEFAULT_DB_ALIAS) -> Operation | None:
    return to_operation(rows[0], using=using) if rows else None


def may_relax(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether a soft write (begin, a progress flush) may commit relaxed: only in its own
    transaction, never inside a caller's (it would relax the caller's commit too)."""
    return not transaction.get_connection(using).in_atomic_block


# -- one function per statement -----------------------------------------------------------


def start(
    *,
    id: str,
    kind: str,
    owner: str,
    queue: str,
    priority: int,
    request: Any,
    count_label: str,
    max_attempts: int,
    delay: float | None,
    run_after: dt.datetime | None,
    queue_channel: str,
    trace_context: Any = None,
    group: str | None = None,
    workflow: bool = False,
    using: str = DEFAULT_DB_ALIAS,
) -> Operation | None:
    """``op_start``: the new operation, or None when the id is taken (nothing written).

    ``trace_context``: the caller's W3C trace context for the work item (``Jsonb`` or None).
    """
    rows = run(
        "op_start",
        {
            "id": id,
            "kind": kind,
            "owner": owner,
            "queue": queue,
            "priority": priority,
            "request": Jsonb(request),
            "count_label": count_label,
            "max_attempts": max_attempts,
            "delay": delay,
            "run_after": run_after,
            "queue_channel": queue_channel,
            "trace_context": trace_context,
            "group": group,
            "workflow": workflow,
        },
        using=using,
    )
    return first_operation(rows, using=using)


def get_many(ids: list[str], *, using: str = DEFAULT_DB_ALIAS) -> dict[str, Operation]:
    """``op_get_many``: many operations in one statement, without request and attempt log."""
    if not ids:
        return {}
    rows = sql.execute(QUERIES["op_get_many"], {"ids": ids}, using=using)
    return {r[0]: to_operation(r, LIGHT_COLUMNS, using=using) for r in rows}


def begin(
    *, id: str, item_id: int, token: Any, lease: float, worker_id: str, using: str = DEFAULT_DB_ALIAS
) -> Operation | None:
    """``op_begin``: the operation as its runner needs it (no attempt log), or None if refused."""
    params = {
        "id": id,
        "item_id": item_id,
        "token": token,
        "lease": lease,
        "worker_id": worker_id,
        "relaxed": may_relax(using),
    }
    rows = run("op_begin", params, using=using)
    return to_operation(rows[0], RUN_COLUMNS, using=using) if rows else None


def settle_unbegun(*, id: str, item_id: int, token: Any, using: str = DEFAULT_DB_ALIAS) -> str | None:
    """``op_settle_unbegun``: the state it ended in (cancelled, failed), or None if it could not."""
    rows = run("op_settle_unbegun", {"id": id, "item_id": item_id, "token": token}, using=using)
    return rows[0][1] if rows else None


def item_noop(*, id: str, item_id: int, token: Any, using: str = DEFAULT_DB_ALIAS) -> None:
    """``op_item_noop``: settle a refused begin's work item as a no-op."""
    run("op_item_noop", {"id": id, "item_id": item_id, "token": token}, using=using)


def flush(
    *,
    id: str,
    item_id: int,
    token: Any,
    lease: float,
    progress: dict[str, Any],
    using: str = DEFAULT_DB_ALIAS,
) -> tuple[int, bool] | None:
    """``op_flush``: (revision, cancel_requested) while held, None once the hold is lost."""
    params = {
        **progress,
        "id": id,
        "token": token,
        "item_id": item_id,
        "lease": lease,
        "relaxed": may_relax(using),
    }
    rows = run("op_flush", params, using=using)
    return (rows[0][0], rows[0][1]) if rows else None


def stop_reason(*, id: str, attempt: int, using: str = DEFAULT_DB_ALIAS) -> str:
    """``op_stop_reason``: why a run no longer holds the operation (lease_lost if it is gone)."""
    rows = run("op_stop_reason", {"id": id, "attempt": attempt}, using=using)
    return rows[0][0] if rows else "lease_lost"


def finish(
    *,
    id: str,
    item_id: int,
    token: Any,
    progress: dict[str, Any],
    state: str,
    error_code: str,
    error_message: str,
    error_retryable: bool,
    result_uri: str,
    result_detail: str | None,
    all_done: bool,
    cancel_wins: bool,
    attempt: str,
    using: str = DEFAULT_DB_ALIAS,
) -> Operation | None:
    """``op_finish``: the operation as saved in its terminal state, or None when the hold was lost."""
    params = {
        **progress,
        "id": id,
        "item_id": item_id,
        "token": token,
        "state": state,
        "error_code": error_code,
        "error_message": error_message,
        "error_retryable": error_retryable,
        "result_uri": result_uri,
        "result_detail": result_detail,
        "all_done": all_done,
        "cancel_wins": cancel_wins,
        "attempt": attempt,
    }
    rows = run("op_finish", params, using=using)
    return to_operation(rows[0], using=using) if rows else None


def release(
    *,
    id: str,
    item_id: int,
    token: Any,
    progress: dict[str, Any],
    error_code: str,
    error_message: str,
    delay: float,
    attempt: str,
    using: str = DEFAULT_DB_ALIAS,
) -> bool:
    """``op_release``: whether the operation went back to pending for a retry."""
    params = {
        **progress,
        "id": id,
        "item_id": item_id,
        "token": token,
        "error_code": error_code,
        "error_message": error_message,
        "delay": delay,
        "attempt": attempt,
    }
    return bool(run("op_release", params, using=using))


def cancel(id: str, *, owner: str | None, using: str = DEFAULT_DB_ALIAS) -> Operation | None:
    """``op_cancel``: the operation as cancelled or flagged, or None (terminal, or not found)."""
    return first_operation(run("op_cancel", {"id": id, "owner": owner}, using=using), using=using)


def settle_from_queue(
    ids: list[str], *, state: str, error_code: str, error_message: str, using: str = DEFAULT_DB_ALIAS
) -> list[str]:
    """``op_settle_from_queue``: mirror a queue rule's settlement of their work items; the ids settled."""
    params = {"ids": ids, "state": state, "error_code": error_code, "error_message": error_message}
    return [row[0] for row in run("op_settle_from_queue", params, using=using)]


def expire_lease(ids: list[str], *, using: str = DEFAULT_DB_ALIAS) -> None:
    """``op_expire_lease``: their work items were requeued; their leases end now."""
    run("op_expire_lease", {"ids": ids}, using=using)


def release_held(ids: list[str], tokens: list[Any], *, using: str = DEFAULT_DB_ALIAS) -> None:
    """``op_release_held``: a worker gave their work items back (held under ``tokens``)."""
    run("op_release_held", {"ids": ids, "tokens": tokens}, using=using)


def stranded(*, after: float, limit: int, now: dt.datetime | None = None, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``op_stranded``: (id, queue, attempts, max_attempts, priority) of operations to re-offer, locked."""
    return run("op_stranded", {"after": after, "limit": limit, "now": now}, using=using)


def reap(*, retention: float, limit: int, now: dt.datetime | None = None, using: str = DEFAULT_DB_ALIAS) -> int:
    """``op_reap``: delete one batch of long-finished operations; how many."""
    params = {"retention": retention, "limit": limit, "now": now}
    return sql.execute_rowcount(QUERIES["op_reap"], params, using=using)


def watch_follow(ids: Iterable[str], *, watcher: str, ttl: float, using: str = DEFAULT_DB_ALIAS) -> None:
    """``watch_follow``: writes to these operations notify until ``ttl`` seconds from now."""
    run("watch_follow", {"ids": list(ids), "watcher": watcher, "ttl": ttl}, using=using)


def watch_forget(ids: Iterable[str] | None, *, watcher: str, using: str = DEFAULT_DB_ALIAS) -> None:
    """``watch_forget``: stop following these operations (all of them when ``ids`` is None)."""
    run("watch_forget", {"ids": None if ids is None else list(ids), "watcher": watcher}, using=using)


def watch_reap(*, now: dt.datetime | None = None, using: str = DEFAULT_DB_ALIAS) -> None:
    """``watch_reap``: forget follows whose process went away without saying so."""
    run("watch_reap", {"now": now}, using=using)


# -- batches and chains (operations.batches) ----------------------------------------------


def parent_start(
    *,
    id: str,
    kind: str,
    owner: str,
    queue: str,
    priority: int,
    request: Any,
    count_label: str,
    total: int,
    children: list[dict[str, Any]],
    queue_channel: str,
    using: str = DEFAULT_DB_ALIAS,
) -> Operation | None:
    """``op_parent_start``: the new batch or chain (its first children written), or None when the id is taken."""
    rows = run(
        "op_parent_start",
        {
            "id": id,
            "kind": kind,
            "owner": owner,
            "queue": queue,
            "priority": priority,
            "request": Jsonb(request),
            "count_label": count_label,
            "total": total,
            "children": Jsonb(children),
            "queue_channel": queue_channel,
        },
        using=using,
    )
    return first_operation(rows, using=using)


def fan_in(ids: list[str], *, queue_channel: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``op_fan_in``: count these ended children on their parents; (id, state, started ids, ...) per parent."""
    return run("op_fan_in", {"ids": ids, "queue_channel": queue_channel}, using=using)


def fan_in_due(*, limit: int, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """``op_fan_in_due``: ids of ended children never counted on their parent, locked."""
    return [row[0] for row in run("op_fan_in_due", {"limit": limit}, using=using)]


def cancel_children(id: str, *, using: str = DEFAULT_DB_ALIAS) -> list[tuple[str, str]]:
    """``op_cancel_children``: (id, state) of the children cancelled outright or asked to stop."""
    return [(row[0], row[1]) for row in run("op_cancel_children", {"id": id}, using=using)]


# -- workflows (operations.workflows) -----------------------------------------------------


class StepRow(TypedDict):
    """A recorded step, as a resumed run replays it (``step_list``)."""

    position: int
    name: str
    kind: str
    state: str
    attempts: int
    result: Any
    error: Any
    wake_at: dt.datetime | None
    due: bool


def _held(id: str, token: Any) -> dict[str, Any]:
    return {"id": id, "token": token}


def step_list(*, id: str, using: str = DEFAULT_DB_ALIAS) -> dict[int, StepRow]:
    """``step_list``: the run's recorded steps by position."""
    rows = run("step_list", {"id": id}, using=using)
    keys = StepRow.__annotations__
    recorded = {}
    for r in rows:
        row = dict(zip(keys, r, strict=True))
        for name in ("result", "error"):  # jsonb arrives as its text (Django's loader)
            if isinstance(row[name], str):
                row[name] = json.loads(row[name])
        recorded[r[0]] = StepRow(**row)  # type: ignore[typeddict-item]
    return recorded


def step_begin(
    *, id: str, token: Any, position: int, name: str, using: str = DEFAULT_DB_ALIAS
) -> tuple[int | None, bool] | None:
    """``step_begin``: (the call's attempt number, cancel requested), or None when the run no
    longer holds the operation. A requested cancel records nothing (the attempt is None)."""
    rows = run("step_begin", {**_held(id, token), "position": position, "name": name}, using=using)
    return (rows[0][0], rows[0][1]) if rows else None


def step_save(
    *,
    id: str,
    token: Any,
    position: int,
    name: str,
    kind: str,
    state: str,
    result: Any = None,
    error: Any = None,
    wait_s: float | None = None,
    keep_wake: bool = False,
    using: str = DEFAULT_DB_ALIAS,
) -> tuple[dt.datetime | None, bool] | None:
    """``step_save``: (wake time, whether it has come), or None when the run no longer holds it.

    ``result`` and ``error`` are JSON text (or None)."""
    params = {
        **_held(id, token),
        "position": position,
        "name": name,
        "kind": kind,
        "state": state,
        "result": result,
        "error": error,
        "wait_s": wait_s,
        "keep_wake": keep_wake,
    }
    rows = run("step_save", params, using=using)
    return (rows[0][0], rows[0][1]) if rows else None


def step_take_signal(
    *, id: str, token: Any, position: int, name: str, using: str = DEFAULT_DB_ALIAS
) -> tuple[bool, Any]:
    """``step_take_signal``: (taken, payload): the oldest untaken signal of ``name``, if any."""
    rows = run("step_take_signal", {**_held(id, token), "position": position, "name": name}, using=using)
    if not rows:
        return False, None
    payload = rows[0][1]
    return True, json.loads(payload) if isinstance(payload, str) else payload


def suspend(
    *,
    id: str,
    item_id: int,
    token: Any,
    progress: dict[str, Any],
    wait_kind: str,
    wait_name: str,
    wake_at: dt.datetime | None,
    using: str = DEFAULT_DB_ALIAS,
) -> bool:
    """``op_suspend``: whether the run was put to wait (False: cancel requested, or not held)."""
    params = {
        **progress,
        "id": id,
        "item_id": item_id,
        "token": token,
        "wait_kind": wait_kind,
        "wait_name": wait_name,
        "wake_at": wake_at,
    }
    return bool(run("op_suspend", params, using=using))


def signal(*, id: str, name: str, payload: Any, queue_channel: str, using: str = DEFAULT_DB_ALIAS) -> int | None:
    """``op_signal``: the signal's id, or None when no unfinished workflow has this id."""
    params = {"id": id, "name": name, "payload": Jsonb(payload), "queue_channel": queue_channel}
    rows = run("op_signal", params, using=using)
    return rows[0][0] if rows else None


def fork(
    *, id: str, source: str, from_step: int, queue_channel: str, using: str = DEFAULT_DB_ALIAS
) -> Operation | None:
    """``op_fork``: the new run, or None (the id is taken, or ``source`` is not a workflow)."""
    params = {"id": id, "source": source, "from_step": from_step, "queue_channel": queue_channel}
    return first_operation(run("op_fork", params, using=using), using=using)


# -- dependencies (operations.deps) -----------------------------------------------


def start_after(
    *,
    id: str,
    kind: str,
    owner: str,
    queue: str,
    priority: int,
    request: Any,
    count_label: str,
    max_attempts: int,
    after: list[str],
    queue_channel: str,
    trace_context: Any = None,
    workflow: bool = False,
    using: str = DEFAULT_DB_ALIAS,
) -> Operation | None:
    """``op_start_after``: the new operation (pending, or failed dependency_failed), or None when
    nothing was written (the id is taken, or a dependency has gone)."""
    rows = run(
        "op_start_after",
        {
            "id": id,
            "kind": kind,
            "owner": owner,
            "queue": queue,
            "priority": priority,
            "request": Jsonb(request),
            "count_label": count_label,
            "max_attempts": max_attempts,
            "after": after,
            "queue_channel": queue_channel,
            "trace_context": trace_context,
            "workflow": workflow,
        },
        using=using,
    )
    return first_operation(rows, using=using)


def deps_settle(ids: list[str], *, queue_channel: str, using: str = DEFAULT_DB_ALIAS) -> list[Row]:
    """``op_deps_settle``: count these ended operations on their dependents; (id, state, deps_open, ...)
    per dependent changed."""
    return run("op_deps_settle", {"ids": ids, "queue_channel": queue_channel}, using=using)


def deps_due(*, limit: int, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """``op_deps_due``: ids of ended operations with an edge never counted on its dependent, locked."""
    return [row[0] for row in run("op_deps_due", {"limit": limit}, using=using)]
