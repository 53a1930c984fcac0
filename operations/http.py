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
import json

from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.module_loading import import_string
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from operations import service
from operations import watcher as watcher_mod
from operations.conf import ops_settings
from operations.exceptions import InvalidRequest, OperationNotFound, TooManyWatchers
from operations.models import Operation


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


def render(op: Operation) -> dict:
    """The public JSON shape of an operation (``request`` is never part of it)."""
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
        "error": None
        if error is None
        else {"code": error.code, "message": error.message, "retryable": error.retryable},
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


def _scoped(view):
    def wrapper(request, *args, **kwargs):
        owner = _owner(request)
        if owner is None:
            return error_response(401, "authentication_error", "log in to see your operations")
        try:
            return view(request, owner, *args, **kwargs)
        except OperationNotFound:
            return error_response(404, "not_found_error", "operation not found")
        except InvalidRequest as exc:
            return error_response(400, "invalid_request_error", str(exc))
        except TooManyWatchers as exc:
            response = error_response(503, "overloaded_error", str(exc))
            response["Retry-After"] = "5"
            return response

    wrapper.__name__ = view.__name__
    wrapper.__doc__ = view.__doc__
    return wrapper


def _int(value: str | None, name: str, default: int) -> int:
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidRequest(f"{name} must be an integer")


@require_GET
@_scoped
def list_operations(request, owner):
    """GET …/operations?kind=&state=&page_size=&page_token="""
    states = [s for value in request.GET.getlist("state") for s in value.split(",") if s]
    page, token = service.list(
        owner=owner,
        kind=request.GET.get("kind") or None,
        states=states or None,
        page_size=_int(request.GET.get("page_size"), "page_size", 50),
        page_token=request.GET.get("page_token") or None,
    )
    return JsonResponse({"operations": [render(op) for op in page], "nextPageToken": token})


@require_http_methods(["GET", "POST"])
def operation(request, op_id: str):
    """GET …/operations/{id}; POST …/operations/{id}:cancel."""
    if op_id.endswith(":cancel"):
        if request.method != "POST":
            return error_response(405, "invalid_request_error", "use POST to cancel")
        return cancel_operation(request, op_id.removesuffix(":cancel"))
    if request.method != "GET":
        return error_response(405, "invalid_request_error", "use GET to read an operation")
    return get_operation(request, op_id)


@_scoped
def get_operation(request, owner, op_id: str):
    return JsonResponse(render(service.get(op_id, owner=owner)))


@require_POST
@_scoped
def cancel_operation(request, owner, op_id: str):
    """POST …/operations/{id}/cancel (alias of {id}:cancel)."""
    return JsonResponse(render(service.cancel(op_id, owner=owner)))


def sse_event(op) -> str:
    if op is watcher_mod.GONE:
        return "event: gone\ndata: {}\n\n"
    return f"event: operation\nid: {op.revision}\ndata: {json.dumps(render(op), separators=(',', ':'))}\n\n"


def stream(sub, keepalive: float):
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
            yield sse_event(snapshot)
    finally:
        sub.close()


@require_GET
@_scoped
def watch_operation(request, owner, op_id: str):
    """GET …/operations/{id}/watch: Server-Sent Events, one per snapshot, ending after the terminal one."""
    sub = watcher_mod.shared().watch(op_id, owner=owner)
    return sse_response(sub)


def sse_response(sub) -> HttpResponse:
    response = StreamingHttpResponse(stream(sub, ops_settings().sse_keepalive), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
