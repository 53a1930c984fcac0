"""factory-boy factories for a site's own tests: operations in every state, with progress.

Import it from ``operations.testing`` (which loads this module only when it is asked for)::

    from operations.testing import OperationFactory

    OperationFactory(kind="reports.export", request={"month": "2026-10"})   # pending
    OperationFactory(kind="reports.export", running=True)                   # running, held
    OperationFactory(kind="reports.export", halfway=True)                   # running, 5 of 10 units
    OperationFactory(kind="reports.export", running=True, count=4300)
    OperationFactory(kind="reports.export", succeeded=True, result_detail={"rows": 3})
    OperationFactory(kind="reports.export", failed=True, error_code="no_data")
    OperationFactory(kind="reports.export", cancelled=True)

Rows are written the way a worker writes them: ``operations.start``, a claim of its work item,
the runner's begin, progress flushes and its finish (``operations.store``), or
``operations.cancel`` — never a model save, so the operation and its work item agree (a
running operation's item is held under the lease its begin renewed; a finished one's item is
settled). ``kind`` is one of the site's registered kinds (its ``request`` is checked as a start
checks it). Needs the ``testing`` extra: ``pip install "django-workqueue-operations[testing]"``.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import factory
except ImportError as exc:  # pragma: no cover - proven by a subprocess test that blocks the import
    raise ImportError(
        "operations.testing's factories need factory-boy: pip install 'django-workqueue-operations[testing]'"
    ) from exc

from django.db import DEFAULT_DB_ALIAS

from operations.models import Operation

WORKER_ID = "testing.factory"
TERMINAL = ("succeeded", "failed")
PROGRESS = ("units_total", "units_done", "unit", "message", "count")


class OperationFactory(factory.Factory):
    """An operation, pending by default; traits ``running``, ``halfway``, ``succeeded``,
    ``failed``, ``cancelled``. Progress (``units_total``, ``units_done``, ``unit``,
    ``message``, ``count``) needs a run: giving any makes a pending operation running."""

    class Meta:
        model = Operation
        strategy = factory.CREATE_STRATEGY

    kind: Any = None  # required: one of the site's registered kinds
    request: Any = None
    owner: Any = None
    priority = 0
    queue: Any = None
    max_attempts: Any = None
    group: Any = None
    state = "pending"  # pending, running, succeeded, failed, cancelled (the traits set it)
    units_total: Any = None
    units_done: Any = None
    unit: Any = None
    message: Any = None
    count: Any = None
    result_uri = ""
    result_detail: Any = None
    error_code = "failed_by_factory"
    error_message = "failed by OperationFactory"
    using = DEFAULT_DB_ALIAS

    class Params:
        running = factory.Trait(state="running")
        halfway = factory.Trait(state="running", units_total=10, units_done=5, message="halfway")
        succeeded = factory.Trait(state="succeeded")
        failed = factory.Trait(state="failed")
        cancelled = factory.Trait(state="cancelled")

    @classmethod
    def _build(cls, model_class, *args, **kwargs):
        raise TypeError("OperationFactory writes rows through the app's statements: use create(), not build()")

    @classmethod
    def _create(cls, model_class, *args, state: str, using: str, **fields) -> Operation:
        import operations

        if not fields.get("kind"):
            raise ValueError('OperationFactory needs kind=, one of your registered kinds: OperationFactory(kind="...")')
        progress = {key: fields.pop(key) for key in PROGRESS}
        ending = {key: fields.pop(key) for key in ("result_uri", "result_detail", "error_code", "error_message")}
        if state == "pending" and any(value is not None for value in progress.values()):
            state = "running"  # progress is written by a run's flush
        op = operations.start(fields.pop("kind"), fields.pop("request"), using=using, **fields)
        if state == "cancelled":
            return operations.cancel(op.id, using=using)
        if state != "pending":
            _run(op, state, progress, ending, using)
        return Operation.objects.using(using).get(pk=op.id)


def _run(op: Operation, state: str, progress: dict, ending: dict, using: str) -> None:
    """Take the operation's work item, begin its run, flush its progress, and finish it if asked."""
    from operations import store
    from operations.conf import ops_settings
    from operations.runner import attempt_entry
    from workqueue.models import WorkItem

    if state not in ("running", *TERMINAL):
        raise ValueError(f"unknown OperationFactory state {state!r}")
    lease = ops_settings().lease
    manager = WorkItem.objects.db_manager(using)
    item_id = manager.filter(key=op.id, queue=op.queue).live().values_list("id", flat=True).first()
    item = manager.claim_one(item_id, worker_id=WORKER_ID, lease=lease) if item_id is not None else None
    if item is None:
        raise ValueError(f"the work item of {op.id} could not be claimed")
    proof: dict[str, Any] = {"id": op.id, "item_id": item.id, "token": item.lease_token}
    if store.begin(**proof, lease=lease, worker_id=WORKER_ID, using=using) is None:
        raise ValueError(f"{op.id}: the runner's begin was refused")
    snapshot = _progress(progress)
    if any(value is not None for value in progress.values()):
        store.flush(**proof, lease=lease, progress=snapshot, using=using)
    if state in TERMINAL:
        succeeded = state == "succeeded"
        detail = ending["result_detail"]
        store.finish(
            **proof,
            progress=snapshot,
            state=state,
            error_code="" if succeeded else ending["error_code"],
            error_message="" if succeeded else ending["error_message"],
            error_retryable=False,
            result_uri=ending["result_uri"] if succeeded else "",
            result_detail=json.dumps(detail) if succeeded and detail is not None else None,
            all_done=succeeded,
            cancel_wins=False,
            attempt=json.dumps(
                attempt_entry(None, "" if succeeded else ending["error_code"], ending["error_message"], outcome=state)
            ),
            using=using,
        )


#: What a Reporter starts a run with, for the progress a test does not give.
UNSET = {"units_total": None, "units_done": 0, "unit": "", "message": "", "count": 0}


def _progress(given: dict) -> dict:
    """A flush's progress parameters (the Reporter's snapshot), unset ones as a Reporter starts them."""
    return {key: UNSET[key] if given.get(key) is None else given[key] for key in PROGRESS}
