"""The wire endpoints: plain function views, JSON in and out, token auth (so no CSRF).

Each view parses its input (``serializers``), calls one ``WorkItem.objects`` verb and renders
the result. :func:`endpoint` does the rest once for all of them: method check, path ids,
authentication, and turning every refusal into the Anthropic error envelope, so no input
can produce a bare 500.
"""

from __future__ import annotations

import functools
import logging

from django.core.exceptions import BadRequest as DjangoBadRequest
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.handlers.asgi import ASGIRequest
from django.db import DatabaseError, InterfaceError, OperationalError, transaction
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from workqueue.exceptions import InvalidInput, TooManyPollers, WorkqueueError
from workqueue.models import WorkItem
from workqueue.wire import errors, serializers
from workqueue.wire.auth import API, ENVIRONMENT, authenticate
from workqueue.wire.store import LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT, RESERVE_DEFAULT_MS, RESERVE_MAX_MS

log = logging.getLogger("workqueue.wire")

MAX_BODY_BYTES = 64 * 1024
EITHER = (ENVIRONMENT, API)


#: The largest desired_ttl_seconds accepted (then clamped to HEARTBEAT_TTL_MAX); larger is a 400.
MAX_DESIRED_TTL = 2**31 - 1


def endpoint(**methods: tuple[str, ...]):
    """Wrap a view: ``methods`` maps each HTTP method to the key kinds it accepts."""

    def decorate(fn):
        # Token auth, so no CSRF; and never inside ATOMIC_REQUESTS: a blocked poll must hold
        # no transaction, and each verb commits its own.
        @csrf_exempt
        @transaction.non_atomic_requests
        @functools.wraps(fn)
        def view(request, environment_id: str, work_id: str | None = None):
            try:
                accepts = methods.get(request.method)
                if accepts is None:
                    raise errors.MethodNotAllowed(request.method, sorted(methods))
                env_id = serializers.environment_id(environment_id)
                if work_id is not None:
                    work_id = serializers.work_id(work_id)
                caller = authenticate(request, env_id, accepts)
                args = (request, caller) if work_id is None else (request, caller, work_id)
                return fn(*args)
            except errors.ApiError as exc:
                return exc.response()
            except WorkqueueError as exc:
                mapped = errors.from_domain(exc)
                if mapped is None:
                    log.exception("wire %s %s: unmapped %s", request.method, fn.__name__, type(exc).__name__)
                    mapped = errors.ApiError()
                return mapped.response()
            except (OperationalError, InterfaceError):
                log.warning("wire %s %s: database unavailable", request.method, fn.__name__, exc_info=True)
                return errors.Unavailable().response()
            except (SuspiciousOperation, DjangoBadRequest) as exc:
                return errors.BadRequest(f"malformed request: {exc.__class__.__name__}").response()
            except DatabaseError:
                log.exception("wire %s %s: database error", request.method, fn.__name__)
                return errors.ApiError().response()
            except Exception:
                log.exception("wire %s %s: unexpected error", request.method, fn.__name__)
                return errors.ApiError().response()

        return view

    return decorate


def _query(request, name: str):
    return request.GET.get(name)


def _raw_body(request) -> bytes:
    """The whole request body, whatever its framing, or a refusal: never a body left unread.

    Django reads a WSGI body by its Content-Length, so a ``Transfer-Encoding`` (chunked) body
    reads as empty there. A server that de-chunks and ends the input (``wsgi.input_terminated``,
    as gunicorn sets it) lets it be read to its end; any other is a 411. Under ASGI the server
    hands Django the whole body, framed as it may be.
    """
    too_large = errors.RequestTooLarge(f"the request body must be at most {MAX_BODY_BYTES} bytes")
    framed = "HTTP_TRANSFER_ENCODING" in request.META and not isinstance(request, ASGIRequest)
    if framed:
        if not request.META.get("wsgi.input_terminated"):
            raise errors.LengthRequired()
        raw = request.META["wsgi.input"].read(MAX_BODY_BYTES + 1)
        if len(raw) > MAX_BODY_BYTES:
            raise too_large
        return raw
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_BODY_BYTES:
        raise too_large
    try:
        raw = request.body
    except RequestDataTooBig:
        raise too_large
    if len(raw) > MAX_BODY_BYTES:
        raise too_large
    return raw


def _body(request, allowed: tuple[str, ...]) -> dict:
    return serializers.json_body(_raw_body(request), allowed=allowed)


def _json(data, status: int = 200) -> JsonResponse:
    return JsonResponse(data, status=status, safe=False)


def _record_poll(environment_id: str, worker_id: str) -> None:
    # Telemetry: a failure here is logged and never fails the poll. The one refusal is a new
    # worker id past MAX_POLLERS, which ends the poll before it reserves anything (429).
    try:
        WorkItem.objects.record_poll(environment_id, worker_id)
    except TooManyPollers:
        raise
    except Exception:
        log.warning("record_poll failed for environment %s", environment_id, exc_info=True)


@endpoint(GET=(ENVIRONMENT,))
def poll(request, caller):
    """GET …/work/poll: reserve the next item for this worker, or null (with its trace context
    in the ``traceparent``/``tracestate`` headers)."""
    block_ms = serializers.integer(_query(request, "block_ms"), "block_ms", minimum=1, maximum=999)
    reclaim = serializers.integer(
        _query(request, "reclaim_older_than_ms"), "reclaim_older_than_ms", minimum=1, maximum=RESERVE_MAX_MS
    )
    worker_id = serializers.worker_id(request.headers.get("Anthropic-Worker-ID"))
    if worker_id:
        _record_poll(caller.environment_id, worker_id)
    result = WorkItem.objects.poll(
        caller.environment_id,
        reclaim_older_than_ms=reclaim or RESERVE_DEFAULT_MS,
        worker_id=worker_id,
        block_ms=block_ms,
    )
    if result.item is None:
        return _json(None)
    log.debug("wire poll: %s handed %s to %s", caller.environment_id, result.item.public_id, worker_id or "-")
    response = _json(serializers.work_object(result.item))
    # The enqueuer's W3C trace context, so a self-hosted worker can join its trace.
    for name, value in serializers.trace_headers(result.item).items():
        response[name] = value
    return response


@endpoint(GET=(ENVIRONMENT,))
def work_list(request, caller):
    """GET …/work: newest first, keyset-paged."""
    limit = serializers.integer(_query(request, "limit"), "limit", minimum=1, maximum=LIST_MAX_LIMIT)
    page = serializers.text(_query(request, "page"), "page")
    items, next_page = WorkItem.objects.list_page(
        caller.environment_id, limit=limit or LIST_DEFAULT_LIMIT, page=page or None
    )
    return _json(serializers.list_object(items, next_page))


@endpoint(GET=EITHER)
def stats(request, caller):
    """GET …/work/stats: depth, pending, oldest_queued_at, workers_polling."""
    return _json(serializers.stats_object(WorkItem.objects.stats(caller.environment_id)))


@endpoint(GET=(API,), POST=(API,))
def work_item(request, caller, work_id):
    """GET …/work/{id}: the work object; POST: merge a metadata patch."""
    if request.method == "GET":
        return _json(serializers.work_object(WorkItem.objects.get_work(caller.environment_id, work_id)))
    data = _body(request, allowed=("metadata",))
    patch = serializers.metadata_patch(data.get("metadata"))
    item = WorkItem.objects.update_metadata(caller.environment_id, work_id, patch)
    return _json(serializers.work_object(item))


@endpoint(POST=(ENVIRONMENT,))
def ack(request, caller, work_id):
    """POST …/work/{id}/ack: queued → starting (idempotent once started)."""
    worker_id = serializers.worker_id(request.headers.get("Anthropic-Worker-ID"))
    item = WorkItem.objects.ack(caller.environment_id, work_id, worker_id=worker_id)
    return _json(serializers.work_object(item))


@endpoint(POST=(ENVIRONMENT,))
def heartbeat(request, caller, work_id):
    """POST …/work/{id}/heartbeat: extend the lease (query string, or the same names in a JSON body)."""
    data = _body(request, allowed=("expected_last_heartbeat", "desired_ttl_seconds"))
    expected = _query(request, "expected_last_heartbeat")
    if expected is None:
        expected = serializers.text(data.get("expected_last_heartbeat"), "expected_last_heartbeat", max_length=10_000)
    if expected is None:
        raise InvalidInput(
            "expected_last_heartbeat is required: NO_HEARTBEAT on the first beat, then the last_heartbeat "
            "the previous beat returned"
        )
    # A sane request is clamped to [HEARTBEAT_TTL_MIN, HEARTBEAT_TTL_MAX]; a number past
    # MAX_DESIRED_TTL is a bad number (400), never a float overflow (500).
    low, high = -MAX_DESIRED_TTL, MAX_DESIRED_TTL
    ttl = serializers.integer(_query(request, "desired_ttl_seconds"), "desired_ttl_seconds", minimum=low, maximum=high)
    if ttl is None:
        ttl = serializers.integer(
            data.get("desired_ttl_seconds"), "desired_ttl_seconds", query=False, minimum=low, maximum=high
        )
    beat = WorkItem.objects.heartbeat(caller.environment_id, work_id, expected, ttl)
    return _json(serializers.heartbeat_object(beat))


@endpoint(POST=EITHER)
def stop(request, caller, work_id):
    """POST …/work/{id}/stop: body {force}; graceful unless force is true."""
    data = _body(request, allowed=("force",))
    force = serializers.boolean(data.get("force"), "force")
    item = WorkItem.objects.stop(caller.environment_id, work_id, force=force)
    return _json(serializers.work_object(item))
