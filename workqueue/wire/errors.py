"""HTTP errors of the wire API, in the Anthropic envelope.

Every refusal is ``{"type": "error", "error": {"type": ..., "message": ..., "details"?: ...}}``.
404, 409 and 412 carry ``x-should-retry: false``: retrying them cannot help, and the SDK
retries a 409 unless told not to. Domain exceptions (``workqueue.exceptions``) are mapped
onto these by :func:`from_domain`.
"""

from __future__ import annotations

from django.http import JsonResponse

from workqueue.exceptions import (
    HeartbeatMismatch,
    InvalidInput,
    InvalidMetadata,
    TooManyPollers,
    WorkConflict,
    WorkNotFound,
)
from workqueue.wire import serializers

NO_RETRY_STATUSES = frozenset({404, 409, 412})


class ApiError(Exception):
    """An HTTP error answered in the Anthropic envelope; do not raise it directly."""

    status = 500
    error_type = "api_error"
    default_message = "internal error"

    def __init__(self, message: str | None = None, *, details: dict | None = None, headers: dict | None = None):
        super().__init__(message or self.default_message)
        self.message = message or self.default_message
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict:
        error: dict = {"type": self.error_type, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"type": "error", "error": error}

    def response(self) -> JsonResponse:
        response = JsonResponse(self.body(), status=self.status)
        if self.status in NO_RETRY_STATUSES:
            response["x-should-retry"] = "false"
        for name, value in self.headers.items():
            response[name] = value
        return response


class BadRequest(ApiError):
    """The request is malformed; the message names the field."""

    status = 400
    error_type = "invalid_request_error"
    default_message = "invalid request"


class InvalidMetadataError(BadRequest):
    """A metadata patch breaks the rules; the message names each problem."""

    def __init__(self, problems: list[str]):
        super().__init__(
            "invalid metadata: " + "; ".join(problems),
            details={"error_code": "invalid_metadata", "problems": problems},
        )


class Unauthenticated(ApiError):
    """No key, an unknown key, or the wrong kind of key for this endpoint."""

    status = 401
    error_type = "authentication_error"
    default_message = "missing or invalid key"


class Forbidden(ApiError):
    """The request was refused before it was read (a failed CSRF check on a session-authenticated POST)."""

    status = 403
    error_type = "permission_error"
    default_message = "forbidden"


class NotFound(ApiError):
    """Nothing by that id is visible to this credential."""

    status = 404
    error_type = "not_found_error"
    default_message = "not found"


class EnvironmentNotFound(NotFound):
    """The path's environment does not exist or is not this credential's."""

    def __init__(self, environment_id: str):
        super().__init__(
            f"environment {environment_id!r} was not found (or this key does not belong to it)",
            details={"error_code": "environment_not_found"},
        )


class MethodNotAllowed(ApiError):
    status = 405
    error_type = "invalid_request_error"

    def __init__(self, method: str, allowed: list[str]):
        super().__init__(
            f"method {method} is not allowed here; use {' or '.join(allowed)}",
            headers={"Allow": ", ".join(allowed)},
        )


class Conflict(ApiError):
    """The work item's state does not allow this transition."""

    status = 409
    error_type = "conflict_error"
    default_message = "the work item is in a conflicting state"


class PreconditionFailed(ApiError):
    """A heartbeat's precondition does not hold; ``details.current_state`` is the server's lease."""

    status = 412
    error_type = "precondition_failed_error"
    default_message = "heartbeat precondition failed"


class LengthRequired(ApiError):
    """A body this server cannot read (chunked, behind a WSGI server that does not de-chunk it)."""

    status = 411
    error_type = "invalid_request_error"
    default_message = (
        "this server cannot read a chunked request body: send the body with a Content-Length header "
        "(the official SDK does); nothing was changed"
    )


class RequestTooLarge(ApiError):
    status = 413
    error_type = "request_too_large"
    default_message = "request body too large"


class TooManyRequests(ApiError):
    """The caller is over a per-caller limit; ``Retry-After`` says when to try again."""

    status = 429
    error_type = "rate_limit_error"
    default_message = "too many requests; retry later"

    def __init__(self, message: str | None = None, *, retry_after: float = 5, details: dict | None = None):
        super().__init__(message, details=details, headers={"Retry-After": str(max(1, round(retry_after)))})


class Overloaded(ApiError):
    """This server process is at a limit of its own; another try (or another process) may succeed."""

    status = 503
    error_type = "overloaded_error"
    default_message = "the server is overloaded; retry later"

    def __init__(self, message: str | None = None, *, retry_after: float = 5):
        super().__init__(message, headers={"Retry-After": str(max(1, round(retry_after)))})


class Unavailable(ApiError):
    """The database could not be reached; the request changed nothing and may be retried."""

    status = 503
    error_type = "api_error"
    default_message = "the work queue database is unavailable; retry shortly"

    def __init__(self, message: str | None = None):
        super().__init__(message, headers={"x-should-retry": "true"})


def from_domain(exc: Exception) -> ApiError | None:
    """Map a ``workqueue.exceptions`` error onto its HTTP error (None when it is not one)."""
    if isinstance(exc, WorkNotFound):
        return NotFound(str(exc))
    if isinstance(exc, WorkConflict):
        return Conflict(str(exc))
    if isinstance(exc, HeartbeatMismatch):
        current = exc.current or {}
        return PreconditionFailed(
            str(exc),
            details={
                "error_code": "heartbeat_precondition_failed",
                "current_state": {
                    "last_heartbeat": serializers.timestamp(current.get("last_heartbeat")),
                    "lease_extended": False,
                    "state": current.get("state"),
                    "ttl_seconds": current.get("ttl_seconds", 0),
                },
            },
        )
    if isinstance(exc, InvalidMetadata):
        return InvalidMetadataError(exc.problems)
    if isinstance(exc, InvalidInput):
        return BadRequest(str(exc))
    if isinstance(exc, TooManyPollers):
        return TooManyRequests(str(exc), retry_after=exc.retry_after, details={"error_code": "too_many_pollers"})
    return None
