"""The HTTP read surface: list, get, cancel, and watch (Server-Sent Events), owner-scoped.

Every request is scoped to the owner ``OPERATIONS["OWNER_RESOLVER"]`` returns (default: the
logged-in user's pk). No owner → 401, never an unscoped query; another owner's operation is
404. The request an operation was started with is never rendered. Errors use the same
envelope as the wire API: ``{"type": "error", "error": {"type": ..., "message": ...}}``.

Serve the watch stream from threaded (gunicorn ``gthread``) or ASGI workers. Under WSGI each
open stream holds a thread while it waits on the process's one watcher; under ASGI it waits
on the event loop and holds neither a thread nor a database connection. Streams are capped
per user and per owner (``WATCH_MAX_PER_OWNER``, a user's admin and API streams together; 429
past it) and, under WSGI, per process (``WATCH_MAX_THREADS``, 503 past it), and end after
``WATCH_MAX_DURATION`` (the first event's ``retry:`` makes EventSource reconnect).
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import functools
import json
import logging
import threading
import time

from django.core.exceptions import BadRequest as DjangoBadRequest
from django.core.exceptions import SuspiciousOperation
from django.core.handlers.asgi import ASGIRequest
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.module_loading import import_string
from django.views.decorators.csrf import csrf_exempt

from operations import batches, service
from operations import watcher as watcher_mod
from operations.conf import ops_settings
from operations.exceptions import InvalidRequest, OperationNotFound, TooManyWatchers
from operations.models import Operation
from operations.registry import KIND
from operations.runner import CODE_ATTEMPTS_EXHAUSTED, CODE_INTERNAL, INTERNAL_PREFIX
from workqueue import values
from workqueue.wire import errors

log = logging.getLogger("operations.http")

INTERNAL_MESSAGE = "the run failed with an internal error; an operator can see the details"
RETRY_AFTER = 5  # seconds: the hint sent with a 429 or 503
SSE_RETRY_MS = 3000  # the reconnect delay a watch stream's first event asks EventSource for


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
        # Batches and chains: a child names its parent (and its place); an operation a
        # parent's end started names that parent; a parent counts its children by state.
        "parent": op.parent_id,
        "position": op.position,
        "follows": op.follows_id,
        "children": op.child_counts() if op.is_parent else None,
    }


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


class _CsrfCheck(CsrfViewMiddleware):
    """Django's own CSRF check, answering a refusal in the API's JSON envelope (Django's answer
    is the site's HTML 403 page, which an API client cannot read)."""

    def _reject(self, request, reason):
        return errors.Forbidden(
            f"CSRF check failed ({reason}): a session-authenticated POST must carry the csrftoken cookie's "
            "value in an X-CSRFToken header, as the site's own pages send it"
        ).response()


def _checked_view(request) -> HttpResponse:  # what process_view is asked about: not exempt
    return HttpResponse()


def csrf_refusal(request) -> HttpResponse | None:
    """Run Django's CSRF check on ``request`` (an unsafe method); the JSON 403 if it fails."""
    check = _CsrfCheck(lambda request: HttpResponse())
    if "CSRF_COOKIE" not in request.META:  # CsrfViewMiddleware is not installed: read the cookie here
        check.process_request(request)
    return check.process_view(request, _checked_view, (), {})


def endpoint(*methods: str):
    """Wrap an owner-scoped view: method check (a JSON 405), Django's CSRF check on a POST (a
    JSON 403; the view is exempt from the middleware's HTML one), owner (401), errors in the
    envelope."""

    def decorate(view):
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            try:
                if request.method not in methods:
                    raise errors.MethodNotAllowed(request.method, list(methods))
                if request.method not in ("GET", "HEAD", "OPTIONS", "TRACE"):
                    refused = csrf_refusal(request)
                    if refused is not None:
                        return refused
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
    """A query parameter read as a count (``workqueue.values``: ASCII digits only); the
    service checks its range."""
    if value in (None, ""):
        return default
    return values.count(value, what=name, minimum=values.MIN_INT32, describe="an integer", error=InvalidRequest)


@endpoint("GET")
def list_operations(request, owner):
    """GET …/operations?kind=&state=&page_size=&page_token="""
    states = [s for value in request.GET.getlist("state") for s in value.split(",") if s]
    kind = _text(request.GET.get("kind"), "kind", max_length=128)
    if kind is not None and not KIND.match(kind):
        raise InvalidRequest(f"kind {kind!r} is not a kind name (lowercase letters, digits, '.', '-', '_')")
    page, token = service.list_operations(
        owner=owner,
        kind=kind,
        states=states or None,
        page_size=_int(request.GET.get("page_size"), "page_size", 50),
        page_token=_text(request.GET.get("page_token"), "page_token", max_length=1024),
    )
    return JsonResponse({"operations": [render(op) for op in page], "nextPageToken": token})


@csrf_exempt  # cancel_operation runs the CSRF check, answering in JSON
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


@endpoint("GET")
def list_children(request, owner, op_id: str):
    """GET …/operations/{id}/children?page_size=&after= : a batch's or chain's children in order."""
    after = request.GET.get("after")
    page, next_after = batches.children(
        op_id,
        owner=owner,
        after=None if after in (None, "") else _int(after, "after", 0),
        limit=_int(request.GET.get("page_size"), "page_size", 100),
    )
    return JsonResponse({"children": [render(op) for op in page], "nextAfter": next_after})


def sse_event(op, *, detail: bool = False) -> str:
    if op is watcher_mod.GONE:
        return "event: gone\ndata: {}\n\n"
    data = json.dumps(render(op, detail=detail), separators=(",", ":"))
    return f"event: operation\nid: {op.revision}\ndata: {data}\n\n"


class StreamSlots:
    """The watch streams open in this process: per key (a user, an owner) capped by
    ``WATCH_MAX_PER_OWNER`` (429), and those that hold a server thread (WSGI) capped by
    ``WATCH_MAX_THREADS`` across every key (503), so watchers can never take every thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._open: collections.Counter[str] = collections.Counter()
        self._threads = 0

    def acquire(self, keys: tuple[str, ...], *, holds_thread: bool) -> None:
        """Take a slot under every one of ``keys`` (and a thread slot), or raise a 429 / 503."""
        conf = ops_settings()
        with self._lock:
            if any(self._open[key] >= conf.watch_max_per_owner for key in keys):
                raise errors.TooManyRequests(
                    f"you already have {conf.watch_max_per_owner} watch streams open (OPERATIONS"
                    "['WATCH_MAX_PER_OWNER'], counting the admin's live panels and the API's streams together); "
                    "close one or retry later",
                    retry_after=RETRY_AFTER,
                )
            if holds_thread and self._threads >= conf.watch_max_threads:
                raise errors.Overloaded(
                    f"this server process already serves {conf.watch_max_threads} watch streams "
                    "(OPERATIONS['WATCH_MAX_THREADS']; each holds a thread under WSGI); retry shortly "
                    "(an ASGI server holds no thread per stream)",
                    retry_after=RETRY_AFTER,
                )
            for key in keys:
                self._open[key] += 1
            if holds_thread:
                self._threads += 1

    def release(self, keys: tuple[str, ...], *, holds_thread: bool) -> None:
        with self._lock:
            for key in keys:
                self._open[key] -= 1
                if self._open[key] <= 0:
                    del self._open[key]
            if holds_thread:
                self._threads -= 1

    def open(self, key: str) -> int:
        """How many streams ``key`` holds open now."""
        with self._lock:
            return self._open[key]

    def threads(self) -> int:
        """How many open streams hold a thread now."""
        with self._lock:
            return self._threads


stream_slots = StreamSlots()


def stream_keys(request, owner: str | None) -> tuple[str, ...]:
    """Whom a new stream counts against: the logged-in user (their admin and API streams
    together) and, for the API, the owner the resolver named (which may be shared by users)."""
    keys = []
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        keys.append(f"user:{user.pk}")
    if owner is not None:
        keys.append(f"owner:{owner}")
    return tuple(keys)


class _Stream:
    """One watch stream: SSE text for a subscription until its terminal snapshot, the row is
    gone, or ``WATCH_MAX_DURATION`` passes (then it just ends and EventSource reconnects after
    the ``retry:`` it was sent). ``close()`` (Django calls it when the response is closed, also
    when it was never iterated) ends the subscription and gives its slots back."""

    holds_thread = False

    def __init__(self, sub, keys: tuple[str, ...], *, detail: bool):
        conf = ops_settings()
        self.sub = sub
        self.keys = keys
        self.detail = detail
        self.keepalive = conf.sse_keepalive
        self.max_duration = conf.watch_max_duration
        self._lock = threading.Lock()
        self._released = False
        self._closed = False
        self._first = True

    def _event(self, snapshot) -> str:
        text = sse_event(snapshot, detail=self.detail)
        if self._first:  # tell EventSource how soon to reconnect when the stream is cut
            self._first = False
            text = text[:-1] + f"retry: {SSE_RETRY_MS}\n\n"
        return text

    def _release(self) -> None:
        """Give the stream's slots back (memory only: safe on an event loop)."""
        with self._lock:
            if self._released:
                return
            self._released = True
        stream_slots.release(self.keys, holds_thread=self.holds_thread)

    def close(self) -> None:
        """End the subscription (its follow row too) and give the slot back (idempotent)."""
        with self._lock:
            closed, self._closed = self._closed, True
        if not closed:
            try:
                self.sub.close()
            finally:
                self._release()


class SyncStream(_Stream):
    """The stream for WSGI servers: one thread per open stream, bounded by ``WATCH_MAX_THREADS``.

    A WSGI application hears that its client hung up only when a write fails (the server then
    closes the response, which closes this stream), so while idle it writes a ``:`` comment
    every ``SSE_WSGI_KEEPALIVE`` (1 s) rather than every ``SSE_KEEPALIVE``: a hung-up stream
    gives its thread back within about two of those (the first write after a hang-up is
    taken by the kernel; the peer's reset makes the next one fail)."""

    holds_thread = True

    def __init__(self, sub, keys: tuple[str, ...], *, detail: bool):
        super().__init__(sub, keys, detail=detail)
        self.keepalive = min(self.keepalive, ops_settings().sse_wsgi_keepalive)

    def __iter__(self):
        return self._run()

    def _run(self):
        try:
            deadline = time.monotonic() + self.max_duration
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    snapshot = self.sub.get(timeout=min(self.keepalive, remaining))
                except StopIteration:
                    return
                if snapshot is None:
                    if deadline - time.monotonic() > 0:
                        yield ":\n\n"
                    continue
                yield self._event(snapshot)
        finally:
            self.close()


class AsyncStream(_Stream):
    """The stream for ASGI servers: waits on the event loop, holding no thread and no database
    connection; when the client disconnects Django cancels it and then closes the response."""

    def __aiter__(self):
        return self._run()

    async def _run(self):
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.max_duration
            while (remaining := deadline - loop.time()) > 0:
                try:
                    snapshot = await self.sub.aget(min(self.keepalive, remaining))
                except watcher_mod.Ended:
                    return
                if snapshot is None:
                    if deadline - loop.time() > 0:
                        yield ":\n\n"
                    continue
                yield self._event(snapshot)
        finally:
            # No database work on the event loop: the slot now, the subscription (and its
            # follow row) when Django closes the response, in a thread.
            self._release()


@endpoint("GET")
def watch_operation(request, owner, op_id: str):
    """GET …/operations/{id}/watch: Server-Sent Events, one per snapshot, ending after the terminal one."""
    return watch_response(request, op_id, owner=owner)


def watch_response(
    request, op_id: str, *, owner: str | None, detail: bool = False
) -> HttpResponse | StreamingHttpResponse:
    """Open a watch stream on ``op_id`` (scoped to ``owner`` unless None, as for the admin);
    a 429 past the user's or owner's cap, a 503 past the process's thread cap (WSGI)."""
    keys = stream_keys(request, owner)
    holds_thread = not isinstance(request, ASGIRequest)
    stream_slots.acquire(keys, holds_thread=holds_thread)
    try:
        sub = watcher_mod.shared().watch(op_id, owner=owner)
    except BaseException:
        stream_slots.release(keys, holds_thread=holds_thread)
        raise
    if holds_thread:
        return sse_response(SyncStream(sub, keys, detail=detail))
    # The stream itself reads nothing (the process's watcher does): let go of this request's
    # connections now rather than when the stream ends, minutes or a hang-up later.
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close()
    return sse_response(AsyncStream(sub, keys, detail=detail))


def sse_response(content) -> StreamingHttpResponse:
    response = StreamingHttpResponse(content, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
