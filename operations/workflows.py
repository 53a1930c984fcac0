"""Durable workflows: plain functions whose steps are checkpointed in PostgreSQL.

    @operations.step()
    def create_account(email: str) -> dict: ...

    @operations.workflow("accounts.onboard")
    def onboard(request: dict, wf: operations.Workflow) -> dict:
        account = create_account(request["email"])   # recorded once; a resumed run gets the record
        wf.sleep(3600)                               # the worker slot is free until then
        approval = wf.wait("approved", timeout=86400)
        return {"account": account["id"], "approved_by": approval and approval["by"]}

    op = operations.start("accounts.onboard", {"email": "a@example.com"})
    operations.signal(op.id, "approved", {"by": "ops@example.com"})

A workflow is an operation (start, get, list, watch, cancel, the HTTP API, retention and the
admin all apply) whose run records what it did in the steps table, one row per position:

- **Replay.** A run starts the function from the top. Each step call takes the next position;
  a position already recorded returns its recorded result without running (a recorded final
  error raises ``StepFailed`` again), a new one runs and records. The code outside steps must
  be deterministic: a resumed run that calls another step at a recorded position fails with
  code ``nondeterministic``, naming both. Results are stored as JSON and returned as JSON gives
  them back (a tuple comes back a list), on the first run as on a replay.
- **At least once, or exactly once.** A plain step interrupted by a crash runs again (its
  checkpoint was not written); with ``transaction=True`` the body and its checkpoint commit in
  one transaction, so the step's database effects happen exactly once.
- **Retries.** ``@step(retries=3, backoff=2.0)`` retries a failing call in place (2 s, 4 s, 8 s)
  before recording its error. A step's final error fails the workflow (``StepFailed``: the
  ``Fail`` code it raised, else ``step_failed``; not retried) unless the workflow catches it.
- **Waiting frees the worker.** ``wf.sleep`` and ``wf.wait`` record the wait, end the run
  without charging an attempt and give its work item back, due at the wake time (or when a
  signal arrives, or at the timeout): no thread, connection or lease is held while it waits.
  A signal sent before the workflow reaches its ``wait`` is kept; signals of one name are taken
  in the order they were sent.
- **Versioning.** ``wf.patched("name")`` is True for runs that reach it for the first time
  (and records so), False for runs that had already gone past that point with older code.

A step called outside a workflow (a test, a shell) just runs. A step called inside another
step runs as part of it (one checkpoint). ``async def`` workflows take an ``AsyncWorkflow``
(``await wf.sleep(...)``) and call ``async def`` steps; ``transaction=True`` needs a sync step.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime as dt
import functools
import json
from collections.abc import Callable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, transaction

from operations import service, store
from operations.exceptions import InvalidDefinition, InvalidRequest
from operations.ids import check_id, new_id
from operations.registry import MAX_REQUEST_BYTES, registry
from operations.runner import Fail, Suspended, Unretryable, is_unretryable
from workqueue.conf import wq_settings
from workqueue.states import StopReason
from workqueue.worker.pools.eventloop import is_async, off_loop

CODE_NONDETERMINISTIC = "nondeterministic"
CODE_STEP_FAILED = "step_failed"
CODE_NOT_HELD = "lease_lost"
MAX_NAME = 200
MAX_ERROR_MESSAGE = 1024

_current: contextvars.ContextVar[Workflow | None] = contextvars.ContextVar("operations_workflow", default=None)
_in_step: contextvars.ContextVar[bool] = contextvars.ContextVar("operations_in_step", default=False)


class StepFailed(Fail):
    """A step's final error (after its retries), recorded: raised again on every replay."""

    def __init__(self, step: str, code: str, message: str):
        super().__init__(code, f"step {step} failed: {message}", retryable=False)
        self.step = step


class WorkflowStopped(Exception):
    """The run was told to stop (cancelled, shutting down, its lease lost) before its next
    step: it goes no further. ``reason`` is the stop reason."""

    def __init__(self, reason: str):
        super().__init__(f"the workflow run was stopped ({reason}) before its next step")
        self.reason = reason


def _nondeterministic(position: int, recorded: dict, kind: str, name: str) -> Unretryable:
    return Unretryable(
        Fail(
            CODE_NONDETERMINISTIC,
            f"step {position} is recorded as {recorded['kind']} {recorded['name']!r} but this run called "
            f"{kind} {name!r}: code outside steps must take the same path on every run (use wf.patched() "
            "to change a workflow's code under runs already started)",
            retryable=False,
        )
    )


def _encode(value: Any, what: str) -> str:
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Unretryable(Fail("result_not_json", f"{what} is not JSON-serialisable: {exc}", retryable=False))
    if len(text.encode()) > MAX_REQUEST_BYTES:
        raise Unretryable(
            Fail(
                "result_too_large",
                f"{what} is {len(text.encode()):,} bytes, over {MAX_REQUEST_BYTES:,}: return a reference",
                retryable=False,
            )
        )
    return text


def _error_of(exc: BaseException) -> dict:
    code = exc.code if isinstance(exc, Fail) else CODE_STEP_FAILED
    message = exc.message if isinstance(exc, Fail) else f"{type(exc).__name__}: {exc}"
    return {
        "code": code,
        "message": message[:MAX_ERROR_MESSAGE],
        "exception": f"{type(exc).__module__}.{type(exc).__qualname__}",
    }


@dataclasses.dataclass(frozen=True)
class StepOptions:
    name: str
    transaction: bool = False
    retries: int = 0
    backoff: float = 1.0

    def delay(self, retry: int) -> float:
        """Seconds before retry number ``retry`` (1-based): backoff, doubled each time."""
        return self.backoff * 2 ** (retry - 1)


class Workflow:
    """What a workflow function gets as ``wf``: its checkpoints, waits and signals.

    ``id`` is the operation's id; ``reporter`` its progress reporter (``wf.reporter.say(...)``);
    ``stop_reason`` why the run was told to stop, if it was."""

    def __init__(self, reporter, recorded: dict[int, store.StepRow]):
        self.reporter = reporter
        reporter.keepalive = True  # its steps may be long and quiet: the lease is kept regardless
        self.id: str = reporter.op_id
        self.using: str = reporter.using
        self._token = reporter.token
        self._recorded = recorded
        self._next = 0

    # -- the workflow's verbs -----------------------------------------------------------

    @property
    def stop_reason(self):
        return self.reporter.stop_reason

    def step_key(self) -> str:
        """A key stable for the next step across this run's resumes (``<id>:<position>``): pass it
        as an idempotency key to an API the step calls. A fork has its own id, so its own keys."""
        return f"{self.id}:{self._next}"

    def sleep(self, seconds: float | dt.timedelta) -> None:
        """Wait ``seconds`` durably: the run ends here and resumes (from the top, replaying)
        once they have passed; no worker is held meanwhile."""
        outcome = self._sleep(seconds)
        if isinstance(outcome, Suspended):
            raise outcome

    def wait(self, name: str, timeout: float | dt.timedelta | None = None):
        """Wait durably for ``operations.signal(id, name, payload)``; return its payload, or None
        when ``timeout`` seconds passed first (None: no timeout). A signal sent earlier is kept."""
        outcome = self._wait(name, timeout)
        if isinstance(outcome, Suspended):
            raise outcome
        return outcome

    def patched(self, name: str) -> bool:
        """True for a run reaching this point for the first time (the answer is recorded), False
        for a run that had already gone past it under older code (it keeps the old path)."""
        return self._patched(name)

    def start(self, kind: str, request=None, **options):
        """Start a child operation once (a recorded step): a resumed run gets the same one
        back. Cancelling the workflow cancels it. Returns the Operation."""
        return self._start(kind, request, options)

    # -- the machinery, shared with AsyncWorkflow (which runs these off its loop) --------

    def _claim(self, kind: str, name: str) -> tuple[int, store.StepRow | None]:
        """Take the next position for a step of ``kind`` and ``name``: (position, its record)."""
        self._may_record(kind)
        position = self._next
        self._next += 1
        row = self._recorded.get(position)
        if row is not None and (row["kind"], row["name"]) != (kind, name):
            raise _nondeterministic(position, dict(row), kind, name)
        return position, row

    def _may_record(self, kind: str) -> None:
        """Refuse a record inside a step's body, or once the run was told to stop."""
        if _in_step.get():
            raise InvalidRequest(f"wf.{kind} cannot be called inside a step: call it from the workflow itself")
        if self.reporter.stop_reason is not None:
            raise WorkflowStopped(str(self.reporter.stop_reason))

    def _save(self, position: int, name: str, kind: str, state: str, **fields) -> tuple[dt.datetime | None, bool]:
        saved = store.step_save(
            id=self.id,
            token=self._token,
            position=position,
            name=name,
            kind=kind,
            state=state,
            using=self.using,
            **fields,
        )
        if saved is None:
            raise WorkflowStopped(CODE_NOT_HELD)
        return saved

    def _sleep(self, seconds) -> Suspended | None:
        seconds = _seconds(seconds, "wf.sleep")
        position, row = self._claim("sleep", "sleep")
        if row is not None and row["state"] == "succeeded":
            return None
        if row is None:
            wake_at, due = self._save(position, "sleep", "sleep", "waiting", wait_s=seconds)
        else:
            wake_at, due = row["wake_at"], row["due"]
        if due:
            self._save(position, "sleep", "sleep", "succeeded", keep_wake=True)
            return None
        return Suspended("sleep", "", wake_at)

    def _wait(self, name: str, timeout) -> Any:
        name = _name(name, "wf.wait")
        timeout = None if timeout is None else _seconds(timeout, "wf.wait timeout")
        position, row = self._claim("wait", name)
        if row is not None and row["state"] in ("succeeded", "timed_out"):
            return row["result"]
        taken, payload = store.step_take_signal(
            id=self.id, token=self._token, position=position, name=name, using=self.using
        )
        if taken:
            return payload
        if row is None:
            wake_at, due = self._save(position, name, "wait", "waiting", wait_s=timeout)
        else:
            wake_at, due = row["wake_at"], row["due"]
        if due:
            self._save(position, name, "wait", "timed_out", keep_wake=True)
            return None
        return Suspended("signal", name, wake_at)

    def _patched(self, name: str) -> bool:
        name = _name(name, "wf.patched")
        self._may_record("patched")
        row = self._recorded.get(self._next)
        if row is None:
            self._save(self._next, name, "patch", "succeeded", result="true")
            self._next += 1
            return True
        if (row["kind"], row["name"]) == ("patch", name):
            self._next += 1
            return bool(row["result"])
        return False  # this position holds what an older run did here: it keeps the old path

    def _start(self, kind: str, request, options: dict):
        position, row = self._claim("child", kind)
        if row is not None and row["state"] == "succeeded":
            return service.get(row["result"]["id"], using=self.using)
        child_id = options.pop("id", None) or f"{self.id}:{position}"
        with transaction.atomic(using=self.using):
            op = service.start(kind, request, id=child_id, using=self.using, **options)
            self._save(position, kind, "child", "succeeded", result=json.dumps({"id": op.id}))
        return op

    # -- steps ------------------------------------------------------------------------

    def _replayed(self, options: StepOptions) -> tuple[int, bool, Any]:
        """(position, recorded, value): a recorded success's value; a recorded failure raises."""
        position, row = self._claim("step", options.name)
        if row is None or row["state"] not in ("succeeded", "failed"):
            return position, False, None
        if row["state"] == "failed":
            error = row["error"] or {}
            raise StepFailed(options.name, error.get("code") or CODE_STEP_FAILED, error.get("message", ""))
        return position, True, row["result"]

    def _begin_call(self, position: int, options: StepOptions) -> None:
        begun = store.step_begin(id=self.id, token=self._token, position=position, name=options.name, using=self.using)
        if begun is None:
            raise WorkflowStopped(CODE_NOT_HELD)
        if begun[1]:
            self.reporter.cancel_requested = True
            self.reporter.signal_stop(StopReason.CANCEL_REQUESTED)
            raise WorkflowStopped(StopReason.CANCEL_REQUESTED)

    def _record_call(self, position: int, options: StepOptions, value) -> Any:
        text = _encode(value, f"the result of step {options.name}")
        self._save(position, options.name, "step", "succeeded", result=text)
        return json.loads(text)

    def _record_failure(self, position: int, options: StepOptions, exc: BaseException) -> StepFailed:
        error = _error_of(exc)
        self._save(position, options.name, "step", "failed", error=json.dumps(error))
        return StepFailed(options.name, error["code"], error["message"])

    def _may_retry(self, options: StepOptions, retry: int, exc: BaseException) -> bool:
        return retry <= options.retries and not is_unretryable(exc) and self.reporter.stop_reason is None

    def run_step(self, options: StepOptions, fn: Callable, args, kwargs):
        position, recorded, value = self._replayed(options)
        if recorded:
            return value
        retry = 0
        while True:
            self._begin_call(position, options)
            try:
                if options.transaction:
                    with transaction.atomic(using=self.using):
                        return self._record_call(position, options, _body(fn, args, kwargs))
                return self._record_call(position, options, _body(fn, args, kwargs))
            except WorkflowStopped:
                raise
            except Exception as exc:
                retry += 1
                if not self._may_retry(options, retry, exc):
                    raise self._record_failure(position, options, _unwrapped(exc)) from exc
                if self.reporter.cancelled.wait(options.delay(retry)):
                    raise WorkflowStopped(str(self.reporter.stop_reason)) from exc


def _unwrapped(exc: BaseException) -> BaseException:
    return exc.unwrap() if isinstance(exc, Unretryable) else exc


def _body(fn: Callable, args, kwargs):
    token = _in_step.set(True)
    try:
        return fn(*args, **kwargs)
    finally:
        _in_step.reset(token)


class AsyncWorkflow(Workflow):
    """``wf`` of an ``async def`` workflow: the same verbs, awaited."""

    async def sleep(self, seconds: float | dt.timedelta) -> None:  # type: ignore[override]
        outcome = await off_loop(self._sleep, seconds)
        if isinstance(outcome, Suspended):
            raise outcome

    async def wait(self, name: str, timeout: float | dt.timedelta | None = None):
        outcome = await off_loop(self._wait, name, timeout)
        if isinstance(outcome, Suspended):
            raise outcome
        return outcome

    async def patched(self, name: str) -> bool:  # type: ignore[override]
        return await off_loop(self._patched, name)

    async def start(self, kind: str, request=None, **options):
        return await off_loop(self._start, kind, request, options)

    async def run_async_step(self, position: int, options: StepOptions, fn: Callable, args, kwargs):
        retry = 0
        while True:
            await off_loop(self._begin_call, position, options)
            token = _in_step.set(True)
            try:
                value = await fn(*args, **kwargs)
            except WorkflowStopped:
                raise
            except Exception as exc:
                retry += 1
                if not self._may_retry(options, retry, exc):
                    raise await off_loop(self._record_failure, position, options, _unwrapped(exc)) from exc
                await asyncio.sleep(options.delay(retry))
                continue
            finally:
                _in_step.reset(token)
            return await off_loop(self._record_call, position, options, value)


def _seconds(value, what: str) -> float:
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != value:
        raise InvalidRequest(f"{what} takes a number of seconds >= 0 or a timedelta, not {value!r}")
    return float(value)


def _name(value, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise InvalidRequest(f"{what} takes a non-empty name of at most {MAX_NAME} characters, not {value!r}")
    return value


# -- the decorators ---------------------------------------------------------------------


def step(name: str | None = None, *, transaction: bool = False, retries: int = 0, backoff: float = 1.0):
    """Make ``fn`` a checkpointed step: inside a workflow its JSON result is recorded once per
    run (``transaction=True``: its body and the record commit together, exactly once);
    ``retries`` times it is retried in place, ``backoff`` seconds first, doubling."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidDefinition(f"step retries must be an integer >= 0, not {retries!r}")
    if isinstance(backoff, bool) or not isinstance(backoff, int | float) or backoff < 0:
        raise InvalidDefinition(f"step backoff must be a number of seconds >= 0, not {backoff!r}")

    def wrap(fn: Callable) -> Callable:
        options = StepOptions(
            name=_name(name or fn.__qualname__, "step"), transaction=transaction, retries=retries, backoff=backoff
        )
        if is_async(fn):
            if transaction:
                raise InvalidDefinition(
                    f"step {options.name}: transaction=True needs a sync step (its body and its record "
                    "share one connection); make it a def, or drop transaction=True"
                )
            return _async_step(fn, options)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            wf = _current.get()
            if wf is None or _in_step.get():
                return fn(*args, **kwargs)
            if isinstance(wf, AsyncWorkflow):
                raise InvalidDefinition(
                    f"step {options.name} is a def called from an async def workflow: make it async def "
                    "(a sync step would block the event loop)"
                )
            return wf.run_step(options, fn, args, kwargs)

        call.step_options = options  # type: ignore[attr-defined]
        return call

    return wrap


def _async_step(fn: Callable, options: StepOptions) -> Callable:
    @functools.wraps(fn)
    def call(*args, **kwargs):
        wf = _current.get()
        if wf is None or _in_step.get():
            return fn(*args, **kwargs)
        if not isinstance(wf, AsyncWorkflow):
            raise InvalidDefinition(f"step {options.name} is async def: call it from an async def workflow")
        # The position is taken now, at the call, so steps gathered together keep call order.
        position, recorded, value = wf._replayed(options)
        if recorded:
            return _value(value)
        return wf.run_async_step(position, options, fn, args, kwargs)

    call.step_options = options  # type: ignore[attr-defined]
    return call


async def _value(value):
    return value


def workflow(kind: str, **options):
    """Register ``fn(request, wf)`` as the workflow kind ``kind`` (options as for ``register``)."""

    def wrap(fn: Callable) -> Callable:
        if is_async(fn):

            async def run(request, reporter):
                recorded = await off_loop(store.step_list, id=reporter.op_id, using=reporter.using)
                wf = AsyncWorkflow(reporter, recorded)
                token = _current.set(wf)
                try:
                    return await fn(request, wf)
                finally:
                    _current.reset(token)

        else:

            def run(request, reporter):  # type: ignore[misc]
                wf = Workflow(reporter, store.step_list(id=reporter.op_id, using=reporter.using))
                token = _current.set(wf)
                try:
                    return fn(request, wf)
                finally:
                    _current.reset(token)

        functools.update_wrapper(run, fn)
        registry.register(kind, run, workflow=True, **options)
        return fn

    return wrap


# -- signals, steps, forks --------------------------------------------------------------


def signal(op_id: str, name: str, payload=None, *, using: str = DEFAULT_DB_ALIAS) -> int:
    """Send ``name`` (with a JSON ``payload``) to workflow ``op_id``; return the signal's id.

    Durable and transactional: it joins the caller's transaction. A workflow waiting for
    ``name`` is woken at commit; one not there yet takes it when it reaches its ``wait``."""
    name = _name(name, "signal")
    try:
        _encode(payload, "the signal payload")
    except Unretryable as exc:
        raise InvalidRequest(str(exc.exception)) from None
    signal_id = store.signal(
        id=check_id(op_id), name=name, payload=payload, queue_channel=wq_settings().notify_channel, using=using
    )
    if signal_id is not None:
        return signal_id
    op = service.get(op_id, using=using)  # raises OperationNotFound
    if not op.workflow:
        raise InvalidRequest(f"operation {op_id!r} is a {op.kind}, not a workflow: only workflows take signals")
    raise InvalidRequest(f"workflow {op_id!r} is {op.state}: signals reach only unfinished workflows")


def steps(op_id: str, *, using: str = DEFAULT_DB_ALIAS):
    """The steps workflow ``op_id`` recorded, in order (``OperationStep`` rows: name, position,
    kind, state, attempts, started_at, finished_at, result, error)."""
    from operations.models import OperationStep

    return list(OperationStep.objects.using(using).filter(op_id=op_id).order_by("position"))


def signals(op_id: str, *, using: str = DEFAULT_DB_ALIAS):
    """The signals sent to workflow ``op_id``, oldest first (taken or not)."""
    from operations.models import OperationSignal

    return list(OperationSignal.objects.using(using).filter(op_id=op_id).order_by("id"))


def fork(op_id: str, *, from_step: int, id: str | None = None, using: str = DEFAULT_DB_ALIAS):
    """Start a new run of workflow ``op_id`` with its steps before ``from_step`` copied (they
    return their recorded results) and the rest run anew; return the new Operation."""
    source = service.get(op_id, using=using)
    if not source.workflow:
        raise InvalidRequest(f"operation {op_id!r} is a {source.kind}, not a workflow: only workflows fork")
    if isinstance(from_step, bool) or not isinstance(from_step, int) or from_step < 0:
        raise InvalidRequest(f"from_step must be a step position >= 0, not {from_step!r}")
    new = store.fork(
        id=check_id(id) if id is not None else new_id(),
        source=op_id,
        from_step=from_step,
        queue_channel=wq_settings().notify_channel,
        using=using,
    )
    if new is None:
        raise InvalidRequest(f"operation id {id!r} is already used; choose another id")
    return new


child_ids = service.child_ids


__all__ = [
    "AsyncWorkflow",
    "StepFailed",
    "Workflow",
    "WorkflowStopped",
    "child_ids",
    "fork",
    "signal",
    "signals",
    "step",
    "steps",
    "workflow",
]
