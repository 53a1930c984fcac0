"""The HTTP read surface: list, get, cancel, and watch (Server-Sent Events), owner-scoped.

Every request is scoped to the owner ``OPERATIONS["OWNER_RESOLVER"]`` returns (default: the
logged-in user's pk). No owner → 401, never an unscoped query; another owner's operation is
404. The request an operation was started with is never rendered. Errors use the same
envelope as the wire API: ``{"type": "error", "error": {"type": ..., "message": ...}}``.

Serve the watch stream from threaded (gunicorn ``gthread``) or ASGI workers: each open
stream holds a thread while it waits on the process's one watcher.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging

from django.core.exceptions import BadRequest as DjangoBadRequest
from django.core.exceptions import SuspiciousOperation
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.module_loading import import_string

from operations import service
from operations import watcher as watcher_mod
from operations.conf import ops_settings
from operations.exceptions import InvalidRequest, OperationNotFound, TooManyWatchers
from operations.models import Operation
from operations.registry import KIND
from workqueue.wire import errors

log = logging.getLogger("operations.http")

CODE_INTERNAL = "internal"
CODE_ATTEMPTS_EXHAUSTED = "attempts_exhausted"
# The runner prefixes the message of an attempts_exhausted that carries an internal error with
# this, so the owner-facing shape can hide it too (see render()).
INTERNAL_PREFIX = "internal: "
INTERNAL_MESSAGE = "the run failed with an internal error; an operator can see the details"
RETRY_AFTER = 5  # seconds: the hint sent with a 503


def default_owner(request) -> str | None:
    """The logged-in user's pk as a string; None for anonymous requests."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return str(user.pk)


def _iso(value) -> str | None:
    if value is None:
        return None
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def public_error(error) -> dict | None:
    """An error as owners see it: an unclassified exception's text (which can name hosts,
    paths or queries) is replaced by a generic message; attempt_log and the admin keep it."""
    if error is None:
        return None
    message = error.message
    if error.code == CODE_INTERNAL:
        message = INTERNAL_MESSAGE
    elif error.code == CODE_ATTEMPTS_EXHAUSTED and message.startswith(INTERNAL_PREFIX):
        after = message.rsplit(" (after ", 1)
        attempts = f" after {after[1].rstrip(')')}" if len(after) == 2 else ""
        message = f"gave up{attempts}: {INTERNAL_MESSAGE}"
    return {"code": error.code, "message": message, "retryable": error.retryable}


def render(op: Operation, *, detail: bool = False) -> dict:
    """The public JSON shape of an operation (``request`` is never part of it).

    ``detail=True`` (the admin) keeps internal error text; owners never get it.
    """
    p = op.progress
    result = op.result
    error = op.error
    return {
        "id": op.id,
        "kind": op.kind,
        "state": op.state,
        "done": op.done,
        "owner": op.owner,
        "progress": {
            "unitsTotal": p.units_total,
            "unitsDone": p.units_done,
            "unit": p.unit,
            "message": p.message,
            "countLabel": p.count_label,
            "count": p.count,
        },
        "result": None if result is None else {"uri": result.uri, "detail": result.detail},
        "error": (
            None
            if error is None
            else {"code": error.code, "message": error.message, "retryable": error.retryable}
            if detail
            else public_error(error)
        ),
        "attempts": op.attempts,
        "cancelRequested": op.cancel_requested,
        "revision": op.revision,
        "createdAt": _iso(op.created_at),
        "updatedAt": _iso(op.updated_at),
        "startedAt": _iso(op.started_at),
        "finishedAt": _iso(op.finished_at),
    }


def error_response(status: int, kind: str, message: str) -> JsonResponse:
    return JsonResponse({"type": "error", "error": {"type": kind, "message": message}}, status=status)


def _owner(request) -> str | None:
    resolver = ops_settings().owner_resolver
    if isinstance(resolver, str):
        resolver = import_string(resolver)
    owner = resolver(request)
    return str(owner) if owner not in (None, "") else None


def api_error(exc: BaseException, what: str) -> errors.ApiError:
    """Map an exception raised while serving ``what`` onto the wire's error envelope."""
    if isinstance(exc, errors.ApiError):
        return exc
    if isinstance(exc, OperationNotFound):
        return errors.NotFound("operation not found")
    if isinstance(exc, InvalidRequest):
        return errors.BadRequest(str(exc))
    if isinstance(exc, TooManyWatchers):
        return errors.Overloaded(str(exc), retry_after=RETRY_AFTER)
    if isinstance(exc, OperationalError | InterfaceError):
        log.warning("%s: database unavailable", what, exc_info=True)
        unavailable = errors.Unavailable("the operations database is unavailable; nothing was changed, retry shortly")
        unavailable.headers["Retry-After"] = str(RETRY_AFTER)
        return unavailable
    if isinstance(exc, SuspiciousOperation | DjangoBadRequest):
        return errors.BadRequest(f"malformed request: {exc.__class__.__name__}")
    if isinstance(exc, DatabaseError):
        log.exception("%s: database error", what)
    else:
        log.exception("%s: unexpected error", what)
    return errors.ApiError()


def endpoint(*methods: str):
    """Wrap an owner-scoped view: method check (a JSON 405), owner (401), errors in the envelope."""

    def decorate(view):
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            try:
                if request.method not in methods:
                    raise errors.MethodNotAllowed(request.method, list(methods))
                owner = _owner(request)
                if owner is None:
                    raise errors.Unauthenticated("log in to see your operations")
                if "op_id" in kwargs:
                    kwargs["op_id"] = operation_id(kwargs["op_id"])
                return view(request, owner, *args, **kwargs)
            except Exception as exc:
                return api_error(exc, f"{request.method} {view.__name__}").response()

        return wrapper

    return decorate


def operation_id(value: str) -> str:
    """An operation id from the path, or InvalidRequest naming it."""
    return service.check_id(value)


def _text(value: str | None, name: str, max_length: int = 200) -> str | None:
    if value in (None, ""):
        return None
    if len(value) > max_length or "\x00" in value or not value.isprintable():
        raise InvalidRequest(f"{name} must be printable text of at most {max_length} characters")
    return value


def _int(value: str | None, name: str, default: int) -> int:
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidRequest(f"{name} must be an integer")


@endpoint("GET")
def list_operations(request, owner):
    """GET …/operations?kind=&state=&page_size=&page_token="""
    states = [s for value in request.GET.getlist("state") for s in value.split(",") if s]
    kind = _text(request.GET.get("kind"), "kind", max_length=128)
    if kind is not None and not KIND.match(kind):
        raise InvalidRequest(f"kind {kind!r} is not a kind name (lowercase letters, digits, '.', '-', '_')")
    page, token = service.list(
        owner=owner,
        kind=kind,
        states=states or None,
        page_size=_int(request.GET.get("page_size"), "page_size", 50),
        page_token=_text(request.GET.get("page_token"), "page_token", max_length=1024),
    )
    return JsonResponse({"operations": [render(op) for op in page], "nextPageToken": token})


def operation(request, op_id: str):
    """GET …/operations/{id}; POST …/operations/{id}:cancel."""
    if op_id.endswith(":cancel"):
        return cancel_operation(request, op_id=op_id.removesuffix(":cancel"))
    return get_operation(request, op_id=op_id)


@endpoint("GET")
def get_operation(request, owner, op_id: str):
    return JsonResponse(render(service.get(op_id, owner=owner)))


@endpoint("POST")
def cancel_operation(request, owner, op_id: str):
    """POST …/operations/{id}/cancel (alias of {id}:cancel)."""
    return JsonResponse(render(service.cancel(op_id, owner=owner)))


def sse_event(op, *, detail: bool = False) -> str:
    if op is watcher_mod.GONE:
        return "event: gone\ndata: {}\n\n"
    data = json.dumps(render(op, detail=detail), separators=(",", ":"))
    return f"event: operation\nid: {op.revision}\ndata: {data}\n\n"


def stream(sub, keepalive: float, *, detail: bool = False):
    """Yield SSE text for a subscription until its terminal snapshot (or the row is gone)."""
    try:
        while True:
            try:
                snapshot = sub.get(timeout=keepalive)
            except StopIteration:
                return
            if snapshot is None:
                yield ":\n\n"
                continue
            yield sse_event(snapshot, detail=detail)
    finally:
        sub.close()


@endpoint("GET")
def watch_operation(request, owner, op_id: str):
    """GET …/operations/{id}/watch: Server-Sent Events, one per snapshot, ending after the terminal one."""
    sub = watcher_mod.shared().watch(op_id, owner=owner)
    return sse_response(sub)


def sse_response(sub, *, detail: bool = False) -> HttpResponse:
    response = StreamingHttpResponse(
        stream(sub, ops_settings().sse_keepalive, detail=detail), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
