"""The workqueue handler that runs operations: begin, run, then finish or release.

Outcomes:

- run returns → succeeded (cancelled instead when the run saw a requested cancellation);
- ``Fail(code, ...)`` → retried under that code; wrapped in ``Unretryable`` (or
  ``retryable=False``) → failed now, recorded as the wrapped exception;
- any other exception → retried, recorded under ``internal``;
- an exception while cancellation is requested → cancelled (code ``cancelled``);
- attempts spent → failed ``attempts_exhausted`` carrying the last error;
- cancellation requested before an attempt begins → cancelled, without running;
- unknown kind → failed ``unknown_kind`` at once; a result detail over 16 KiB → failed
  ``result_too_large`` at once;
- ``SystemExit``, ``KeyboardInterrupt`` or any other ``BaseException`` from a run fails its
  attempt like an exception (the runner thread lives on); in the main thread a
  ``KeyboardInterrupt`` is recorded and then raised again, since it may be the user's Ctrl-C;
- a worker shutting down releases the operation (``runworker`` hands its item back and the
  ``released`` hook returns the operation to pending); it is not failed.

``begin`` is the guarded transition: a worker whose begin is refused (another worker holds
the operation, or it is finished) settles its work item as a no-op and charges no attempt.
An operation whose cancellation was requested while no run was alive (its runner died) is
not begun: it ends cancelled there, with no attempt charged, even if its run never looks.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import functools
import json
import logging
import threading
import traceback

from django.db import transaction

from operations import deps, store
from operations.conf import ops_settings
from operations.exceptions import UnknownKind
from operations.models import Operation, Result
from operations.registry import registry
from operations.reporter import AsyncReporter, Attempt, Reporter, flusher
from operations.store import Proof
from workqueue import tracing
from workqueue.states import StopReason
from workqueue.worker.metrics import Count

log = logging.getLogger("operations.runner")

#: On the worker's own registry (``runworker --metrics-port``): how each run of an operation ended.
RUNS = Count(
    "operations_worker_runs",
    "Operation runs by kind and how they ended (succeeded, failed, cancelled, retried, released, lost, waiting).",
    {"kind": "operations.kind", "outcome": "operations.outcome"},
    otel="operations.runs",
    unit="{run}",
)

MAX_RESULT_DETAIL = 16 * 1024
MAX_MESSAGE = 1024
MAX_TRACEBACK = 8 * 1024

CODE_INTERNAL = "internal"
CODE_ATTEMPTS_EXHAUSTED = "attempts_exhausted"
# Starts the message of an attempts_exhausted that carries an unclassified exception's text,
# which owners never see (operations.http.public_error); the admin and attempt_log keep it.
INTERNAL_PREFIX = "internal: "
CODE_UNKNOWN_KIND = "unknown_kind"
CODE_CANCELLED = "cancelled"
CODE_RESULT_TOO_LARGE = "result_too_large"
CODE_INVALID_REQUEST = "invalid_request"


class Fail(Exception):
    """A failure with a stable code a client can branch on: ``raise Fail("no_such_user", "user %s", uid)``.

    Retried while attempts remain unless wrapped: ``raise Unretryable(Fail(...))``.
    """

    def __init__(self, code: str, message: str = "", *args, retryable: bool = True):
        if not isinstance(code, str) or not code:
            raise ValueError("Fail needs a non-empty code string")
        try:
            text = message % args if args else message
        except (TypeError, ValueError):
            text = " ".join([message, *map(str, args)])
        super().__init__(text)
        self.code = code
        self.message = text
        self.retryable = retryable


class Unretryable(Exception):
    """Raise to fail the operation now, without retrying: ``raise Unretryable(Fail("code", ...))``,
    or ``raise Unretryable(exc)`` for any exception (recorded under ``internal``).

    The attempt records the wrapped exception (its type, code, message and the traceback of
    the ``raise``), not this marker. ``Fail("code", ..., retryable=False)`` says the same.
    """

    def __init__(self, exception: BaseException):
        if not isinstance(exception, BaseException):
            raise TypeError(f"Unretryable wraps an exception, not {type(exception).__name__}")
        super().__init__(exception)
        self.exception = exception

    def unwrap(self) -> BaseException:
        """The wrapped exception, carrying this raise's traceback and chain if it had none."""
        inner = self.exception
        if isinstance(inner, Unretryable):
            inner = inner.unwrap()
        if inner.__traceback__ is None:
            inner = inner.with_traceback(self.__traceback__)
        if inner.__cause__ is None and inner.__context__ is None:
            # `except E as exc: raise Unretryable(exc)` has exc as this raise's context.
            inner.__cause__ = self.__cause__
            inner.__context__ = self.__context__ if self.__context__ is not inner else None
            inner.__suppress_context__ = self.__suppress_context__
        return inner


class Suspended(BaseException):
    """Raised by ``wf.sleep`` / ``wf.wait`` to end the run until its wake time; the runner
    puts the operation to wait (``op_suspend``). A BaseException, so ``except Exception`` in a
    workflow does not swallow it."""

    def __init__(self, kind: str, name: str, wake_at: dt.datetime | None):
        super().__init__(f"waiting for {kind} {name}".strip())
        self.kind = kind
        self.name = name
        self.wake_at = wake_at


def is_unretryable(exc: BaseException) -> bool:
    """Whether ``exc`` must not be retried (an ``Unretryable``, or a ``Fail(retryable=False)``)."""
    return isinstance(exc, Unretryable) or getattr(exc, "retryable", True) is False


def _clip(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _exception_path(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


def attempt_entry(exc: BaseException | None, code: str = "", message: str = "", outcome: str = "") -> dict:
    entry = {"outcome": outcome}
    if code:
        entry.update(error_code=code, error_message=_clip(message))
    if exc is not None:
        tb = "".join(traceback.format_exception(exc))
        entry.update(exception=_exception_path(exc), traceback=tb[-MAX_TRACEBACK:])
    return entry


_saved: contextvars.ContextVar[Operation | None] = contextvars.ContextVar("operations_saved", default=None)


def saved_operation() -> Operation | None:
    """Inside a kind's ``finished`` callback: the operation as its end was just saved (the row
    the terminal write returned), or None elsewhere. The callback's own ``operation`` argument
    is the row as the attempt began it."""
    return _saved.get()


def handle(item, ctx):
    """Run the operation ``item.key`` (the workqueue handler for the operations queues).

    For an ``async def`` kind it returns the coroutine that runs it, which the worker awaits
    on its event loop (so do ``testing.drain`` and a test's own ``async_to_sync``).
    """
    conf = ops_settings()
    using = ctx.using
    common = Proof(id=item.key, item_id=item.id, token=item.lease_token)
    with tracing.span("operations.begin", {"operations.id": item.key}) as span:
        op = store.begin(**common, lease=conf.lease, worker_id=ctx.worker_id, using=using)
        if span is not None:
            span.set_attribute("operations.begun", op is not None)
    if op is None:
        with transaction.atomic(using=using):
            ended = store.settle_unbegun(**common, using=using)
            if ended:
                deps.ended([item.key], using=using)
            if ended == "cancelled":
                log.info("%s: cancellation was requested while no run was alive; cancelled", item.key)
            elif ended:
                log.warning("%s: attempts exhausted; failed", item.key)
            else:
                store.item_noop(**common, using=using)
        ctx.settled = True
        return
    attempt = Attempt(id=op.id, number=op.attempts, final=op.attempts >= op.max_attempts)
    try:
        definition, unknown = registry.get(op.kind), None
    except UnknownKind as exc:
        definition, unknown = None, exc
    reporter = (AsyncReporter if definition is not None and definition.is_async else Reporter)(
        op_id=op.id,
        item_id=item.id,
        token=item.lease_token,
        attempt=attempt,
        lease=conf.lease,
        interval=conf.progress_interval,
        count_label=op.count_label,
        # A new attempt starts its units again (carrying units_done over would read "7 of 5"
        # after a retry); the count carries on, since it never goes backwards.
        units_total=op.units_total,
        count=op.count,
        using=using,
        stops=ctx,  # one stop event and reason: the worker's shutdown reaches the run at once
    )
    reporter.operation = op
    _limit(ctx, definition)
    if op.cancel_requested:
        reporter.cancel_requested = True
        reporter.signal_stop(StopReason.CANCEL_REQUESTED)
    if definition is None:
        _finish(reporter, common, state="failed", code=CODE_UNKNOWN_KIND, message=str(unknown), retryable=False)
        RUNS.add(op.kind, "failed")
        ctx.settled = True
        return
    try:
        request = definition.decode(op.request)
    except Exception as exc:
        _finish(
            reporter,
            common,
            state="failed",
            code=CODE_INVALID_REQUEST,
            message=f"the stored request does not fit {op.kind}: {exc}",
            retryable=False,
            exc=exc,
        )
        RUNS.add(op.kind, "failed")
        ctx.settled = True
        return

    flusher.add(reporter)
    if definition.is_async:
        # The worker awaits this on its event loop; this thread is free at once.
        return _run_async(definition, request, reporter, op, attempt, common, ctx)
    failure = result = None
    try:
        result = definition.run(request, reporter)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt...: the attempt failed, like any error
        failure = exc
    _ended(definition, reporter, op, attempt, common, ctx, result, failure)


def _limit(ctx, definition) -> None:
    """The kind's limits, for the worker to enforce on this run (counted from its start)."""
    limits = definition.limits if definition is not None else None
    if limits is not None:
        ctx.time_limits(soft_timeout=limits.soft_timeout, timeout=limits.timeout, max_memory_mb=limits.max_memory_mb)


async def _run_async(definition, request, reporter, op, attempt, common, ctx) -> None:
    """Await an ``async def`` run, then record its end off the loop, exactly as for a sync run."""
    from workqueue.worker.pools.eventloop import off_loop

    failure = result = None
    try:
        result = await definition.run(request, reporter)
    except BaseException as exc:  # CancelledError too: a cancel, a lost hold or a shutdown stopped it
        failure = exc
    await off_loop(_ended, definition, reporter, op, attempt, common, ctx, result, failure)


def _ended(definition, reporter: Reporter, op, attempt: Attempt, common: Proof, ctx, result, failure) -> None:
    """Record how a run ended (the outcome rules in this module's docstring)."""
    conf = ops_settings()
    flusher.discard(reporter)
    reporter.close()
    if reporter.stopped_by_worker():
        # The worker is shutting down (or gave the item up): whatever the run did on its way
        # out is not an outcome. The worker's release returns the operation to pending.
        log.warning("%s: stopped by its worker; not recorded", op.id)
        RUNS.add(op.kind, "released")
        return
    if isinstance(failure, Suspended):
        # A workflow waits (wf.sleep / wf.wait): not an end and not a failure.
        RUNS.add(op.kind, _suspend(reporter, common, failure) or "waiting")
        ctx.settled = True
        return
    with tracing.span(
        f"operations.finish {op.kind}",
        {"operations.id": op.id, "operations.kind": op.kind, "operations.attempt": attempt.number},
    ) as span:
        if failure is not None:
            retryable = not is_unretryable(failure)
            if isinstance(failure, Unretryable):
                failure = failure.unwrap()  # what the run raised is what the attempt records
            delay = definition.delay_after(op.request, attempt.number, conf.retry_delay)
            state = _failed(reporter, common, failure, attempt, delay, retryable=retryable)
        else:
            state = _succeeded(reporter, common, result)
        if span is not None:
            span.set_attribute("operations.state", state or "released")
    # No end recorded: a failure released for its retry, or a hold gone before the write.
    RUNS.add(op.kind, state or ("retried" if failure is not None else "lost"))
    ctx.settled = True
    if state is not None and definition.finished is not None:
        token = _saved.set(reporter.saved)
        try:
            definition.finished(op, state, None if failure is not None else result, failure)
        except Exception:
            log.exception("%s: the finished callback of %s raised", op.id, op.kind)
        finally:
            _saved.reset(token)
    if isinstance(failure, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
        # Recorded; but in the main thread (an inline drain, a shell) it may be the user's
        # Ctrl-C, and they asked to stop. A worker's runner threads never get a real one.
        raise failure


def _suspend(reporter: Reporter, common: Proof, wait) -> str | None:
    """Put a workflow to wait; None when it waits, else the end written instead (a
    cancellation requested meanwhile ends it cancelled)."""
    try:
        if store.suspend(
            **common,
            progress=reporter.snapshot(),
            wait_kind=wait.kind,
            wait_name=wait.name,
            wake_at=wait.wake_at,
            using=reporter.using,
        ):
            return None
    except Exception:
        log.exception("%s: could not record its wait; its lease will lapse and it will run again", reporter.op_id)
        return None
    return _finish(reporter, common, state="cancelled", code=CODE_CANCELLED, cancel_wins=True, outcome="cancelled")


def _succeeded(reporter: Reporter, common: Proof, result) -> str | None:
    uri, detail = "", None
    if isinstance(result, Result):
        uri, detail = result.uri or "", result.detail
    elif isinstance(result, str):
        uri = result
    elif result is not None:
        detail = result
    encoded = None
    if detail is not None:
        try:
            encoded = json.dumps(detail, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            return _finish(
                reporter,
                common,
                state="failed",
                code=CODE_INTERNAL,
                message=f"the result detail is not JSON-serialisable: {exc}",
                retryable=False,
            )
        if len(encoded.encode()) > MAX_RESULT_DETAIL:
            return _finish(
                reporter,
                common,
                state="failed",
                code=CODE_RESULT_TOO_LARGE,
                message=f"the result detail is {len(encoded.encode()):,} bytes, over the {MAX_RESULT_DETAIL:,}-byte "
                "limit; store the artifact elsewhere and return a pointer (Result.uri)",
                retryable=False,
            )
    # Cancellation beats success only when the run saw it: a run that never looked did the work.
    if reporter.cancelled.observed and reporter.cancel_requested:
        return _finish(reporter, common, state="cancelled", uri=uri, detail=encoded, outcome="cancelled")
    return _finish(reporter, common, state="succeeded", uri=uri, detail=encoded, all_done=True, outcome="succeeded")


def _failed(
    reporter: Reporter, common: Proof, exc: BaseException, attempt: Attempt, delay: float, *, retryable: bool
) -> str | None:
    """Record a failed attempt: released for a retry (None: not an end) or ended (the state recorded)."""
    code = exc.code if isinstance(exc, Fail) else CODE_INTERNAL
    message = exc.message if isinstance(exc, Fail) else f"{type(exc).__name__}: {exc}"
    if not retryable or attempt.final:
        if retryable:
            prefix = INTERNAL_PREFIX if code == CODE_INTERNAL else ""
            message = _clip(f"{prefix}{message} (after {attempt.number} attempts)")
            code = CODE_ATTEMPTS_EXHAUSTED
        return _finish(
            reporter, common, state="failed", code=code, message=message, retryable=retryable, exc=exc, cancel_wins=True
        )
    log.info("%s attempt %d failed (%s), retrying", reporter.op_id, attempt.number, code)
    try:
        if store.release(
            **common,
            progress=reporter.snapshot(),
            error_code=code,
            error_message=_clip(message),
            delay=delay,
            attempt=json.dumps(attempt_entry(exc, code, message, outcome="retried")),
            using=reporter.using,
        ):
            return None
    except Exception:
        log.exception(
            "%s: could not record the failed attempt; its lease will lapse and it will be retried", reporter.op_id
        )
        return None
    # Not released: cancellation was requested (or the hold is gone): finish as cancelled.
    return _finish(
        reporter, common, state="failed", code=code, message=message, retryable=True, exc=exc, cancel_wins=True
    )


def _decide_late(written: Operation, using: str) -> None:
    """The operation gained a dependent while it ran (its begin row said none, the row its end
    returned says some): decide its dependents now, in a second transaction. A failure here
    leaves them to ``recover`` (op_deps_due), which decides them once."""
    try:
        with transaction.atomic(using=using):
            deps.ended([written], using=using)
    except Exception:
        log.exception("%s: ended, but its dependents were not decided; recover will decide them", written.id)


def _finish(
    reporter: Reporter,
    common: Proof,
    *,
    state: str,
    code: str = "",
    message: str = "",
    retryable: bool = False,
    uri: str = "",
    detail: str | None = None,
    all_done: bool = False,
    exc: BaseException | None = None,
    cancel_wins: bool = False,
    outcome: str = "",
) -> str | None:
    """Record the end: the state written (``cancel_wins`` may make a failure cancelled), or None."""
    try:
        write = functools.partial(
            store.finish,
            **common,
            progress=reporter.snapshot(),
            state=state,
            error_code=code,
            error_message=_clip(message),
            error_retryable=retryable,
            result_uri=uri,
            result_detail=detail,
            all_done=all_done,
            cancel_wins=cancel_wins,
            attempt=json.dumps(attempt_entry(exc, code, message, outcome=outcome or state)),
            using=reporter.using,
        )
        began = reporter.operation
        if getattr(began, "parent_id", None) or getattr(began, "has_dependents", False):
            # A child, or a dependency: its end, the fan-in onto its parent and the decision
            # of its dependents commit together (operations.deps.ended).
            with transaction.atomic(using=reporter.using):
                written = write()
                if written:
                    deps.ended([written], using=reporter.using)
        else:
            written = write()  # the hot path: one statement
            if written is not None and written.has_dependents:
                _decide_late(written, reporter.using)
    except Exception:
        log.exception("%s: could not record its end; its lease will lapse and recover will re-offer it", reporter.op_id)
        return None
    if written is None:
        log.warning("%s: finished after losing its hold; its result was not recorded", reporter.op_id)
        return None
    reporter.saved = written
    return written.state
